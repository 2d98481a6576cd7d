"""What the equilibrium search claims holds for the floats it was given, checked at 50 digits.

Planted equilibria of general V (not ``V = vI``): a chosen SPD ``S`` and heads ``(V_h, B_h)``,
``A = (−Q(S)/2 + K) S⁻¹`` with K skew and ``Q(S) = Σ_h (V_h S B_h S + S B_hᵀ S V_hᵀ)``, so that
S is an equilibrium up to the rounding of forming A. Families: well-conditioned S; S with an
eigenvalue ``1e-8``/``1e-12`` of its largest along a direction v that the heads never push
(``V_hᵀ v = 0``, ``K v = 0``: A stays of order one); and the same tiny eigenvalues with
generic heads (A of order ``1/ε``: near-singular data that the floats may not decide).

The reference never uses gtcontrol's numerics: on the layer's own floats it evaluates F, its
Jacobian and Newton's method in mpmath at 50 digits. Each claim is checked against it: every
equilibrium returned has an exact-arithmetic residual at the rounding level of its size; an
exact equilibrium lies within its Kantorovich radius, positive definite when ``certified``;
the planted exact equilibrium, when positive definite, is in the list unless the list is not
claimed complete; INFEASIBLE never while it exists; and ``linearization_spectrum``'s abscissa
agrees with the spectrum of the exact linearization within its stated ``cov_abscissa_error``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import mpmath as mp
import numpy as np
import pytest

import gtcontrol as gt
from gtcontrol import Layer, Status

#: Digits of the reference arithmetic.
DPS = 50


# --------------------------------------------------------------------------- planted layers


@dataclass(frozen=True)
class Case:
    name: str
    layer: Layer
    S: np.ndarray


def planted(seed: int, d: int, family: str, tiny: float = 0.0, heads: int = 1) -> Case:
    """A general-V layer with the planted equilibrium S (module docstring)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w = rng.uniform(0.5, 2.0, d)
    if tiny:
        w[0] = tiny * w.max()
    s = (q * w) @ q.T
    s = (s + s.T) / 2
    proj = np.eye(d) - np.outer(q[:, 0], q[:, 0]) if family == "structured" else np.eye(d)
    pairs = [
        (proj @ rng.standard_normal((d, d)) / np.sqrt(d), rng.standard_normal((d, d)) / np.sqrt(d))
        for _ in range(heads)
    ]
    quad = sum(v @ s @ b @ s + s @ b.T @ s @ v.T for v, b in pairs)
    k = rng.standard_normal((d, d))
    k = proj @ ((k - k.T) / 2) @ proj
    a = (-quad / 2 + k) @ np.linalg.inv(s)
    return Case(f"{family}-d{d}-s{seed}-t{tiny:g}", Layer(A=a, heads=pairs), s)


# --------------------------------------------------------------------------- mp reference


def _mpm(x: np.ndarray) -> Any:
    return mp.matrix([[mp.mpf(float(v)) for v in row] for row in np.asarray(x)])


class Reference:
    """F, DF and Newton on the layer's own floats, in mpmath at :data:`DPS` digits."""

    def __init__(self, layer: Layer) -> None:
        a, _ = layer.affine_ffn()
        self.d = layer.dim
        self.a = _mpm(a)
        self.heads = [(_mpm(v), _mpm(b)) for v, b in layer.heads]
        self.idx = [(i, j) for i in range(self.d) for j in range(i, self.d)]

    def field(self, s: Any) -> Any:
        m = self.a.copy()
        for v, b in self.heads:
            m += v * s * b
        p = m * s
        return p + p.T

    def _unit(self, k: int) -> Any:
        e = mp.zeros(self.d, self.d)
        i, j = self.idx[k]
        e[i, j] = e[j, i] = 1
        return e

    def jacobian(self, s: Any) -> Any:
        """DF(s) on vech coordinates (its eigenvalues are those of DF on Sym(d))."""
        m = self.a.copy()
        for v, b in self.heads:
            m += v * (s * b)
        n = len(self.idx)
        jac = mp.zeros(n, n)
        for k in range(n):
            h = self._unit(k)
            out = m * h + h * m.T
            for v, b in self.heads:
                t = v * h * b * s
                out += t + t.T
            for r, (i, j) in enumerate(self.idx):
                jac[r, k] = out[i, j]
        return jac

    def vech(self, s: Any) -> Any:
        return mp.matrix([s[i, j] for i, j in self.idx])

    def unvech(self, x: Any) -> Any:
        s = mp.zeros(self.d, self.d)
        for r, (i, j) in enumerate(self.idx):
            s[i, j] = s[j, i] = x[r]
        return s

    def newton(self, start: np.ndarray, iters: int = 60) -> Any | None:
        """The exact root Newton converges to from ``start``, or ``None``."""
        s = _mpm(start)
        scale = mp.mnorm(s, "F")
        for _ in range(iters):
            try:
                step = mp.lu_solve(self.jacobian(s), -self.vech(self.field(s)))
            except ZeroDivisionError:
                return None
            s = s + self.unvech(step)
            if mp.norm(step) <= mp.mpf(10) ** (-(DPS - 8)) * scale:
                return s
        return None


def _lmin(s: Any) -> Any:
    return min(mp.eigsy(s, eigvals_only=True))


def _dist(x: Any, y: np.ndarray) -> float:
    return float(mp.mnorm(x - _mpm(y), "F"))


def _size(layer: Layer, s: np.ndarray) -> float:
    """``‖|A||Σ| + Σ_h|V_h||Σ||B_h||Σ|‖_F``: the size of the terms of F at Σ."""
    a, _ = layer.affine_ffn()
    t = np.abs(a) @ np.abs(s)
    for v, b in layer.heads:
        t = t + np.abs(v) @ np.abs(s) @ np.abs(b) @ np.abs(s)
    return 2.0 * float(np.linalg.norm(t))


# --------------------------------------------------------------------------- the checks


def check_claims(case: Case, res: gt.EquilibriaResult) -> dict[str, int]:
    """Every claim of ``res`` against the mp reference; returns what was checked."""
    layer, d = case.layer, case.layer.dim
    ref = Reference(layer)
    u = 2.0**-53
    seen = {"equilibria": 0, "radius": 0, "certified": 0, "spectrum": 0, "planted_pd": 0}
    for eq in res:
        # the residual in exact arithmetic of the returned floats is at the rounding level
        f = ref.field(_mpm(eq.cov))
        assert float(mp.mnorm(f, "F")) <= 64 * d * u * _size(layer, eq.cov), case.name
        seen["equilibria"] += 1
        if np.isfinite(eq.radius):
            exact = ref.newton(eq.cov)
            assert exact is not None, case.name
            assert _dist(exact, eq.cov) <= eq.radius, (case.name, _dist(exact, eq.cov), eq.radius)
            seen["radius"] += 1
            if eq.certified:
                assert _lmin(exact) > 0, case.name
                seen["certified"] += 1
        elif eq.certified:
            raise AssertionError(f"{case.name}: certified without a radius")
        seen["spectrum"] += _check_spectrum(case, ref, eq)
    planted_root = ref.newton(case.S)
    if planted_root is not None and _lmin(planted_root) > 0:
        seen["planted_pd"] = 1
        assert res.status is not Status.INFEASIBLE, case.name
        tol = [max(e.radius if np.isfinite(e.radius) else 0.0, 1e-8 * np.linalg.norm(e.cov))
               for e in res]  # fmt: skip
        found = any(_dist(planted_root, e.cov) <= t for e, t in zip(res, tol, strict=True))
        if not found:
            assert not (res.status is Status.SUCCESS and res.proved), (case.name, res.message)
    if res.status is Status.INFEASIBLE:
        assert res.proved and len(res) == 0
    if res.proved:
        assert all(e.certified for e in res), case.name
    return seen


def _check_spectrum(case: Case, ref: Reference, eq: Any) -> int:
    """``linearization_spectrum`` at the returned equilibrium against the mp spectrum."""
    d = case.layer.dim
    spec = gt.linearization_spectrum(case.layer, gt.Gaussian(np.zeros(d), eq.cov), method="dense")
    assert spec.success, spec.message
    if not np.isfinite(spec.cov_abscissa_error):
        assert spec.cov_abscissa_error == np.inf  # inf: no bound, never nan for dense n ≤ 500
        return 0
    vals = mp.eig(ref.jacobian(_mpm(eq.cov)), left=False, right=False)
    alpha = max(float(mp.re(v)) for v in vals)
    assert abs(spec.cov_abscissa - alpha) <= spec.cov_abscissa_error, (
        case.name,
        spec.cov_abscissa,
        alpha,
        spec.cov_abscissa_error,
    )
    return 1


def _run(case: Case, **kw: Any) -> dict[str, int]:
    with mp.workdps(DPS):
        res = gt.equilibria(case.layer, **kw)
        return check_claims(case, res)


#: Wall-clock limit of each search whose homotopy is left incomplete (the deflated Newton that
#: follows would otherwise run its full course); the claims must hold whatever the status.
LIMIT = 4.0


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize(("family", "tiny"), [("generic", 0.0), ("structured", 1e-12)])
def test_homotopy_claims_hold_in_extended_precision(d: int, family: str, tiny: float) -> None:
    case = planted(7 * d + 1, d, family, tiny)
    seen = _run(case, time_limit=LIMIT if tiny else None)  # generic: proved within a second
    assert seen["planted_pd"] == 1  # the planted equilibrium is positive definite exactly
    if family == "generic":
        assert seen["certified"] >= 1 and seen["spectrum"] >= 1


def test_the_well_conditioned_planted_equilibrium_is_certified_and_proved_complete() -> None:
    """A well-conditioned planted equilibrium: found, certified, and the list proved complete."""
    for d in (2, 3):
        case = planted(3 * d, d, "generic")
        with mp.workdps(DPS):
            res = gt.equilibria(case.layer)
            seen = check_claims(case, res)
        assert res.method == "homotopy" and res.status is Status.SUCCESS and res.proved
        assert seen["planted_pd"] == 1 and seen["certified"] >= 1 and seen["spectrum"] >= 1


@pytest.mark.parametrize("d", [2, 3])
def test_an_equilibrium_within_rounding_of_the_cone_gives_no_proof_that_none_exists(d: int) -> None:
    """S with λ_min = 1e-8 λ_max and generic heads (A of order 1e8): the float data's exact
    equilibrium near S is positive definite (mpmath), but its end point lies within rounding
    of the cone's boundary. Claimed before as INFEASIBLE "proved"; now neither that nor a
    complete list.
    """
    case = planted(7 * d + 1, d, "generic", 1e-8)
    with mp.workdps(DPS):
        res = gt.equilibria(case.layer, time_limit=LIMIT)
        seen = check_claims(case, res)
    assert seen["planted_pd"] == 1
    assert res.status is not Status.INFEASIBLE and not res.proved, res.message


@pytest.mark.parametrize(("family", "tiny"), [("generic", 0.0), ("structured", 1e-8)])
def test_newton_search_claims_hold_at_d4(family: str, tiny: float) -> None:
    case = planted(41, 4, family, tiny)
    with mp.workdps(DPS):
        res = gt.equilibria(case.layer, n_random=2, time_limit=LIMIT)
        check_claims(case, res)
    assert res.method == "newton" and not res.proved


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize(
    ("family", "tiny"),
    [("generic", 0.0), ("structured", 1e-8), ("structured", 1e-12), ("generic", 1e-8),
     ("generic", 1e-12), ("structured", 1e-4)],
)  # fmt: skip
def test_many_planted_cases_in_extended_precision(
    d: int, seed: int, family: str, tiny: float
) -> None:
    """120 planted cases (2 dimensions × 6 families × 10 seeds), every claim checked."""
    _run(planted(1000 + seed, d, family, tiny, heads=1 + seed % 2), time_limit=LIMIT)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_homotopy_claims_hold_at_d4(seed: int) -> None:
    _run(planted(500 + seed, 4, "generic"), method="homotopy", time_limit=60)


# --------------------------------------------------------------------------- Riccati class


def _riccati_near_singular(seed: int, d: int, lam: float) -> tuple[Layer, np.ndarray, np.ndarray]:
    """A Riccati-class layer (``V = vI`` exactly) whose Ω* has λ_min ≈ ``lam``·λ_max."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w = rng.uniform(0.5, 2.0, d)
    w[0] = lam * w.max()
    omega = (q * w) @ q.T
    omega = (omega + omega.T) / 2
    a = rng.standard_normal((d, d)) + 2.0 * np.eye(d)  # −A not needed Hurwitz
    r = a.T @ omega + omega @ a
    v = -0.5
    b = -r / (2 * v)  # symmetric, R = −v(B + Bᵀ)
    return Layer(A=a, B=b, V=v), a, b


def _mp_omega_lmin(a: np.ndarray, b: np.ndarray, v: float) -> Any:
    """λ_min of the exact Ω solving AᵀΩ + ΩA = R, R = −v(B + Bᵀ) of the layer's floats."""
    d = a.shape[0]
    am, bm = _mpm(a), _mpm(b)
    r = -mp.mpf(v) * (bm + bm.T)
    n = d * d
    kron = mp.zeros(n, n)
    for i in range(d):
        for j in range(d):
            for k in range(d):
                kron[i * d + j, k * d + j] += am[k, i]
                kron[i * d + j, i * d + k] += am[k, j]
    x = mp.lu_solve(kron, mp.matrix([r[i, j] for i in range(d) for j in range(d)]))
    om = mp.matrix([[x[i * d + j] for j in range(d)] for i in range(d)])
    return _lmin((om + om.T) / 2)


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("lam", [1e-3, 1e-15, -1e-15, -1e-3])
def test_riccati_class_claims_follow_the_exact_sign_of_omega(d: int, lam: float) -> None:
    """Ω* near singular: SUCCESS only if Ω_exact ≻ 0, INFEASIBLE only if not; else FAILED.

    At d ≤ 4 the sign is decided in rational arithmetic, so no case is left undecided there:
    FAILED only for an equilibrium that exists but is not accurate in double precision (Ω
    singular to working precision, Σ* = Ω⁻¹ of norm ~1e15). Before, such a case was SUCCESS
    "unique positive-definite equilibrium" with a relative residual of 2e-2, and INFEASIBLE
    followed the sign of the float Ω.
    """
    layer, a, b = _riccati_near_singular(d + 100, d, lam)
    res = gt.equilibria(layer)
    with mp.workdps(DPS):
        lmin = _mp_omega_lmin(a, b, -0.5)
    if res.status is Status.INFEASIBLE:
        assert lmin <= 0 and res.proved, (lmin, res.message)
    elif res.status is Status.SUCCESS:
        assert lmin > 0 and res[0].certified and res[0].residual <= 1e-8, (lmin, res.message)
    else:
        assert res.status is Status.FAILED and not res.proved, res.message
        assert "double precision" in res.message, res.message
    if any(e.certified for e in res):
        assert lmin > 0
    if d <= 4:  # rational arithmetic decides the sign: never left undecided
        assert res.status is not Status.FAILED or (lmin > 0 and len(res) == 1), res.message


@pytest.mark.parametrize(("d", "seed"), [(3, 6), (4, 7), (5, 3)])
def test_riccati_infeasible_is_not_claimed_when_the_exact_omega_is_positive_definite(
    d: int, seed: int
) -> None:
    """Ω_exact ≻ 0 with λ_min ≈ 1e-15 λ_max while the float Ω has λ_min < 0 (mpmath): these
    were INFEASIBLE "proved" (the sign of the float Ω); now FAILED (the float data do not
    give Σ* accurately), with the equilibrium known to exist where rational arithmetic decides
    (d ≤ 4)."""
    layer, a, b = _riccati_near_singular(seed, d, 1e-15)
    with mp.workdps(DPS):
        assert _mp_omega_lmin(a, b, -0.5) > 0
    res = gt.equilibria(layer, cross_check=False)
    assert res.status is Status.FAILED and not res.proved, res.message
    if d <= 4:
        assert "exists" in res.message, res.message
    else:
        assert "undecided" in res.message, res.message


def test_a_layer_near_but_not_in_the_riccati_class_proves_nothing() -> None:
    """``V = vI + 1e-14``: riccati_form accepts it, but the class's proofs are not the layer's."""
    d = 2
    v = -np.eye(d)
    v[0, 1] = 1e-14
    layer = Layer(A=-np.eye(d), heads=[(v, np.eye(d))])  # class layer: no PD equilibrium
    res = gt.equilibria(layer)
    assert res.status is Status.NOT_FOUND and not res.proved and not res.success, res.message
    assert "not exactly" in res.message
    ok = gt.equilibria(Layer(A=np.eye(d), heads=[(v, np.eye(d))]))
    assert ok.status is Status.SUCCESS and not ok.proved and ok[0].certified, ok.message


# --------------------------------------------------------------------------- hostile cases


def test_krylov_spectrum_returns_what_arnoldi_can_give_when_k_is_near_n() -> None:
    """k = n − 1, n and beyond with method="krylov" (n = 15) answered, not an IndexError.

    Reproducer: round3/05_spectrum_krylov_large_k_indexerror.py.
    """
    d = 5
    layer = Layer(A=np.eye(d), V=-np.eye(d), B=np.eye(d))
    eq = gt.Gaussian(np.zeros(d), np.eye(d))
    for k in (13, 14, 15, 40):
        spec = gt.linearization_spectrum(layer, eq, method="krylov", k=k)
        assert spec.success and spec.method == "krylov", spec.message
        assert (
            1 <= spec.eigenvalues.size <= min(k, 13)
            and spec.modes.shape[0] == spec.eigenvalues.size
        )
        np.testing.assert_allclose(spec.eigenvalues, -2.0, atol=1e-9)
        assert (k > 13) == ("k_capped" in spec.stats)
        if k > 13:
            assert "method='dense' gives all" in spec.message
    dense = gt.linearization_spectrum(layer, eq, method="dense", k=40)
    assert dense.eigenvalues.size == 15 and dense.cov_abscissa_error < 1e-12


_TIME = re.compile(r"time limit of ([0-9.e+-]+) s")


@pytest.mark.parametrize(("d", "limit"), [(5, 0.3), (3, 0.05)])
def test_equilibria_messages_name_the_callers_time_limit(d: int, limit: float) -> None:
    """An exhausted search names the caller's ``time_limit``, never an inner remainder.

    Reproducer: round3/07_equilibria_message_wrong_time_limit.py (d = 5: deflated Newton;
    d = 3: the homotopy, then Newton).
    """
    rng = np.random.default_rng(6)
    heads = [
        (rng.standard_normal((d, d)) / np.sqrt(d), rng.standard_normal((d, d)) / np.sqrt(d))
        for _ in range(2)
    ]
    layer = Layer(A=rng.standard_normal((d, d)) / np.sqrt(d), heads=heads)
    res = gt.equilibria(layer, time_limit=limit)
    assert res.status is Status.BUDGET_EXHAUSTED, res.message
    named = _TIME.findall(res.message)
    assert named and all(float(x) == limit for x in named), res.message
