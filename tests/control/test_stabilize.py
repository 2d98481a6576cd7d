"""Stabilizing a given layer (gtcontrol.stabilize) and the linearization spectrum at scale.

Independent evidence:

* the Jacobian of the covariance field is formed here from Kronecker products of the layer's
  dense matrices (nothing of gtcontrol's field or Jacobian), restricted to symmetric matrices by
  a duplication matrix built here, and its eigenvalues by LAPACK confirm the Krylov abscissa;
* the verifying convergence is re-checked by scipy's DOP853 on the full-matrix moment ODE written
  here;
* minimality: ``c (1 − 1e-3)`` misses the rate, and the shift of the spectrum is exactly ``−2c``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from typing import Any

import numpy as np
import pytest
from helpers import covariance_linearization, dense_heads, random_spd
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp
from threadpoolctl import threadpool_limits

import gtcontrol as gt
from gtcontrol import GTControlError, InvalidGaussianError, InvalidParametersError, Status
from gtcontrol import _jobs as jobs

# -- independent references ------------------------------------------------------------------


def field(layer: gt.Layer, m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The moment field written out: dm = Mm + b + Σ V_h m, dΣ = MΣ + ΣMᵀ."""
    a = np.array(layer.A)
    mm = a.copy()
    c = np.array(layer.b).copy()
    for v, b in dense_heads(layer):
        mm += v @ s @ b
        c += v @ m
    return mm @ m + c, mm @ s + s @ mm.T


def kron_spectrum(layer: gt.Layer, s: np.ndarray, basis: np.ndarray | None = None) -> np.ndarray:
    """Every eigenvalue of DF(Σ) on symmetric matrices, by Kronecker products (LAPACK)."""
    a = np.array(layer.A)
    heads = dense_heads(layer)
    if basis is not None:
        a = basis.T @ a @ basis
        heads = [(basis.T @ v @ basis, basis.T @ b @ basis) for v, b in heads]
        s = basis.T @ s @ basis
    return np.linalg.eigvals(covariance_linearization(a, heads, s))


def random_layer(rng: np.random.Generator, d: int, n_heads: int, *, factored: bool) -> gt.Layer:
    if factored:
        dh = max(1, d // (2 * n_heads))
        wq, wk, wv = (rng.standard_normal((n_heads * dh, d)) / math.sqrt(d) for _ in range(3))
        wo = rng.standard_normal((d, n_heads * dh)) / math.sqrt(dh)
        return gt.Layer.from_projections(wq, wk, wv, wo, n_heads=n_heads)
    heads = [
        (rng.standard_normal((d, d)) / math.sqrt(d), rng.standard_normal((d, d)) / math.sqrt(d))
        for _ in range(n_heads)
    ]
    return gt.Layer(heads=heads)


def frozen_last_coordinate(rng: np.random.Generator, d: int) -> gt.Layer:
    """A random two-head layer that never moves its last coordinate (an extracted layer's
    affine one: last rows of ``A`` and every ``V_h`` zero), with mild tilts ``0.1 B_h`` so that
    ``N = 512`` tokens are in the finite-N regime."""
    layer = random_layer(rng, d, 2, factored=False)
    heads = []
    for v_h, b_h in layer.heads:
        v_h = np.array(v_h)
        v_h[-1, :] = 0.0
        heads.append((v_h, 0.1 * np.array(b_h)))
    a = np.array(layer.affine_ffn()[0])
    a[-1, :] = 0.0
    return gt.Layer(a, heads=heads)


def reference_final(layer: gt.Layer, start: gt.Gaussian, T: float) -> tuple[np.ndarray, np.ndarray]:
    d = layer.dim

    def rhs(_t: float, y: np.ndarray) -> np.ndarray:
        dm, ds = field(layer, y[:d], y[d:].reshape(d, d))
        return np.concatenate([dm, ds.ravel()])

    y0 = np.concatenate([start.mean, np.array(start.cov).ravel()])
    sol = solve_ivp(rhs, (0.0, T), y0, method="DOP853", rtol=1e-10, atol=1e-12)
    assert sol.success, sol.message
    return sol.y[:d, -1], sol.y[d:, -1].reshape(d, d)


# -- linearization_spectrum ------------------------------------------------------------------


def test_riccati_class_closed_form() -> None:
    # A = aI, V = vI, B = bI at Σ* = (a/(|v| b)) I: L(H) = (2a − 4a) H = −2aH, K = a + v − a
    layer = gt.Layer(A=0.7 * np.eye(3), V=-2.0 * np.eye(3), B=0.5 * np.eye(3))
    spec = gt.linearization_spectrum(layer, gt.Gaussian(np.zeros(3), 0.7 * np.eye(3)))
    assert spec.success
    assert spec.cov_abscissa == pytest.approx(-1.4, abs=1e-12)
    assert spec.mean_abscissa == pytest.approx(-2.0, abs=1e-12)
    assert spec.numerical_abscissa == pytest.approx(-1.4, abs=1e-12)


def equilibrium_layer(
    rng: np.random.Generator, d: int, n_heads: int, *, factored: bool
) -> tuple[gt.Layer, gt.Gaussian]:
    """A random layer with A, b set by stabilize's own design step (heads untouched)."""
    layer = random_layer(rng, d, n_heads, factored=factored)
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    res = gt.stabilize(layer, target, add="head", rate=0.5, T=1e-3)
    return res.base_layer, target


@pytest.mark.parametrize(("d", "factored"), [(6, False), (12, True), (20, False), (40, True)])
def test_krylov_abscissa_matches_kronecker_reference(d: int, factored: bool) -> None:
    rng = np.random.default_rng(100 + d)
    layer, target = equilibrium_layer(rng, d, 3, factored=factored)
    ref = kron_spectrum(layer, np.array(target.cov))
    krylov = gt.linearization_spectrum(layer, target, method="krylov", k=3)
    assert krylov.success and krylov.method == "krylov"
    top = float(np.max(ref.real))
    assert abs(krylov.cov_abscissa - top) <= 1e-8 * max(1.0, abs(top))
    if d <= 20:
        dense = gt.linearization_spectrum(layer, target, method="dense", k=3)
        assert abs(dense.cov_abscissa - top) <= 1e-10 * max(1.0, abs(top))
    # the numerical abscissa bounds the spectral abscissa from above
    assert krylov.numerical_abscissa >= top - 1e-8


def test_krylov_widens_its_basis_when_twenty_vectors_do_not_converge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cluster at the edge of the spectrum defeats a 20-vector Arnoldi basis (a random-init
    ViT layer at ``I ⊕ 0``: 2,000 restarts without convergence); the spectrum then retries with
    120 vectors. Forced here by one allowed restart for the narrow basis, which this operator
    does not converge in (checked), the wide basis gives the Kronecker reference's abscissa."""
    import scipy.sparse.linalg as sla

    import gtcontrol.analysis.stability as stability
    from gtcontrol._status import Budget

    rng = np.random.default_rng(140)
    layer, target = equilibrium_layer(rng, 40, 3, factored=True)
    op = stability.SymOperator(layer, np.array(target.cov), Budget(None))
    with pytest.raises(sla.ArpackNoConvergence):
        sla.eigs(
            op.linear_operator(),
            k=5,
            which="LR",
            ncv=20,
            tol=1e-10,
            v0=stability._default_start(op),
            maxiter=1,
        )
    monkeypatch.setattr(stability, "_FIRST_MAXITER", 1)
    krylov = gt.linearization_spectrum(layer, target, method="krylov", k=3)
    assert krylov.success, krylov.message
    top = float(np.max(kron_spectrum(layer, np.array(target.cov)).real))
    assert abs(krylov.cov_abscissa - top) <= 1e-8 * max(1.0, abs(top))


def test_rotation_is_skew_at_the_designed_equilibrium(rng: np.random.Generator) -> None:
    layer, target = equilibrium_layer(rng, 7, 2, factored=False)
    s = np.array(target.cov)
    m_star = np.array(layer.A) + sum((v @ s @ b for v, b in dense_heads(layer)), np.zeros((7, 7)))
    assert np.max(np.abs(m_star @ s + s @ m_star.T)) <= 1e-12 * np.linalg.norm(s) * np.linalg.norm(
        m_star
    )


def test_singular_target_on_frozen_coordinate() -> None:
    """An affine coordinate the layer never moves: S ⊕ 0 works, spectrum = reduced reference."""
    rng = np.random.default_rng(7)
    d = 5
    layer = random_layer(rng, d, 2, factored=False)
    heads = []
    for v, b in layer.heads:
        vt = np.zeros((d + 1, d + 1))
        vt[:d, :d] = v
        bt = np.zeros((d + 1, d + 1))
        bt[:d, :d] = b
        bt[:d, d] = rng.standard_normal(d)  # a query bias through the affine coordinate
        heads.append((vt, bt))
    aug = gt.Layer(heads=heads)
    s = np.zeros((d + 1, d + 1))
    s[:d, :d] = random_spd(rng, d)
    m = np.append(rng.standard_normal(d), 1.0)
    res = gt.stabilize(aug, gt.Gaussian(m, s), add="head", rate=1.0)
    assert res.success, res.message
    assert res.spectrum.active_dim == d
    basis = np.eye(d + 1)[:, :d]
    ref = kron_spectrum(res.layer, s, basis)
    assert res.spectrum.cov_abscissa == pytest.approx(float(np.max(ref.real)), abs=1e-9)
    # the affine coordinate stays frozen: last rows of A, b and every V_h are zero
    assert not np.any(res.layer.A[d]) and res.layer.b[d] == 0.0
    assert all(not np.any(v[d]) for v, _ in res.layer.heads)


def test_spectrum_refuses_non_equilibrium_and_moving_singular_direction() -> None:
    layer = gt.Layer(A=np.eye(2), V=-np.eye(2), B=np.eye(2))
    with pytest.raises(InvalidParametersError, match="not an equilibrium"):
        gt.linearization_spectrum(layer, gt.Gaussian(np.zeros(2), 2.0 * np.eye(2)))
    with pytest.raises(InvalidGaussianError, match="active subspace"):
        gt.linearization_spectrum(layer, gt.Gaussian(np.zeros(2), np.diag([1.0, 0.0])))
    for bad in ({"k": 0}, {"method": "qr"}, {"tol": -1.0}, {"time_limit": float("nan")}):
        with pytest.raises(GTControlError):
            gt.linearization_spectrum(layer, gt.Gaussian(np.zeros(2), np.eye(2)), **bad)


# -- stabilize: head family --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "n_heads", "factored", "seed"),
    [(8, 2, False, 1), (8, 3, True, 2), (16, 4, True, 3), (24, 2, False, 4), (64, 4, True, 5)],
)
def test_head_family_random_layers(d: int, n_heads: int, factored: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, d, n_heads, factored=factored)
    layer = layer.replace(heads=[(2.0 * v, b) for v, b in layer.heads]) if not factored else layer
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    rate = 0.8
    res = gt.stabilize(layer, target, add="head", rate=rate)
    assert res.success, res.message
    # the tilted head, then its uniform companion (κP, 0), κ = sc − σ
    assert res.family == "head" and res.layer.n_heads == layer.n_heads + 2
    v_c, b_c = res.layer.heads[-1]
    assert not np.any(b_c)
    assert np.allclose(v_c, (res.scale * res.c - res.mean_shift) * np.eye(d), rtol=0, atol=1e-12)
    # the given heads are kept exactly, in order
    for (v0, b0), (v1, b1) in zip(layer.heads, res.layer.heads, strict=False):
        assert np.array_equal(v0, v1) and np.array_equal(b0, b1)
    if factored:
        assert res.layer.factored_heads is layer.factored_heads
    # local certificate, recomputed independently
    ref = kron_spectrum(res.layer, np.array(target.cov)) if d <= 24 else None
    assert res.spectrum.abscissa <= -rate
    if d * (d + 1) // 2 > 1500:
        # a Krylov base: the final spectrum is the base's shifted by −2c, the identity checked
        # on random directions; a Krylov run of its own on the final layer agrees
        assert res.spectrum.method == "shifted" and res.spectrum.stats["shift"] == -2.0 * res.c
        assert res.spectrum.stats["identity_residual"] <= 1e-12
        own = gt.linearization_spectrum(res.layer, target, k=1, method="krylov")
        assert own.cov_abscissa == pytest.approx(res.spectrum.cov_abscissa, rel=0, abs=1e-8)
        assert own.mean_abscissa == pytest.approx(res.spectrum.mean_abscissa, rel=0, abs=1e-10)
    if ref is not None:
        assert float(np.max(ref.real)) <= -rate + 1e-9
        base_ref = kron_spectrum(res.base_layer, np.array(target.cov))
        # the added head shifts the covariance spectrum by exactly −2c
        assert float(np.max(ref.real)) == pytest.approx(
            float(np.max(base_ref.real)) - 2.0 * res.c, abs=1e-9
        )
    # the mean matrix is shifted by exactly −σ, whatever the gauge s
    k_base = gt.mean_matrix(res.base_layer, np.array(target.cov))
    k_final = gt.mean_matrix(res.layer, np.array(target.cov))
    assert np.allclose(k_final, k_base - res.mean_shift * np.eye(d), rtol=0, atol=1e-10 * d)
    assert res.spectrum.mean_abscissa <= -rate
    # minimality: 0.999 c misses the covariance rate, 0.999 σ the mean's (closed-form shifts)
    assert res.base.cov_abscissa - 2.0 * 0.999 * res.c > -rate
    if res.mean_shift > 0:
        assert res.base.mean_abscissa - 0.999 * res.mean_shift > -rate
    # verification, by an independent integrator
    for check in res.verification:
        assert check.converged
    m, s = reference_final(res.layer, _start(res, 1), float(res.verification[1].t[-1]))
    assert np.linalg.norm(s - target.cov) <= 1e-6 * np.linalg.norm(target.cov)
    assert np.linalg.norm(m - target.mean) <= 1e-6 * max(1.0, np.linalg.norm(target.mean))
    # the verification's own integration (rtol 1e-7) ends where the 1e-10 reference does, to
    # 1/50 of the 1e-6 it must reach (it restarts at half depth, where it checks the screens'
    # test). The difference follows the step sequence: a last-bit change of the gauge s (same
    # moment model) moved it from 1.05e-9 to 3.1e-9 on one row here, and an s four times
    # larger (an earlier, tail version of the own-logit bound) to 6.6e-9; it was 3e-10 before
    # that restart. On the d = 24 row it is 1.04e-8 to 1.13e-8 (against 7.6e-10), by the
    # BLAS's threads and the round-off of the designed A alone: hence 2e-8, not 1e-8
    ref_err = np.linalg.norm(s - target.cov) / np.linalg.norm(target.cov)
    assert abs(float(res.verification[1].cov_error[-1]) - ref_err) <= 2e-8


def test_a_shift_that_does_not_hold_is_refused() -> None:
    """``shifted_spectrum`` checks ``L = L_base + σI`` on random directions instead of assuming
    it: the true shift of an added head passes, a shift off by 1e-6 does not (the caller then
    runs Krylov on the layer itself)."""
    from gtcontrol._status import Budget
    from gtcontrol.analysis.stability import equilibrium_residuals, shifted_spectrum

    rng = np.random.default_rng(5)
    d = 64
    layer = random_layer(rng, d, 4, factored=True)
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    res = gt.stabilize(layer, target, add="head", rate=0.8, T=0.5)
    basis = np.eye(d)
    residual = equilibrium_residuals(res.layer, target)
    for shift, holds in ((-2.0 * res.c, True), (-2.0 * res.c + 1e-6, False)):
        spec = shifted_spectrum(
            res.layer, res.base_layer, target, basis, res.base, shift, Budget(None), residual, 0.0
        )
        assert (spec is not None) is holds
        if spec is not None:
            assert spec.cov_abscissa == res.base.cov_abscissa + shift
            assert max(spec.stats["residuals"]) <= 1e-10 * abs(spec.cov_abscissa)


def _start(res: gt.Stabilization, i: int) -> gt.Gaussian:
    return res.starts[i]


def test_head_family_global_bound_holds_for_weak_heads() -> None:
    rng = np.random.default_rng(11)
    d = 5
    layer = gt.Layer(heads=[(0.05 * rng.standard_normal((d, d)), np.eye(d))])
    res = gt.stabilize(layer, gt.Gaussian(np.zeros(d), np.eye(d)), add="head", rate=1.0)
    assert res.success and res.global_certificate, res.message
    assert res.c > res.q
    # from a far-away start nothing blows up and the bound of the message holds
    far = gt.Gaussian(np.zeros(d), 50.0 * np.eye(d))
    traj = gt.simulate(res.layer, far, 30.0)
    assert traj.status is Status.SUCCESS
    assert np.linalg.norm(traj.final.cov - np.eye(d)) <= 1e-6


def test_no_extra_needed_when_heads_already_stabilize() -> None:
    layer = gt.Layer(V=-1.0 * np.eye(3), B=np.eye(3))
    res = gt.stabilize(layer, gt.Gaussian(np.ones(3), np.eye(3)), add="head", rate=0.5)
    assert res.success and res.family == "none" and res.c == 0.0
    assert res.layer.n_heads == 1


def test_mean_only_instability_gets_the_uniform_head_alone() -> None:
    """Heads that already stabilize the covariance and a uniform head ``(3I, 0)`` that makes
    the mean unstable: ``c = 0`` and the extra is the uniform head ``(−σI, 0)`` alone, with the
    minimal ``σ = α(K) + ρ = 2 + 0.5`` (``A = I`` from the equilibrium equation, ``K = A + V(I +
    Σ*B) + 3I = 2I``)."""
    layer = gt.Layer(heads=[(-np.eye(3), np.eye(3)), (3.0 * np.eye(3), np.zeros((3, 3)))])
    res = gt.stabilize(layer, gt.Gaussian(np.ones(3), np.eye(3)), add="head", rate=0.5)
    assert res.success, res.message
    assert res.c == 0.0 and res.mean_shift == pytest.approx(2.5, rel=2e-4)
    assert res.layer.n_heads == 3
    v_c, b_c = res.layer.heads[-1]
    assert not np.any(b_c) and np.allclose(v_c, -res.mean_shift * np.eye(3), rtol=0, atol=1e-14)
    assert res.spectrum.mean_abscissa == pytest.approx(2.0 - res.mean_shift, abs=1e-12)
    assert res.spectrum.mean_abscissa <= -0.5


def test_a_verification_that_fails_says_why() -> None:
    """A start of rank 1 keeps rank 1 (congruence) and settles at another equilibrium; a depth
    too short leaves the flow still moving. Both are ``FAILED``, each with its evidence."""
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    target = gt.Gaussian(np.zeros(2), np.eye(2))
    rank_one = gt.Gaussian(np.zeros(2), np.diag([1.0, 0.0]))
    res = gt.stabilize(layer, target, add="head", initial=rank_one)
    assert res.status is Status.FAILED and res.local_certificate
    assert "settled at another equilibrium" in res.verification[0].message
    short = gt.stabilize(layer, target, add="head", T=0.5)
    assert short.status is Status.FAILED
    assert all("still moving there" in v.message for v in short.verification)


def _with_c(res: gt.Stabilization, c: float) -> gt.Layer:
    """``res.layer`` with the added head and its companion rebuilt for another ``c`` (here,
    not by gtcontrol): ``A = A_base + cI``, ``(−s c I, B₀)``, ``((s c − σ) I, 0)``, and ``b``
    solving the mean equation at the target with the field written out in this file."""
    d = res.layer.dim
    heads = [(np.array(v), np.array(b)) for v, b in res.layer.heads]
    (_, b0), (_, zero) = heads[-2], heads[-1]
    heads[-2] = (-res.scale * c * np.eye(d), b0)
    heads[-1] = ((res.scale * c - res.mean_shift) * np.eye(d), zero)
    lay = gt.Layer(np.array(res.base_layer.A) + c * np.eye(d), b=np.zeros(d), heads=heads)
    dm, _ = field(lay, np.array(res.target.mean), np.array(res.target.cov))
    return lay.replace(b=-dm)


def _stuck_at_the_local_minimum() -> tuple[gt.Layer, gt.Gaussian]:
    """Random strong heads (seed 23, found by a search over seeds; d = 2) and a target whose
    identity start settles away from it at the local minimum ``c``."""
    rng = np.random.default_rng(23)
    d = int(rng.integers(2, 7))
    n_heads = int(rng.integers(1, 4))
    layer = random_layer(rng, d, n_heads, factored=False)
    scale = float(rng.choice([1.0, 3.0, 6.0]))
    layer = layer.replace(heads=[(scale * v, b) for v, b in layer.heads])
    target = gt.Gaussian(rng.standard_normal(d) * rng.choice([0.0, 1.0, 3.0]), random_spd(rng, d))
    return layer, target


def test_c_grows_until_the_identity_start_converges() -> None:
    """Random strong heads (found by a search over seeds) whose identity start settles away
    from the target at the local minimum ``c``: ``stabilize`` screens the starts and grows
    ``c`` until they converge. An independent integration (DOP853 on the field written here,
    the layer rebuilt here) confirms both sides: at the local minimum the identity start ends
    far from ``Σ*``, at the chosen ``c`` it converges; the chosen ``c`` is within the ladder's
    resolution ``2^(1/8)`` of one that fails in the screen."""
    layer, target = _stuck_at_the_local_minimum()
    d = layer.dim
    res = gt.stabilize(layer, target, add="head", rate=1.0)
    assert res.success, res.message
    c_loc = res.stats["c_local"]
    assert res.stats["c_screens"] >= 2
    assert 1.0 < res.c / c_loc <= 64.0
    assert "× the local minimum" in res.message and "identity start" in res.message
    # the local minimum: the certificate's c, 0.999 of it misses the rate
    assert res.base.cov_abscissa - 2.0 * 0.999 * c_loc > -1.0
    depth = float(res.verification[0].t[-1])
    identity = res.starts[0]
    assert np.array_equal(np.array(identity.cov), np.eye(d))
    for c, converges in ((c_loc, False), (res.c, True)):
        _, s = reference_final(_with_c(res, c), identity, depth)
        err = np.linalg.norm(s - target.cov) / np.linalg.norm(target.cov)
        assert bool(err <= 1e-6) is converges, (c, err)
    # the largest c that failed its screen (half the default depth) fails it here too
    c_failed = res.stats["c_failed"]
    assert c_loc <= c_failed < res.c <= 2.0 ** (1 / 8) * c_failed * (1 + 1e-12)
    _, s = reference_final(_with_c(res, c_failed), identity, 0.5 * depth)
    assert np.linalg.norm(s - target.cov) / np.linalg.norm(target.cov) > 1e-2
    # the rebuilt layer at the chosen c is the stabilized layer, to rounding
    assert np.allclose(_with_c(res, res.c).b, res.layer.b, rtol=0, atol=1e-9)


def test_a_start_stuck_at_the_local_minimum_stops_halfway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the local minimum ``c`` a verification stops at half its depth when the start is
    not within the screens' 1e-2 there (``c`` is about to grow, the rest would be wasted);
    the other start runs to the full depth. With no doubling allowed, the result at the local
    minimum shows it, and an independent integration confirms the error at that depth."""
    import gtcontrol.control.stabilization._head as head

    monkeypatch.setattr(head, "_C_DOUBLINGS", 0)
    layer, target = _stuck_at_the_local_minimum()
    res = gt.stabilize(layer, target, add="head", rate=1.0)
    assert res.status is Status.FAILED and res.local_certificate
    assert res.c == res.stats["c_local"] and res.stats["c_screens"] == 0
    identity, perturbed = res.verification
    full = float(perturbed.t[-1])
    assert perturbed.converged and "stopped at depth" not in perturbed.message
    assert float(identity.t[-1]) == pytest.approx(0.5 * full, rel=1e-12)
    assert "stopped at depth" in identity.message and not identity.converged
    _, s = reference_final(_with_c(res, res.c), res.starts[0], 0.5 * full)
    err = np.linalg.norm(s - target.cov) / np.linalg.norm(target.cov)
    assert err > 1e-2
    assert float(identity.cov_error[-1]) == pytest.approx(err, rel=1e-4)


def test_a_slow_start_that_still_closes_in_is_not_stopped_halfway() -> None:
    """A start far below the target (``Σ0 = 1e-9 Σ*``) grows towards it exponentially: still
    at relative error ~1 halfway, but fast in its own units, so the verification at the local
    minimum goes on (extended while the error falls) and converges; ``c`` stays at its
    minimum. A test of the error alone (``> 1e-2`` halfway) would have grown ``c``."""
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    target = gt.Gaussian(np.zeros(2), np.diag([1.0, 2.0]))
    tiny = gt.Gaussian(np.zeros(2), 1e-9 * np.diag([1.0, 2.0]))
    res = gt.stabilize(layer, target, add="head", initial=tiny)
    assert res.success, res.message
    assert res.c == res.stats["c_local"] and res.stats["c_screens"] == 0
    (v,) = res.verification
    # the first segment's 17 depths end halfway through the default depth
    assert float(v.cov_error[16]) > 0.9  # far from the target there
    assert "stopped at depth" not in v.message and "was extended" in v.message
    _, s = reference_final(res.layer, tiny, float(v.t[-1]))
    assert np.linalg.norm(s - target.cov) <= 1e-6 * np.linalg.norm(target.cov)


def _out_of_time_at_the_start(traj: gt.Trajectory) -> gt.Trajectory:
    """What simulate returns when its time limit ends before the first step: the start."""
    return dataclasses.replace(
        traj,
        t=traj.t[:1],
        mean=traj.mean[:1],
        cov=traj.cov[:1],
        rank=traj.rank[:1],
        status=Status.BUDGET_EXHAUSTED,
        message="stopped: the time limit of 0 s was reached",
    )


def test_time_running_out_as_a_verification_continues_is_an_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A verification continues past half its depth from its end state there; when the time
    runs out before that continuation's first step (found on MiniLM layer 1 with a 20 s
    limit: an ``IndexError``), the result says the verification was cut, and is not
    ``SUCCESS``."""
    import gtcontrol.control.stabilization._verify as stab

    real = stab.simulate
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    target = gt.Gaussian(np.zeros(2), np.diag([1.0, 2.0]))
    starts = [gt.Gaussian(np.zeros(2), np.eye(2)), gt.Gaussian(np.ones(2), 2.0 * np.eye(2))]

    def out_of_time_on_continuing(*args: object, **kw: object) -> gt.Trajectory:
        traj = real(*args, **kw)  # type: ignore[arg-type]
        g0 = args[1]
        assert isinstance(g0, gt.Gaussian)
        if any(np.array_equal(np.asarray(g0.cov), np.asarray(g.cov)) for g in starts):
            return traj
        return _out_of_time_at_the_start(traj)

    monkeypatch.setattr(stab, "simulate", out_of_time_on_continuing)
    res = gt.stabilize(layer, target, add="head", initial=starts)
    assert res.status is Status.BUDGET_EXHAUSTED, res.message
    depth = None
    for v in res.verification:
        assert v.status is Status.BUDGET_EXHAUSTED and not v.converged
        assert len(v.t) == 17  # the first half only
        depth = float(v.t[-1]) if depth is None else depth
        assert float(v.t[-1]) == depth
    assert res.local_certificate and "did not converge" in res.message


def test_time_running_out_in_the_far_starts_first_half_is_an_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The far start's first half runs alone before the other checks; when the time runs out
    there before its first step, that verification is cut (one depth, ``BUDGET_EXHAUSTED``),
    the near start is still verified, and the result is not ``SUCCESS``."""
    import gtcontrol.control.stabilization._verify as stab

    real = stab.simulate
    calls: list[int] = []

    def out_of_time_first(*args: object, **kw: object) -> gt.Trajectory:
        traj = real(*args, **kw)  # type: ignore[arg-type]
        calls.append(len(calls))
        if len(calls) > 1:
            return traj
        return _out_of_time_at_the_start(traj)

    monkeypatch.setattr(stab, "simulate", out_of_time_first)
    layer, target = _stuck_at_the_local_minimum()
    res = gt.stabilize(layer, target, add="head", rate=1.0)
    assert res.status is Status.BUDGET_EXHAUSTED, res.message
    assert res.c == res.stats["c_local"] and res.stats["c_screens"] == 0
    identity, perturbed = res.verification
    assert identity.status is Status.BUDGET_EXHAUSTED and len(identity.t) == 1
    assert perturbed.converged and len(perturbed.t) > 17


def test_time_limit_holds_while_c_grows() -> None:
    """A d = 24 layer whose identity start settles elsewhere at the local minimum (seed found
    by a search): unlimited, ``c`` grows by screens to a success; with a time limit that ends
    in the first checks, the screens or the final checks, the call ends within the contract's
    ``max(1 s, 10 %)`` as ``BUDGET_EXHAUSTED``, and never blames a certificate it did not
    finish computing."""
    rng = np.random.default_rng(1020)
    d = 24
    layer = random_layer(rng, d, 3, factored=False)
    layer = layer.replace(heads=[(6.0 * v, b) for v, b in layer.heads])
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    clock = time.perf_counter()
    full = gt.stabilize(layer, target, add="head", rate=1.0)
    total = time.perf_counter() - clock
    assert full.success and full.stats["c_screens"] >= 2, full.message
    assert full.c > full.stats["c_local"]
    for share in (0.35, 0.65, 0.85):
        limit = share * total
        clock = time.perf_counter()
        res = gt.stabilize(layer, target, add="head", rate=1.0, time_limit=limit)
        took = time.perf_counter() - clock
        # seen once at 4.37 s for a 2.92 s limit (the full run 3.43 s) in a two-worker run of
        # this file, not since beside two to five CPU-bound processes: say where it ended
        assert took <= limit + 1.0, (share, limit, took, res.status, res.message, res.stats)
        assert res.status in (Status.BUDGET_EXHAUSTED, Status.SUCCESS), res.message
        if res.success:
            assert all(v.converged for v in res.verification)
        assert "spectral abscissa nan" not in res.message


def test_time_limit_holds_while_the_design_rate_doubles() -> None:
    """A kept head in its hard-maximum regime (``B = 8I``): unlimited, the design rate doubles
    three times. With a limit that ends in the first round, a doubled one or the last, the call
    ends within the contract's ``max(1 s, 10 %)`` as ``BUDGET_EXHAUSTED`` (or, done in time, with
    the unlimited verdict) and names the call's limit, not what was left of it when the token
    run started."""
    layer = gt.Layer(V=0.5 * np.eye(2), B=8.0 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    clock = time.perf_counter()
    full = gt.stabilize(layer, target, add="head", rate=1.0, token_check=256)
    total = time.perf_counter() - clock
    assert full.stats["token_doublings"] == 3
    for share in (0.2, 0.5, 0.8):
        limit = share * total
        clock = time.perf_counter()
        res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=256, time_limit=limit)
        assert time.perf_counter() - clock <= limit + 1.0
        # finished within the limit after all (a quieter machine): the unlimited verdict
        assert res.status is Status.BUDGET_EXHAUSTED or (
            res.status is full.status and res.stats["token_doublings"] == 3
        ), res.message
        if "token check was cut short" in res.message:
            assert f"the time limit of {limit:g} s was reached" in res.message


def test_a_time_limit_reached_where_the_rate_would_double_is_not_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CI flake of the test above, made exact: the first round's token check fails and
    the time limit is reached just then. The doubling search is unfinished, so the result is
    ``BUDGET_EXHAUSTED`` naming the rate it stopped at, never ``FAILED``."""
    from gtcontrol import _status
    from gtcontrol.control.stabilization import _head

    layer = gt.Layer(V=0.5 * np.eye(2), B=8.0 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    real = _head._only_tokens_failed
    spent = {"now": False}

    def tokens_failed_then_out_of_time(res: gt.Stabilization) -> bool:
        out = real(res)
        spent["now"] = spent["now"] or out
        return out

    def exhausted(self: _status.Budget) -> bool:
        return spent["now"]

    monkeypatch.setattr(_head, "_only_tokens_failed", tokens_failed_then_out_of_time)
    monkeypatch.setattr(_status.Budget, "exhausted", property(exhausted))
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=256, time_limit=60.0)
    assert res.status is Status.BUDGET_EXHAUSTED, res.message
    assert res.stats["token_doublings"] == 0
    assert "the time limit of 60 s was reached before the design rate doubled from 1" in (
        res.message
    )
    assert res.local_certificate and res.token_certificate is not None
    assert res.token_certificate.status is Status.INFEASIBLE


def test_a_rank_deficient_start_is_not_screened_and_says_why() -> None:
    """The covariance flow is a congruence: a start of rank 1 in d = 2 never reaches a
    positive definite target, so no ``c`` is tried for it and its verification says so."""
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    target = gt.Gaussian(np.zeros(2), np.eye(2))
    rank_one = gt.Gaussian(np.zeros(2), np.diag([1.0, 0.0]))
    res = gt.stabilize(layer, target, add="head", initial=rank_one, token_check=64)
    assert res.status is Status.FAILED
    assert res.stats["c_screens"] == 0 and res.c == res.stats["c_local"]
    assert "keeps the rank, so it never reaches Σ*" in res.verification[0].message
    # c does not grow for it, so the token check beside it runs to its end and is reported
    assert res.token_certificate is not None
    assert res.token_certificate.status is not Status.BUDGET_EXHAUSTED
    assert "not checked to the end" not in res.message


# -- stabilize: gains family ------------------------------------------------------------------


def test_gains_infeasible_is_proven_and_true() -> None:
    """Every head drives the instability: the trace proof refuses; random gains confirm it."""
    d = 3
    layer = gt.Layer(heads=[(0.5 * np.eye(d), np.eye(d)), (0.3 * np.eye(d), np.eye(d))])
    target = gt.Gaussian(np.zeros(d), np.eye(d))
    res = gt.stabilize(layer, target, add="gains", rate=1.0)
    assert res.status is Status.INFEASIBLE and not res.success
    assert "mean eigenvalue" in res.message
    rng = np.random.default_rng(0)
    for g in rng.uniform(0, 1, (20, 2)):
        gained = gt.Layer(heads=[(gi * v, b) for gi, (v, b) in zip(g, layer.heads, strict=True)])
        probe = gt.stabilize(gained, target, add="head", rate=1.0, T=1e-3)
        assert probe.base.abscissa > -1.0


def test_gains_family_finds_certified_gains() -> None:
    """A strongly stabilizing head and a destabilizing one: damping the second one suffices."""
    d = 4
    rng = np.random.default_rng(3)
    # at Σ* = I with V_h = v_h I, B_h = I: α(K) = Σ g_h v_h, so g_bad ≈ 1/2 is the answer
    good = (-1.5 * np.eye(d), np.eye(d))
    bad = (np.eye(d) + 0.05 * rng.standard_normal((d, d)), np.eye(d))
    layer = gt.Layer(heads=[good, bad])
    target = gt.Gaussian(np.zeros(d), np.eye(d))
    res = gt.stabilize(layer, target, add="gains", rate=1.0)
    assert res.success, res.message
    assert res.gains is not None and np.all((0 <= res.gains) & (res.gains <= 1))
    assert res.spectrum.abscissa <= -1.0
    assert res.change == pytest.approx(0.5, abs=0.05)
    assert res.change == pytest.approx(float(np.linalg.norm(1 - res.gains)))
    # the change is not larger than needed along its own direction
    g_less = 1 - 0.999 * (1 - res.gains)
    gained = gt.Layer(heads=[(gi * v, b) for gi, (v, b) in zip(g_less, layer.heads, strict=True)])
    probe = gt.stabilize(gained, target, add="head", rate=1.0, T=1e-3)
    assert probe.base.abscissa > -1.0


def test_auto_picks_the_smaller_function_change() -> None:
    d = 4
    layer = gt.Layer(heads=[(-1.5 * np.eye(d), np.eye(d)), (np.eye(d), np.eye(d))])
    res = gt.stabilize(layer, gt.Gaussian(np.zeros(d), np.eye(d)), add="auto", rate=1.0)
    assert res.success
    assert len(res.candidates) == 2
    ok = [c for c in res.candidates if c.success]
    assert res.function_change == min(c.function_change for c in ok)


# -- tokens ---------------------------------------------------------------------------------


def _start_error(start: gt.Gaussian, target: gt.Gaussian) -> float:
    """The default depth's ``e0``: the start's largest relative error (covariance, or mean in
    units of ``max(|m*|, sqrt(tr Σ*))``), at least ``1e-3``."""
    return float(
        max(
            1e-3,
            np.linalg.norm(start.cov - target.cov) / np.linalg.norm(target.cov),
            np.linalg.norm(start.mean - target.mean)
            / max(np.linalg.norm(target.mean), math.sqrt(np.trace(target.cov))),
        )
    )


def test_token_check_passes_and_reports_the_untouched_layer() -> None:
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=256)
    assert res.success, res.message
    tc = res.token_certificate
    assert tc is not None and tc.w2 <= 2.0 * tc.floor
    assert res.untouched_tokens is not None and res.untouched_tokens.w2 > tc.w2
    # the tokens start from the perturbed target and go until its moments are within 1e-3:
    # (ln(e0/1e-3) + 3)/rate with e0 its largest relative error
    e0 = _start_error(res.starts[-1], target)
    assert tc.T == pytest.approx((math.log(e0 / 1e-3) + 3.0) / 1.0, rel=1e-12)


def test_the_untouched_layers_tokens_stop_once_they_have_left() -> None:
    """A layer whose tokens blow up: its token run stops at the first of the depths T/16, T/8,
    … at which they are 10 sampling floors away (or out of range), far short of T."""
    layer = gt.Layer(V=1.5 * np.eye(2), B=0.5 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=256)
    assert res.success, res.message
    tc, un = res.token_certificate, res.untouched_tokens
    assert tc is not None and un is not None
    assert un.T < tc.T
    assert un.T in [tc.T / 2**k for k in range(1, 5)]
    assert un.status is Status.OVERFLOW or un.w2 > 10.0 * un.floor
    assert "untouched layer's tokens" in res.message


def test_the_untouched_layers_tokens_run_once_while_c_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The given layer's token run does not depend on ``c``: when ``c`` grows and every check
    runs again, it is kept, not run again (the stabilized layer's tokens run at each ``c``)."""
    from gtcontrol.control.stabilization import _tokens as tokens_module

    calls: list[str | None] = []
    real = tokens_module.design_token_certificate

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("method"))  # the given layer's by RK4, the stabilized adaptive
        return real(*args, **kwargs)

    monkeypatch.setattr(tokens_module, "design_token_certificate", counted)
    layer, target = _stuck_at_the_local_minimum()
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=64)
    assert res.stats["c_screens"] >= 2 and res.c > res.stats["c_local"]
    # the stabilized layer's: at c and at each doubled design rate; none at the local minimum,
    # where the identity start's first half settled elsewhere before any other check ran
    assert calls.count("RK45") == 1 + res.stats["token_doublings"]
    assert calls.count("rk4") == 1
    assert res.untouched_tokens is not None and res.token_certificate is not None
    assert res.untouched_tokens.initial == res.token_certificate.initial


def test_the_token_run_at_the_local_minimum_stops_when_c_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the local minimum ``c`` a start that fails its screen halfway makes ``c`` grow: the
    stabilized layer's token run at that ``c``, beside it, is cancelled (its result is not
    needed), and the tokens are checked at the ``c`` chosen. (The far start's first half
    normally runs before the others, and its failure skips them: here it is not run first, as
    for a start other than the farthest that fails halfway.)"""
    from gtcontrol._status import _CANCEL
    from gtcontrol.control.stabilization import _call as call_module
    from gtcontrol.control.stabilization import _tokens as tokens_module

    monkeypatch.setattr(call_module.Call, "first_segment", lambda self, final, screen_at: None)

    seen: list[tuple[bool, Any]] = []
    real = tokens_module.design_token_certificate

    def watched(*args: Any, **kwargs: Any) -> Any:
        chain = _CANCEL.get()  # the (event, reason) pairs of the enclosing cancellable blocks
        cancel = chain[-1][0] if chain else None
        stabilized = kwargs.get("method") == "RK45"  # the given layer's run is RK4
        if stabilized and cancel is not None:
            # hold the run until the verification beside it fails its screen
            assert cancel.wait(timeout=60.0)
        out = real(*args, **kwargs)
        if stabilized:
            seen.append((cancel is not None, out))
        return out

    monkeypatch.setattr(tokens_module, "design_token_certificate", watched)
    layer, target = _stuck_at_the_local_minimum()
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=64)
    assert res.c > res.stats["c_local"] and res.stats["c_screens"] >= 2, res.message
    first, *rest = seen
    assert first[0] and first[1].status is Status.BUDGET_EXHAUSTED
    assert "cancelled" in first[1].message
    # every later run (at the c chosen, and at each doubled design rate) goes to its end
    assert len(rest) == 1 + res.stats["token_doublings"]
    assert not any(cancellable for cancellable, _ in rest)
    assert all(out.status is not Status.BUDGET_EXHAUSTED for _, out in rest)
    assert res.token_certificate is rest[-1][1]


def _checks_seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """Record, in order, each verifying segment and token run of a stabilized layer, with the
    layer's ``A[0, 0]`` (``A + cP`` tells the ``c``): ``("segment", a)`` or ``("tokens", a)``."""
    from gtcontrol.control.stabilization import _tokens as tokens_module
    from gtcontrol.control.stabilization import _verify as verify_module

    seen: list[tuple[str, float]] = []
    segment, tokens = verify_module.Verifier.segment, tokens_module.TokenRuns.check

    def added_c(final: gt.Layer) -> float:
        return float(final.A[0, 0])  # A + cP: the layer's A tells the c

    def seg(self: Any, final: gt.Layer, *args: Any, **kw: Any) -> Any:
        seen.append(("segment", added_c(final)))
        return segment(self, final, *args, **kw)

    def tok(self: Any, final: gt.Layer, *args: Any) -> Any:
        seen.append(("tokens", added_c(final)))
        return tokens(self, final, *args)

    monkeypatch.setattr(verify_module.Verifier, "segment", seg)
    monkeypatch.setattr(tokens_module.TokenRuns, "check", tok)
    return seen


def test_a_far_start_stuck_at_the_local_minimum_skips_every_other_check_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The far start's first half runs alone at the local minimum ``c`` before any other
    check; when it settles elsewhere, ``c`` grows at once: no other verification and no token
    run at the local minimum. The design, the ladder and the checks at the ``c`` chosen are
    those of the run that does all the checks at the local minimum first."""
    from gtcontrol.control.stabilization import _call as call_module

    layer, target = _stuck_at_the_local_minimum()
    seen = _checks_seen(monkeypatch)
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=64)
    # (64 tokens of this d = 2 layer fail their check at every design rate: not the point)
    assert res.c > res.stats["c_local"] and res.stats["c_screens"] >= 2, res.message
    assert all(v.converged for v in res.verification)
    a_loc = seen[0][1]
    assert seen[0] == ("segment", a_loc)
    assert [kind for kind, a in seen if a == a_loc] == ["segment"]
    assert any(kind == "tokens" for kind, _ in seen)
    monkeypatch.setattr(call_module.Call, "first_segment", lambda self, final, screen_at: None)
    ref = gt.stabilize(layer, target, add="head", rate=1.0, token_check=64)
    assert ref.c == res.c and ref.stats["c_failed"] == res.stats["c_failed"]
    assert ref.stats["c_screens"] == res.stats["c_screens"]
    assert ref.message == res.message
    for v, w in zip(res.verification, ref.verification, strict=True):
        assert np.array_equal(v.t, w.t) and np.array_equal(v.cov_error, w.cov_error)
    assert res.token_certificate is not None and ref.token_certificate is not None
    assert res.token_certificate.w2 == ref.token_certificate.w2


def test_a_far_start_that_goes_on_continues_from_its_first_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A far start whose first half at the local minimum does not settle elsewhere continues
    from that segment beside the other checks: its verification is the one the checks would
    have run without the first half apart, to the last digit, and no segment runs twice."""
    from gtcontrol.control.stabilization import _call as call_module

    rng = np.random.default_rng(1)
    layer = random_layer(rng, 8, 2, factored=False)
    layer = layer.replace(heads=[(2.0 * v, b) for v, b in layer.heads])
    target = gt.Gaussian(rng.standard_normal(8), random_spd(rng, 8))
    seen = _checks_seen(monkeypatch)
    res = gt.stabilize(layer, target, add="head", rate=0.8)
    assert res.success and res.c == res.stats["c_local"] > 0, res.message
    # the far (identity) start: its first half, then the other start, then its second half
    assert len(seen) >= 3 and {kind for kind, _ in seen} == {"segment"}
    monkeypatch.setattr(call_module.Call, "first_segment", lambda self, final, screen_at: None)
    n_with = len(seen)
    ref = gt.stabilize(layer, target, add="head", rate=0.8)
    assert len(seen) - n_with == n_with  # the same segments, none twice
    assert ref.message == res.message
    for v, w in zip(res.verification, ref.verification, strict=True):
        assert np.array_equal(v.t, w.t) and np.array_equal(v.cov_error, w.cov_error)
        assert np.array_equal(v.mean_error, w.mean_error)


def _untouched_threads() -> list[Any]:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("gtcontrol-untouched")]


def test_the_untouched_layers_tokens_run_in_the_background_on_a_single_threaded_blas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With numpy's BLAS on one thread the given layer's token run starts with the call, in a
    thread of its own beside the design, and gives the result of the run in turn."""
    import threading

    from threadpoolctl import threadpool_limits

    from gtcontrol.control.stabilization import _tokens as tokens_module

    if jobs.cpus() < 2:
        pytest.skip("one CPU: the jobs run in turn")
    where: list[str] = []
    real = tokens_module.TokenRuns.run_untouched

    def recorded(self: Any, n_tok: int, t_end: float) -> Any:
        where.append(threading.current_thread().name)
        return real(self, n_tok, t_end)

    monkeypatch.setattr(tokens_module.TokenRuns, "run_untouched", recorded)
    layer = gt.Layer(V=1.5 * np.eye(2), B=0.5 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    with threadpool_limits(1, user_api="blas"):
        background = gt.stabilize(layer, target, add="head", token_check=128)
    # on a busy machine calm_blas puts BLAS on one thread, and the run goes to the background
    # too (by design): here the machine reads as idle, with two BLAS threads
    from gtcontrol import _blas

    monkeypatch.setattr(_blas, "busy", lambda: False)
    monkeypatch.setattr(jobs, "busy", lambda: False)
    with threadpool_limits(2, user_api="blas"):
        in_turn = gt.stabilize(layer, target, add="head", token_check=128)
    assert len(where) == 2 and where[0].startswith("gtcontrol-untouched"), where
    assert not where[1].startswith("gtcontrol-untouched")
    assert background.success and in_turn.success, (background.message, in_turn.message)
    un, ref = background.untouched_tokens, in_turn.untouched_tokens
    assert un is not None and ref is not None
    assert (un.T, un.status) == (ref.T, ref.status)
    assert un.w2 == pytest.approx(ref.w2, rel=1e-4)  # float32 tokens, other BLAS threads
    assert not _untouched_threads()


def test_the_far_starts_first_half_waits_only_briefly_for_the_background_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The far start's first half waits for the given layer's background token run at most
    ``_BACKGROUND_WAIT`` seconds: a run that lasts longer goes on beside it, and the result is
    the one without any wait."""
    import time

    from threadpoolctl import threadpool_limits

    from gtcontrol.control.stabilization import _tokens as tokens_module
    from gtcontrol.control.stabilization import _verify as verify_module

    if jobs.cpus() < 2:
        pytest.skip("one CPU: the jobs run in turn")
    monkeypatch.setattr(verify_module, "_BACKGROUND_WAIT", 0.2)
    events: list[tuple[str, float]] = []
    run, segment = tokens_module.TokenRuns.run_untouched, verify_module.Verifier.segment

    def slow_background(self: Any, n_tok: int, t_end: float) -> Any:
        out = run(self, n_tok, t_end)
        time.sleep(3.0)  # a given layer whose tokens stay near the target: the whole depth
        events.append(("background ends", time.perf_counter()))
        return out

    def seg(self: Any, *args: Any, **kw: Any) -> Any:
        events.append(("segment", time.perf_counter()))
        return segment(self, *args, **kw)

    monkeypatch.setattr(tokens_module.TokenRuns, "run_untouched", slow_background)
    monkeypatch.setattr(verify_module.Verifier, "segment", seg)
    layer, target = _stuck_at_the_local_minimum()
    with threadpool_limits(1, user_api="blas"):
        res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=64)
    assert res.c > res.stats["c_local"] and res.untouched_tokens is not None, res.message
    first_segment = next(t for kind, t in events if kind == "segment")
    background_end = next(t for kind, t in events if kind == "background ends")
    assert first_segment < background_end - 2.0
    assert not _untouched_threads()


def test_a_call_that_needs_no_token_run_cancels_the_background_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A result with no design to check (the gains family, proven infeasible) takes no token
    run: the background run of the given layer's tokens is cancelled, and has ended when the
    call returns."""
    from threadpoolctl import threadpool_limits

    from gtcontrol.control.stabilization import _tokens as tokens_module

    if jobs.cpus() < 2:
        pytest.skip("one CPU: the jobs run in turn")
    ended: list[Any] = []
    real = tokens_module.TokenRuns.run_untouched

    def recorded(self: Any, n_tok: int, t_end: float) -> Any:
        out = real(self, n_tok, t_end)
        ended.append(out)
        return out

    monkeypatch.setattr(tokens_module.TokenRuns, "run_untouched", recorded)
    d = 3
    layer = gt.Layer(heads=[(0.5 * np.eye(d), np.eye(d)), (0.3 * np.eye(d), np.eye(d))])
    target = gt.Gaussian(np.zeros(d), np.eye(d))
    with threadpool_limits(1, user_api="blas"):
        res = gt.stabilize(layer, target, add="gains", token_check=20_000)
    assert res.status is Status.INFEASIBLE and res.untouched_tokens is None
    assert not _untouched_threads()
    assert len(ended) == 1 and ended[0].status is Status.BUDGET_EXHAUSTED
    assert "cancelled" in ended[0].message


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 0.0},
        {"rate": -1.0},
        {"rate": float("nan")},
        {"rate": True},
        {"add": "everything"},
        {"token_check": 1},
        {"min_ess": 1.5},
        {"seed": -1},
        {"T": 0.0},
        {"time_limit": -1.0},
        {"tokens": np.ones((3, 5))},
        {"initial": "x"},
    ],
)
def test_bad_options_raise(kwargs: dict[str, object]) -> None:
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    with pytest.raises(GTControlError):
        gt.stabilize(layer, gt.Gaussian(np.zeros(2), np.eye(2)), **kwargs)


def test_bad_targets_raise() -> None:
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    with pytest.raises(InvalidGaussianError, match="active subspace"):
        gt.stabilize(layer, gt.Gaussian(np.zeros(2), np.diag([1.0, 0.0])))
    with pytest.raises(InvalidGaussianError):
        gt.stabilize(layer, gt.Gaussian(np.zeros(3), np.eye(3)))
    with pytest.raises(InvalidGaussianError):
        gt.stabilize(layer, (np.zeros(2), np.eye(2)))  # type: ignore[arg-type]
    with pytest.raises(InvalidParametersError):
        gt.stabilize("layer", gt.Gaussian(np.zeros(2), np.eye(2)))  # type: ignore[arg-type]


def test_small_time_limit_is_honoured() -> None:
    rng = np.random.default_rng(5)
    layer = random_layer(rng, 96, 4, factored=True)
    target = gt.Gaussian(np.zeros(96), np.eye(96))
    t0 = time.perf_counter()
    res = gt.stabilize(layer, target, add="auto", time_limit=0.3)
    assert time.perf_counter() - t0 <= 1.3
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(2, 6), rate=st.floats(0.5, 3.0))
def test_property_head_family_always_certifies(seed: int, d: int, rate: float) -> None:
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, d, 2, factored=False)
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    res = gt.stabilize(layer, target, add="head", rate=rate)
    assert res.success, res.message
    assert res.spectrum.abscissa <= -rate
    ref = kron_spectrum(res.layer, np.array(target.cov))
    assert float(np.max(ref.real)) <= -rate + 1e-8 * max(1.0, rate)


def test_token_check_on_a_singular_target() -> None:
    """``S ⊕ 0`` on a frozen affine coordinate (an extracted layer's): the token check compares
    with the singular target (W2 of PSD Gaussians) instead of refusing it."""
    rng = np.random.default_rng(11)
    d = 6
    frozen_layer = frozen_last_coordinate(rng, d)
    cov = np.zeros((d, d))
    cov[:-1, :-1] = random_spd(rng, d - 1)
    mean = np.append(rng.standard_normal(d - 1), 1.0)
    res = gt.stabilize(frozen_layer, gt.Gaussian(mean, cov), add="head", token_check=512)
    assert res.token_certificate is not None
    assert res.success, res.message
    assert res.token_certificate.w2 <= 2 * res.token_certificate.floor


def test_query_centred_on_the_target_mean_through_a_frozen_coordinate() -> None:
    """A data target far from the origin in Σ*'s metric (``|Σ*^{-1/2}m*| ≫ 1``), with the
    starts near it: the added head's query is centred through the frozen affine coordinate
    (``u = Σ*⁻¹(x − m*)/s``), which keeps the moment model (same spectra, same certificate)
    and needs a far smaller token gauge ``s`` than the plain tilt ``u = Σ*⁻¹x/s``."""
    rng = np.random.default_rng(3)
    d = 6
    frozen_layer = frozen_last_coordinate(rng, d)
    cov = np.zeros((d, d))
    cov[:-1, :-1] = 0.05 * random_spd(rng, d - 1)
    mean = np.append(5.0 * rng.standard_normal(d - 1), 1.0)
    target = gt.Gaussian(mean, cov)
    near = gt.Gaussian(mean, 1.05 * cov)
    res = gt.stabilize(frozen_layer, target, add="head", initial=near, token_check=512)
    assert res.success, res.message
    assert "query centred on m*" in res.message
    v0, b0 = res.layer.heads[len(frozen_layer.heads)]
    # the plain tilt's gauge, from the rule (W = Σ^{1/2}BΣ^{1/2}, R = Σ^{1/2}B): the predicted
    # ESS over target and start, (|Rm| + ‖W‖_F + 3‖W‖₂)/√ln 2, where the far mean (|Rm| ≫ 1)
    # enters, and a typical own logit at the target, tr W (r = 5 here, the same for both tilts)
    plain = np.zeros((d, d))
    plain[:-1, :-1] = np.linalg.inv(cov[:-1, :-1])
    s_plain = 0.0
    for g in (target, near):
        root = np.zeros((d, d))
        w, u = np.linalg.eigh(g.cov[:-1, :-1])
        root[:-1, :-1] = (u * np.sqrt(w)) @ u.T
        rb = root @ plain
        w_mat, rm = rb @ root, float(np.linalg.norm(rb @ g.mean))
        tilt = (rm + np.linalg.norm(w_mat) + 3 * np.linalg.norm(w_mat, 2)) / math.sqrt(math.log(2))
        s_plain = max(s_plain, tilt, np.trace(w_mat) if g is target else 0.0)
    assert res.scale < 0.2 * s_plain
    # the tilt is Σ*⁻¹(x − m*)/s on tokens whose frozen coordinate is 1
    x = near.sample(64, seed=rng)
    assert np.allclose(x @ b0.T, (x - mean) @ plain.T / res.scale, atol=1e-9 * s_plain)
    # the moment model is the plain head's: same covariance spectrum and mean matrix
    n_kept = len(frozen_layer.heads)
    plain_layer = res.layer.replace(
        heads=[*res.layer.heads[:n_kept], (v0, plain / res.scale), *res.layer.heads[n_kept + 1 :]]
    )
    k_c = gt.mean_matrix(res.layer, cov)[:-1, :-1]
    k_p = gt.mean_matrix(plain_layer, cov)[:-1, :-1]
    assert np.allclose(k_c, k_p, atol=1e-10 * np.linalg.norm(k_p))
    basis = np.eye(d)[:, :-1]
    ref = kron_spectrum(plain_layer, cov, basis)
    assert res.spectrum.cov_abscissa == pytest.approx(float(np.max(ref.real)), abs=1e-9)
    # and the predicted ESS of the added head holds at the target
    assert gt.worst_ess_fraction(res.layer, target, n_std=3.0)[-1] >= 0.5 - 1e-12


def test_token_gauge_keeps_the_added_heads_softmax_near_linear_over_tokens() -> None:
    """Over ``N`` tokens a query is also a key: the gauge keeps a typical token's logit for
    itself within 1 of a typical key's (``δ ≈ tr W / s = r/s``) for the target's tokens, so
    the added head's softmax is near its first-order expansion, far from a hard maximum, and
    the pair (added head, companion) moves the tokens as the moment model moves the Gaussian
    of their empirical moments, ``−cΣ̂B₀x_i − σx̄``."""
    rng = np.random.default_rng(8)
    d = 32
    layer = random_layer(rng, d, 4, factored=True)
    target = gt.Gaussian(0.3 * rng.standard_normal(d), random_spd(rng, d))
    res = gt.stabilize(layer, target, add="head", T=0.01)
    n_kept = len(layer.heads)
    v0, b0 = res.layer.heads[n_kept]
    n = 1024
    x = target.sample(n, seed=rng)
    logits = x @ b0.T @ x.T  # row i: the logits x_jᵀ B₀ x_i of query i over the keys j
    own = np.diag(logits) - logits.mean(axis=1)
    # r/s = 1 at the bound (the predicted ESS alone gives s ≈ 11 here, δ ≈ 3); the mean of
    # 1024 draws of δ lies within 0.05 of it
    r_over_s = float(np.trace(b0 @ target.cov))
    assert r_over_s <= 1.0
    assert float(np.mean(own)) <= 1.05
    assert float(np.mean(own)) == pytest.approx(r_over_s, abs=0.05)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    ess = 1.0 / (n * np.sum(w**2, axis=1))
    assert float(ess.min()) >= 0.5
    # the pair's output on the tokens against the moment model's head on their empirical moments
    vk, _ = res.layer.heads[n_kept + 1]
    out = (w @ x) @ v0.T + np.full((n, d), x.mean(axis=0)) @ vk.T
    mean_hat = x.mean(axis=0)
    cov_hat = (x - mean_hat).T @ x / n
    model = -res.c * x @ (cov_hat @ b0 * res.scale).T - res.mean_shift * mean_hat
    # the expansion's remainder is second order in the keys' logit spread (√r/s ≈ 0.18): 0.027
    # measured, where a first-order error in δ would be near 1
    rel = np.linalg.norm(out - model) / np.linalg.norm(model)
    assert rel <= 0.05


def test_newton_krylov_returns_a_stabilized_factored_equilibrium() -> None:
    """Newton–Krylov (GMRES through the factored Jacobian, no d²×d² matrix) from a 1 %
    perturbation returns the equilibrium that :func:`stabilize` made, to rounding; the same
    run at d = 384 on MiniLM layer 2 is ``benchmarks/bench_stabilize.py --newton``."""
    rng = np.random.default_rng(21)
    d = 32
    layer = random_layer(rng, d, 4, factored=True)
    target = gt.Gaussian(np.zeros(d), random_spd(rng, d))
    res = gt.stabilize(layer, target, add="head", T=0.01)
    assert res.local_certificate, res.message
    e = rng.standard_normal((d, d))
    e = (e + e.T) / np.linalg.norm(e + e.T, 2)
    root = np.linalg.cholesky(target.cov)
    start = target.cov + 0.01 * root @ e @ root.T
    nr = gt.newton_equilibrium(
        res.layer, start, newton=gt.NewtonSettings(kron_max_dim=8), time_limit=60
    )
    assert nr.success and nr.stats["linear_solver"] == "gmres", nr.message
    assert np.linalg.norm(nr.cov - target.cov) <= 1e-11 * np.linalg.norm(target.cov)
    _, dcov = gt.moment_field(res.layer, target.mean, nr.cov)
    assert np.linalg.norm(dcov) <= 1e-10 * np.linalg.norm(target.cov)


def test_verifications_run_concurrently_on_a_single_threaded_blas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With numpy's BLAS on one thread (as in ``stabilize_model``) the verifying simulations
    run in threads: the same verification, start by start and in order, as one after the
    other."""
    from threadpoolctl import threadpool_limits

    from gtcontrol._blas import blas_single_threaded

    rng = np.random.default_rng(5)
    d = 12
    layer = random_layer(rng, d, 2, factored=False)
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    with threadpool_limits(1, user_api="blas"):
        assert blas_single_threaded()
        threaded = gt.stabilize(layer, target, add="head")
    # the jobs see the caller's context: its progress display (a context variable) included
    import io

    from gtcontrol._progress import reporting, reporting_enabled

    with threadpool_limits(1, user_api="blas"), reporting(enabled=True, stream=io.StringIO()):
        assert jobs.concurrently([reporting_enabled, reporting_enabled]) == [True, True]

    # a single job gets the BLAS threads of every core (on a machine that is not busy), and
    # the caller's one thread after it
    from threadpoolctl import threadpool_info

    monkeypatch.setattr(jobs, "busy", lambda: False)

    def blas_threads() -> int:
        return max(int(p["num_threads"]) for p in threadpool_info() if p["user_api"] == "blas")

    with threadpool_limits(1, user_api="blas"):
        assert jobs.concurrently([blas_threads]) == [jobs.cpus()]
        assert blas_threads() == 1
        if jobs.cpus() > 1:
            assert jobs.concurrently([blas_threads, blas_threads]) == [1, 1]
    depth = float(threaded.verification[0].t[-1])
    with threadpool_limits(1, user_api="blas"):
        one_by_one = gt.stabilize(layer, target, add="head", initial=threaded.starts[0], T=depth)
    assert threaded.success, threaded.message
    assert [v.name for v in threaded.verification] == ["identity", "perturbed target"]
    np.testing.assert_allclose(
        threaded.verification[0].cov_error,
        one_by_one.verification[0].cov_error,
        rtol=1e-9,
        atol=1e-15,
    )


@pytest.mark.parametrize("kron_max_dim", [64, 8])
def test_newton_on_an_equilibrium_singular_along_the_affine_coordinate(kron_max_dim: int) -> None:
    """A start ``S ⊕ 0`` of a layer that never moves its last coordinate: on Sym(d) the
    Jacobian is singular there (the dense Kronecker solve refused it as "DF(Σ) is singular"),
    so Newton runs on the active subspace, by either linear solver, and returns ``Σ* ⊕ 0``."""
    rng = np.random.default_rng(3)
    d = 17
    layer = frozen_last_coordinate(rng, d)
    cov = np.zeros((d, d))
    cov[:-1, :-1] = random_spd(rng, d - 1)
    target = gt.Gaussian(np.append(rng.standard_normal(d - 1), 1.0), cov)
    res = gt.stabilize(layer, target, add="head", T=0.01)
    e = rng.standard_normal((d - 1, d - 1))
    start = cov.copy()
    start[:-1, :-1] += 0.01 * (e + e.T) / np.linalg.norm(e + e.T, 2)
    nr = gt.newton_equilibrium(
        res.layer, start, newton=gt.NewtonSettings(kron_max_dim=kron_max_dim), time_limit=60
    )
    assert nr.success, nr.message
    assert nr.stats["active_dim"] == d - 1
    assert nr.stats["linear_solver"] == ("kronecker" if kron_max_dim > d else "gmres")
    assert np.linalg.norm(nr.cov - cov) <= 1e-12 * np.linalg.norm(cov)
    assert not np.any(nr.cov[-1]) and not np.any(nr.cov[:, -1])


def test_a_default_depth_is_extended_while_the_error_still_falls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A default depth five e-folds too short (the transient allowance set to −5): the
    verification goes on, 3/rate at a time, until the error is below 1e-6, and says so; a
    depth the caller gives is never extended."""
    import gtcontrol.control.stabilization._plan as stab

    monkeypatch.setattr(stab, "_TRANSIENT_EFOLDS", -5.0)
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    target = gt.Gaussian(np.zeros(2), np.eye(2))
    start = gt.Gaussian(np.ones(2), 3.0 * np.eye(2))
    res = gt.stabilize(layer, target, add="head", initial=start)
    assert res.success, res.message
    check = res.verification[0]
    assert "was extended to" in check.message
    e0 = max(
        np.linalg.norm(start.cov - target.cov) / np.linalg.norm(target.cov),
        np.linalg.norm(start.mean) / math.sqrt(2.0),
    )
    short = (math.log(e0 / 1e-6) - 5.0) / res.rate
    assert short < check.t[-1] <= 2.0 * short + 1e-9
    assert np.all(np.diff(check.t) > 0)
    fixed = gt.stabilize(layer, target, add="head", initial=start, T=short)
    assert fixed.status is Status.FAILED and fixed.verification[0].t[-1] == pytest.approx(short)


def test_a_failed_token_check_names_a_kept_head_in_its_hard_attention_regime() -> None:
    """A kept head with a steep tilt (``B = 8I``): at the target its predicted ``ESS/N =
    exp(−uᵀΣ*u)`` is far below ``1/N``, the moments are certified but ``N`` tokens do not follow
    them, not even at three doublings of the design rate; the result says which kept head and
    why, with the figure recomputed here."""
    from gtcontrol.model.finite_n import ess_fraction

    layer = gt.Layer(V=0.5 * np.eye(2), B=8.0 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=256)
    assert res.local_certificate and all(v.converged for v in res.verification)
    assert res.status is Status.FAILED and res.token_certificate is not None
    assert not res.token_certificate.success
    probe = target.sample(512, seed=np.random.default_rng(0))
    expected = float(np.median(ess_fraction(layer, target, probe)[:, 0]))
    assert res.stats["kept_head_ess"] == pytest.approx(expected, rel=1e-9)
    assert expected < 1.0 / 256
    assert "kept head 0 has a median predicted ESS/N" in res.message
    # the design rate doubled three times (the cap) without the tokens passing
    assert res.stats["token_doublings"] == 3 and res.stats["design_rate"] == 8.0
    assert "at design rate 4 (c = " in res.message and "doubled to 8" in res.message


def test_a_token_check_failed_at_the_rate_alone_doubles_the_design_rate() -> None:
    """A kept head steep enough (``B = 3I``) that 256 tokens stay off the moments at the
    design for ``ρ = 1``, but not under the stronger contraction designed for ``ρ = 2``: ``c``
    and the mean's shift become those of ``rate=2`` exactly, and the token runs, repeated here
    by the public token certificate, fail at the first design and pass at the second."""
    layer = gt.Layer(V=0.2 * np.eye(2), B=3.0 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    res = gt.stabilize(layer, target, add="head", rate=1.0, token_check=256)
    assert res.success, res.message
    assert res.stats["token_doublings"] == 1 and res.stats["design_rate"] == 2.0
    assert "so the design rate doubled to 2" in res.message
    assert "the design rate 2 is the smallest token-valid one to a factor 2" in res.message
    alone = gt.stabilize(layer, target, add="head", rate=1.0)
    twice = gt.stabilize(layer, target, add="head", rate=2.0)
    assert alone.success and twice.success
    assert alone.c == res.stats["c_local"] < res.c
    assert res.c == pytest.approx(twice.c, rel=1e-12)
    assert res.mean_shift == pytest.approx(twice.mean_shift, rel=1e-12)
    assert res.spectrum is not None and res.spectrum.abscissa <= -2.0
    tc = res.token_certificate
    assert tc is not None
    # the rate certified is 2: the default depths follow it, (ln(e0/1e-3) + 3)/2 for the
    # tokens' start (the perturbed target), the given layer's tokens keep the rate-1 depth
    e0 = _start_error(res.starts[-1], target)
    assert tc.T == pytest.approx((math.log(e0 / 1e-3) + 3.0) / 2.0, rel=1e-12)
    # W2 ≤ 2 floors is required after the first step to reach each of T/16, T/8, …, and at T:
    # the rate-1 tokens stopped, failed, at the first of those checks where it did not hold,
    # at or past T/16 and before their depth T
    failed_at = re.search(
        r"at design rate 1 \(c = [^)]*\) W2 [0-9.]+ at depth ([0-9.]+)", res.message
    )
    assert failed_at is not None
    t_rate1 = math.log(e0 / 1e-3) + 3.0
    assert t_rate1 / 16 <= float(failed_at.group(1)) < t_rate1
    given = res.untouched_tokens
    assert given is not None
    assert given.T <= t_rate1 * (1 + 1e-12)
    assert given.T in [pytest.approx(t_rate1 / 2**k) for k in range(5)]
    same = {
        "n_tokens": 256,
        "initial": res.starts[-1],
        "T": tc.T,
        "seed": 0,
        "method": "RK45",
        "rtol": 1e-2,
        "min_token_ess": 0.0,
        "n_points": 2,
        "dtype": np.float32,
        "stop_factor": 2.0,
    }
    first = gt.design_token_certificate(alone.layer, target, **same)
    assert not first.success and first.w2 > 2.0 * first.floor
    again = gt.design_token_certificate(res.layer, target, **same)
    assert again.success and again.w2 == pytest.approx(tc.w2, rel=1e-6)


def test_a_token_check_the_budget_never_ran_is_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token check asked for but never run (the time limit was reached before its turn) made
    the design ``SUCCESS`` with no token certificate (seen on a busy machine in
    ``test_time_limit_holds_while_the_design_rate_doubles``): it is ``BUDGET_EXHAUSTED`` and
    says so."""
    import importlib

    tokens_module = importlib.import_module("gtcontrol.control.stabilization._tokens")
    original = tokens_module.TokenRuns.check

    def late(self: Any, *args: Any, **kwargs: Any) -> Any:
        while not self.budget.exhausted:  # its turn comes after the limit
            time.sleep(0.01)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(tokens_module.TokenRuns, "check", late)
    layer = gt.Layer(V=0.3 * np.eye(2), B=0.5 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    res = gt.stabilize(layer, target, add="head", token_check=64, time_limit=2.0)
    assert res.status is Status.BUDGET_EXHAUSTED, res.message
    assert res.token_certificate is None
    assert "the token check did not run: the time limit of 2 s was reached" in res.message


def test_the_perturbed_target_alone_answers_the_local_question() -> None:
    """``initial="perturbed"``: one verified start, the perturbed target, no screens, and ``c``
    the local minimum, where the default starts grow ``c`` for a far start that settles
    elsewhere."""
    rng = np.random.default_rng(1020)
    d = 24
    layer = random_layer(rng, d, 3, factored=False)
    layer = layer.replace(heads=[(6.0 * v, b) for v, b in layer.heads])
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    full = gt.stabilize(layer, target, add="head", rate=1.0)
    local = gt.stabilize(layer, target, add="head", rate=1.0, initial="perturbed")
    assert full.success and full.stats["c_screens"] >= 2
    assert local.success, local.message
    assert [v.name for v in local.verification] == ["perturbed target"]
    assert local.stats["c_screens"] == 0 and local.c == local.stats["c_local"]
    assert local.c < full.c
    np.testing.assert_array_equal(local.starts[0].cov, full.starts[-1].cov)
    with pytest.raises(gt.InvalidParametersError, match=r"initial: expected .*'perturbed'"):
        gt.stabilize(layer, target, add="head", initial="near")


@pytest.mark.parametrize("blas_threads", [1, None])
def test_untouched_tokens_false_leaves_the_given_layers_run_out(
    monkeypatch: pytest.MonkeyPatch, blas_threads: int | None
) -> None:
    """``untouched_tokens=False``: the token check runs and is the same as with the given
    layer's run beside it, and the given layer's tokens never run (neither in the background
    thread, with numpy's BLAS on one thread, nor as a job)."""
    from gtcontrol.control.stabilization import _tokens as tokens_module

    runs: list[str] = []
    real = tokens_module.TokenRuns.run_untouched

    def recorded(self: Any, n_tok: int, t_end: float) -> Any:
        runs.append(threading.current_thread().name)
        return real(self, n_tok, t_end)

    monkeypatch.setattr(tokens_module.TokenRuns, "run_untouched", recorded)
    layer = gt.Layer(V=1.5 * np.eye(2), B=0.5 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    with threadpool_limits(blas_threads, user_api="blas"):
        alone = gt.stabilize(layer, target, add="head", token_check=128, untouched_tokens=False)
        assert runs == []
        both = gt.stabilize(layer, target, add="head", token_check=128)
    assert len(runs) == 1
    assert alone.success and both.success, (alone.message, both.message)
    assert alone.untouched_tokens is None and both.untouched_tokens is not None
    assert "untouched" not in alone.message and "untouched" in both.message
    tc, ref = alone.token_certificate, both.token_certificate
    assert tc is not None and ref is not None
    assert (tc.T, tc.status) == (ref.T, ref.status)
    assert tc.w2 == pytest.approx(ref.w2, rel=1e-4)  # float32 tokens, other BLAS threads
    assert not _untouched_threads()


@pytest.mark.parametrize("bad", ["yes", 1, None, 0.0])
def test_untouched_tokens_must_be_a_bool(bad: Any) -> None:
    layer = gt.Layer(V=1.5 * np.eye(2), B=0.5 * np.eye(2))
    target = gt.Gaussian([0.5, -0.3], [[1.0, 0.2], [0.2, 0.6]])
    with pytest.raises(InvalidParametersError, match="untouched_tokens"):
        gt.stabilize(layer, target, token_check=16, untouched_tokens=bad)


# ------------------------------------------------------------- verification as a distance
@pytest.mark.parametrize("seed", [1, 2])
def test_a_start_near_the_target_is_verified_as_its_distance(seed: int) -> None:
    """The perturbed target is near the target (``(1 ± 0.1) Σ*`` bounds it): its verification
    integrates the distance, whose error control follows it down to 1e-9; the identity start
    keeps the factor form. The distance form's end error agrees with a tight factor-form
    integration (rtol 1e-13) to 1 %, where the factor form at the verification's 1e-7 is off
    by up to 4× on these layers (its error relative to Σ: 4.5e-9 against 2.5e-9 and 4.4e-9
    against 1.05e-9)."""
    from gtcontrol.control.stabilization._plan import PERTURBED, _starts, _target_basis

    rng = np.random.default_rng(seed)
    d = 6
    layer = random_layer(rng, d, 2, factored=False)
    target = gt.Gaussian(rng.standard_normal(d), random_spd(rng, d))
    res = gt.stabilize(layer, target, add="head", rate=1.0)
    assert res.success, res.message
    forms = {v.name: v.stats["form"] for v in res.verification}
    assert forms == {"identity": "factor", PERTURBED: "deviation"}
    (check,) = [v for v in res.verification if v.name == PERTURBED]
    assert check.converged and check.stats["nfev"] > 0
    # as the model map asks (the perturbed target alone, with tokens): its first half runs
    # before the token check, and continues in the same form
    alone = gt.stabilize(
        layer, target, add="head", rate=1.0, initial="perturbed", token_check=64, seed=0
    )
    assert [v.stats["form"] for v in alone.verification] == ["deviation"], alone.message
    starts = dict(_starts(None, target, _target_basis(res.layer, target.cov), 0, d))
    tight = gt.simulate(
        res.layer, starts[PERTURBED], float(check.t[-1]), rtol=1e-13, atol=1e-16, n_points=2
    )
    want = np.linalg.norm(tight.cov[-1] - target.cov) / np.linalg.norm(target.cov)
    assert abs(float(check.cov_error[-1]) - want) <= 0.01 * want


def test_a_near_start_that_does_not_converge_is_judged_in_factor_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a converged verification rests on the distance form: verified to depth 2 only,
    the start ``N(0, I)`` near ``Σ* = diag(1, 2)`` (whitened distance 0.5) is still moving
    there, and that verdict is taken again in factor form, which says so; the far start is
    verified in factor form only."""
    import gtcontrol.control.stabilization._verify as verify_module

    runs: list[tuple[str, bool, bool]] = []
    trajectory = verify_module.Verifier.trajectory
    layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    target = gt.Gaussian(np.zeros(2), np.diag([1.0, 2.0]))
    near = gt.Gaussian(np.zeros(2), np.eye(2))
    far = gt.Gaussian(np.ones(2), 2.0 * np.eye(2))

    def recorded(self: Any, final: gt.Layer, g0: gt.Gaussian, *args: Any, **kw: Any) -> Any:
        run = trajectory(self, final, g0, *args, **kw)
        errs = run.errors(self.plan)
        ok = bool(errs[0][-1] <= 1e-6 and errs[1][-1] <= 1e-6)
        name = "near" if np.array_equal(g0.cov, near.cov) else "far"
        runs.append((name, bool(kw["around"]), ok))
        return run

    monkeypatch.setattr(verify_module.Verifier, "trajectory", recorded)
    res = gt.stabilize(layer, target, add="head", initial=[near, far], T=2.0)
    assert not res.success and "still moving" in res.message, res.message
    mine = [r for r in runs if r[0] == "near"]
    assert mine[:2] == [("near", True, False), ("near", False, False)], runs
    # every distance-form run that did not converge is followed by a factor-form one
    assert all(
        mine[i + 1][1] is False for i, (_, around, ok) in enumerate(mine) if around and not ok
    )
    assert all(not around for name, around, _ in runs if name == "far")
    assert [v.stats["form"] for v in res.verification] == ["factor", "factor"]
    assert not any(v.converged for v in res.verification)
