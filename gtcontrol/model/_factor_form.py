"""State formulations of the moment ODE for the adaptive integrator.

Three packed states, each valid for one *chunk* of the integration (between restarts):

* :class:`FactorForm` (noise-free layers, docs/theory.md §2): ``y = [m, vec K]`` with
  ``Σ = e^{2s} K Kᵀ``, ``K`` of size ``d×r`` (``r = rank Σ0``) and a log-scale ``s`` fixed for
  the chunk. ``dK/dt = M(Σ) K`` (:func:`~gtcontrol.model.field.factor_field`), so Σ is positive
  semidefinite and of rank ``r`` by construction. At every restart ``K`` is renormalized to unit
  Frobenius norm (``s`` absorbs the scale) and re-gauged to orthogonal columns, so the error
  control is relative to Σ's own scale: decaying (1e-50) and growing covariances keep relative
  accuracy. Optionally the chunk runs in a rotating frame ``X = e^{S τ} Z`` (``S`` the skew part
  of the layer's ``A``), an exponential integrator for the rotation that makes a stiff skew ``A``
  harmless: ``e^{Sτ}`` is orthogonal, so norms and eigenvalues are unchanged.
* :class:`_EntryForm` (layers with Brownian forcing, whose ``G Gᵀ`` raises the rank):
  ``y = [m, vech Σ]``, integrated entry-wise as before.
* :class:`DeviationForm` (a run asked to follow the distance to a reference, typically an
  equilibrium): ``y ∝ [m − m̄, vech(Σ − Σ̄)]``, renormalized at every restart, so the error
  control is relative to the distance, which near a stable equilibrium falls by orders of
  magnitude while the moments stand still.

The forms expose the same small interface: ``rhs`` (ticks the budget), ``moments`` (the
physical ``m, Σ`` and factor), ``top`` (``λ_max Σ`` and its rate from the Gram matrix, the
input of :mod:`gtcontrol.model._blowup_detection`), ``trace`` (a cheap upper bound of
``λ_max``), ``log_scale`` and ``jacobian`` (dense, for implicit methods: the field is a cubic
polynomial in the packed state, so a five-point central difference is exact up to rounding).

Reference: the paper cited in :mod:`gtcontrol`, §2.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, eigsh

from .._linalg import FloatArray, vech, vech_index
from .._status import Budget
from .field import factor_field, moment_field
from .params import Layer

__all__: list[str] = []

#: ``K`` is renormalized when its Frobenius norm leaves ``[1/_WINDOW, _WINDOW]``.
_WINDOW = 10.0
#: Largest cosine between two columns of ``K`` in the horizontal gauge before a restart
#: re-gauges them to orthogonal (:meth:`FactorForm.needs_restart`).
_GAUGE_DRIFT = 0.03
#: Gram matrices larger than this get their top eigenpair from Lanczos (ARPACK), not ``eigh``.
_LANCZOS_MIN = 48
LayerAt = Callable[[float], Layer]


def _ratio(num: FloatArray, den: FloatArray) -> float:
    """``‖num‖/‖den‖`` (0 when both vanish, inf when only ``den`` does)."""
    a, b = float(np.linalg.norm(num)), float(np.linalg.norm(den))
    if a == 0.0:
        return 0.0
    return a / b if b > 0.0 else math.inf


def initial_factor(cov: FloatArray) -> FloatArray:
    """An eigen-factor ``L0`` (``d×r``) of ``cov`` spanning its range (round-off dropped).

    A diagonal ``cov`` (the identity start, ``I ⊕ 0``) is factored without an eigensolve: at
    d = 1024 that saves an O(d³) step before the integrator's first budget check.
    """
    sym_cov = 0.5 * (cov + cov.T)
    diag = np.diagonal(sym_cov)
    if np.count_nonzero(sym_cov) <= np.count_nonzero(diag) and np.all(diag >= 0):
        order = np.argsort(diag, kind="stable")
        w, u = diag[order], np.eye(cov.shape[0])[:, order]
    else:
        w, u = np.linalg.eigh(sym_cov)
    top = float(w[-1]) if w.size else 0.0
    keep = w > max(cov.shape[0], 1) * np.finfo(float).eps * top
    if top <= 0.0:
        keep[:] = False
    factor: FloatArray = u[:, keep] * np.sqrt(w[keep])
    return factor[:, ::-1]  # largest first


def _orthogonal_columns(factor: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(U, σ)`` with ``factor = U diag(σ) Qᵀ`` (``U`` orthonormal columns, ``Q`` orthogonal):
    by the Gram ``KᵀK`` when the columns are orthogonal to 1e-13 (cosines; O(d r²), no SVD),
    else an SVD."""
    r = factor.shape[1]
    if r:
        gram = factor.T @ factor
        sv = np.sqrt(np.maximum(np.diagonal(gram), 0.0))
        if np.all(sv > 0):
            cos = gram / sv[:, None] / sv[None, :]  # the columns' cosines
            np.fill_diagonal(cos, 0.0)
            if float(np.max(np.abs(cos))) <= 1e-13:
                return factor / sv, sv
    u, sv, _ = np.linalg.svd(factor, full_matrices=False)
    return u, sv


def _vertical(k: FloatArray, dk: FloatArray) -> FloatArray:
    """The skew ``W`` (``r×r``) of the factor's gauge motion in ``K̇``: ``K̇ − K W`` is horizontal.

    ``K → K Q`` (``Q`` orthogonal) leaves ``Σ = K Kᵀ`` unchanged, so ``K̇ − K W`` with any skew
    ``W`` moves Σ exactly as ``K̇`` does. The horizontal lift minimizes ``‖K̇ − K W‖_F``:
    ``G W + W G = Kᵀ K̇ − K̇ᵀ K`` with the Gram ``G = KᵀK``. The Gram is diagonal after every
    restart (orthogonal columns), so its diagonal ``g`` stands for it: ``W_ij = (X_ij − X_ji) /
    (g_i + g_j)`` with ``X = Kᵀ K̇``, exact for a diagonal Gram and never larger than ``‖M‖₂``
    (``|X_ij| ≤ √(g_i g_j) ‖M‖₂``). At an equilibrium ``M K = K W₀`` with ``W₀`` skew, and this
    ``W`` is ``W₀``: the factor stands still instead of rotating at the speed of ``M``.
    """
    x = k.T @ dk
    g = np.einsum("ij,ij->j", k, k)
    den = g[:, None] + g[None, :]
    out: FloatArray = np.divide(x - x.T, den, out=np.zeros_like(x), where=den > 0)
    return out


def top_eigenpair(gram: FloatArray, v0: FloatArray | None = None) -> tuple[float, FloatArray]:
    """The largest eigenvalue of a symmetric PSD matrix and a unit eigenvector.

    Small matrices: ``eigh``. Large ones: Lanczos (ARPACK ``eigsh``, tolerance 0, i.e. to
    machine precision) from ``v0`` (the previous top vector) or from the column of the largest
    diagonal entry — a few matrix-vector products instead of an ``O(r³)`` eigensolve, which
    on a small busy machine (or with torch's threads competing with BLAS's) cost up to 0.4 s
    at ``r = 384`` and was called at every tenfold growth of ``tr Σ``. Falls back to ``eigh``
    when Lanczos does not converge.
    """
    r = gram.shape[0]
    if r >= _LANCZOS_MIN:
        start = (
            v0 if v0 is not None and v0.shape == (r,) else gram[:, int(np.argmax(np.diag(gram)))]
        )
        if np.any(start):
            try:
                w, q = eigsh(gram, k=1, which="LA", v0=start, tol=0.0, maxiter=20 * r)
                return float(w[0]), np.asarray(q[:, 0])
            except (ArpackNoConvergence, ArpackError):
                pass
    w, q = np.linalg.eigh(gram)
    return float(w[-1]), np.asarray(q[:, -1])


def exact_jacobian(
    rhs: Callable[[float, FloatArray], FloatArray], t: float, y: FloatArray, scale: FloatArray
) -> FloatArray:
    """Dense Jacobian of a field that is a polynomial of degree ≤ 4 in ``y``.

    The five-point central difference ``(−f(y+2h) + 8f(y+h) − 8f(y−h) + f(y−2h)) / 12h`` is exact
    for such polynomials, so the result is the analytic Jacobian up to rounding (``h`` only
    sets the rounding level; ``scale`` is the typical size of each component).
    """
    n = y.size
    jac = np.empty((n, n))
    for j in range(n):
        h = 0.25 * max(abs(float(y[j])), float(scale[j]))
        e = np.zeros(n)
        e[j] = h
        jac[:, j] = (
            -rhs(t, y + 2 * e) + 8 * rhs(t, y + e) - 8 * rhs(t, y - e) + rhs(t, y - 2 * e)
        ) / (12 * h)
    return jac


class FactorForm:
    """``y = [m, vec K]``, ``Σ = e^{2s} K Kᵀ``, optionally in a rotating frame (module doc)."""

    kind = "factor"

    def __init__(
        self,
        layer_at: LayerAt,
        budget: Budget,
        t0: float,
        mean: FloatArray,
        factor: FloatArray,
        *,
        skew: FloatArray | None = None,
        gauge: bool = False,
    ) -> None:
        self.layer_at, self.budget = layer_at, budget
        self.d, self.r = factor.shape
        self.t_ref, self.skew, self.gauge = t0, skew, gauge
        if skew is not None:  # S = −i U diag(μ) Uᴴ, so e^{Sτ} = U diag(e^{−iμτ}) Uᴴ (orthogonal)
            self._mu, self._u = np.linalg.eigh(1j * skew)
        # re-gauge to orthogonal columns (K = U diag(σ)) and normalize to unit Frobenius norm;
        # columns that are already orthogonal (an eigen-factor, the first chunk) need no SVD
        u, sv = _orthogonal_columns(factor)
        norm = float(np.linalg.norm(sv))
        self.s = math.log(norm) if norm > 0 else 0.0
        k = u * (sv / norm) if norm > 0 else factor
        self.y0: FloatArray = np.concatenate([mean, k.ravel()])
        self.n = self.y0.size
        self._top_vector: FloatArray | None = None  # warm start of :meth:`top`
        self._power: FloatArray | None = None  # power-iteration vector of :meth:`remaining`

    def _frame(self, t: float) -> FloatArray | None:
        if self.skew is None:
            return None
        phase = np.exp(-1j * self._mu * (t - self.t_ref))
        e: FloatArray = ((self._u * phase) @ self._u.conj().T).real
        return e

    def _split(self, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        return y[: self.d], y[self.d :].reshape(self.d, self.r)

    def rhs(self, t: float, y: FloatArray) -> FloatArray:
        """``[dm/dt, vec dK/dt]`` (in the rotating frame when one is set); ticks the budget."""
        self.budget.tick()
        m, k_state = self._split(y)
        e = self._frame(t)
        m, k = (m, k_state) if e is None else (e @ m, e @ k_state)
        # in the frame the field is that of M − S, formed with A − S (no cancellation)
        dm, dl = factor_field(self.layer_at(t), m, math.exp(self.s) * k, shift=self.skew)
        dk = dl * math.exp(-self.s)
        if e is not None:
            dm, dk = e.T @ dm, e.T @ dk
        if self.gauge:  # the frame acts on the left, the gauge on the right: they commute
            dk = dk - k_state @ _vertical(k_state, dk)
        return np.concatenate([dm, dk.ravel()])

    def vertical_share(self, y: FloatArray, f: FloatArray) -> float:
        """``‖K W‖_F / ‖K̇‖_F``: the share of the factor's speed that leaves Σ unchanged."""
        _, k = self._split(y)
        _, dk = self._split(f)
        size = float(np.linalg.norm(dk))
        return float(np.linalg.norm(k @ _vertical(k, dk))) / size if size > 0 else 0.0

    def moments(self, t: float, y: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Physical ``(m, Σ, L)`` with ``Σ = L Lᵀ``."""
        m, k = self._split(y)
        e = self._frame(t)
        if e is not None:
            m, k = e @ m, e @ k
        lf = math.exp(self.s) * k
        return m, lf @ lf.T, lf

    def trace(self, y: FloatArray) -> float:
        """``tr Σ = e^{2s} ‖K‖_F²`` (≥ λ_max Σ; frame-invariant)."""
        return math.exp(2 * self.s) * float(np.sum(y[self.d :] ** 2))

    def log_scale(self, y: FloatArray) -> float:
        """``log tr Σ`` (finite even when ``tr Σ`` under- or overflows)."""
        k2 = float(np.sum(y[self.d :] ** 2))
        return 2 * self.s + (math.log(k2) if k2 > 0 else -math.inf)

    def needs_restart(self, y: FloatArray) -> bool:
        """True when ``‖K‖_F`` left the renormalization window, or, in the horizontal gauge,
        when ``K``'s columns are no longer nearly orthogonal.

        The gauge's lift (:func:`_vertical`) takes the Gram's diagonal for the Gram, exact
        only for orthogonal columns; as ``K`` moves horizontally they drift apart, the lift
        leaves part of the rotation in ``K̇`` and the steps shrink back towards the rotation's
        scale. Restarting (re-gauging to orthogonal columns) once a column cosine exceeds
        :data:`_GAUGE_DRIFT` costs an ``O(d r²)`` test per step: on MiniLM layer 1's stabilized
        layer (d = 385), the verification from the identity took 61 steps instead of 105
        (16.6 s instead of 26 s), with 7 restarts.
        """
        k = y[self.d :].reshape(self.d, self.r)
        k2 = float(np.sum(k**2))
        if not (_WINDOW**-2 <= k2 <= _WINDOW**2):
            return True
        if not self.gauge or self.r < 2:
            return False
        gram = k.T @ k
        norms = np.sqrt(np.diag(gram))
        scale = np.outer(norms, norms)
        np.fill_diagonal(gram, 0.0)
        return bool(np.any(np.abs(gram) > _GAUGE_DRIFT * scale))

    def restart(
        self, t: float, y: FloatArray, skew: FloatArray | None, *, gauge: bool = False
    ) -> FactorForm:
        """A new chunk at ``(t, y)``: renormalized, re-gauged, frame reset to ``t``."""
        m, _, lf = self.moments(t, y)
        return FactorForm(self.layer_at, self.budget, t, m, lf, skew=skew, gauge=gauge)

    def top(self, y: FloatArray, f: FloatArray) -> tuple[float, float]:
        """``(λ_max Σ, dλ_max/dt)`` from the Gram matrix ``KᵀK`` and the derivative ``f``.

        ``λ̇ = uᵀ Σ̇ u = 2 e^{2s} (uᵀ K̇)(Kᵀ u)`` with ``u`` the top eigenvector; the rotating
        frame leaves both unchanged (its generator is skew).
        """
        _, k = self._split(y)
        _, dk = self._split(f)
        g, qv = top_eigenpair(k.T @ k, self._top_vector)
        if g <= 0:
            return 0.0, 0.0
        self._top_vector = qv
        u = k @ qv / math.sqrt(g)
        scale = math.exp(2 * self.s)
        return scale * g, 2 * scale * float((u @ dk) @ (k.T @ u))

    def remaining(self, y: FloatArray, f: FloatArray) -> float:
        """Cheap ``λ_max/λ̇_max`` (the remaining time near a pole) from one power step.

        The vector ``u`` of the last call is refined by one power step ``u ← K Kᵀu`` and the
        Rayleigh quotients ``λ ≈ |Kᵀu|²``, ``λ̇ ≈ 2(uᵀK̇)(Kᵀu)`` (common factor ``e^{2s}``
        dropped) give ``λ/λ̇``: ``O(d r)``, no eigensolve. ``inf`` when not growing.
        """
        _, k = self._split(y)
        _, dk = self._split(f)
        u = self._power
        if u is None:
            u = np.array(k[:, int(np.argmax(np.einsum("ij,ij->j", k, k)))])
        v = k @ (k.T @ u)
        nv = float(np.linalg.norm(v))
        if nv == 0.0 or not math.isfinite(nv):
            return math.inf
        u = v / nv
        self._power = u
        ku = k.T @ u
        lam, dlam = float(ku @ ku), 2.0 * float((u @ dk) @ ku)
        return lam / dlam if dlam > 0 else math.inf

    def rate(self, y: FloatArray, f: FloatArray) -> float:
        """Relative speed of the moments, ``max(‖Σ̇‖/‖Σ‖, ‖ṁ‖/‖m‖)`` (gauge-invariant)."""
        m, k = self._split(y)
        dm, dk = self._split(f)
        p = dk @ k.T
        return max(_ratio(dm, m), _ratio(p + p.T, k @ k.T))

    def scales(self, y: FloatArray) -> FloatArray:
        """Typical size of each component (for the Jacobian's differences)."""
        m_scale = max(float(np.max(np.abs(y[: self.d]), initial=0.0)), 1.0)
        k_scale = 1.0 / math.sqrt(max(self.d * self.r, 1))
        return np.concatenate([np.full(self.d, m_scale), np.full(self.d * self.r, k_scale)])

    def atol(self, atol: float, mean0: FloatArray) -> FloatArray:
        """Absolute tolerances: ``atol·max(|m0|, 1)`` for the mean, ``atol/√(dr)`` for ``K``."""
        m_tol = atol * max(float(np.max(np.abs(mean0), initial=0.0)), 1.0)
        return np.concatenate(
            [np.full(self.d, m_tol), np.full(self.d * self.r, atol / math.sqrt(self.d * self.r))]
        )


class _PackedForm:
    """What the two forms on ``[mean part, vech of the covariance part]`` share: their
    physical moments and field come from :meth:`_moments_of` and :meth:`_rates_of` (each
    ``(mean, vech Σ)``-shaped), their state from :meth:`_pack`."""

    skew = None
    layer_at: LayerAt
    budget: Budget
    d: int
    n: int
    y0: FloatArray
    s = 0.0

    def _index(self, d: int) -> None:
        iu, self.full_pos = vech_index(d)
        self.flat_iu: NDArray[np.intp] = iu[0] * d + iu[1]
        self.diag: NDArray[np.intp] = d + np.flatnonzero(iu[0] == iu[1])

    def _moments_of(self, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``(m, vech Σ)`` of the state."""
        raise NotImplementedError

    def _rates_of(self, f: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``(ṁ, vech Σ̇)`` of a state derivative."""
        raise NotImplementedError

    def _pack(self, dm: FloatArray, ds: FloatArray) -> FloatArray:
        """The state derivative of the field ``(ṁ, Σ̇)``."""
        raise NotImplementedError

    def _full(self, packed: FloatArray) -> FloatArray:
        return packed[self.full_pos].reshape(self.d, self.d)

    def rhs(self, t: float, y: FloatArray) -> FloatArray:
        """The field at the state's moments, packed; ticks the budget."""
        self.budget.tick()
        m, s, _ = self.moments(t, y)
        dm, ds = moment_field(self.layer_at(t), m, s)
        return self._pack(dm, ds.ravel()[self.flat_iu])

    def moments(self, t: float, y: FloatArray) -> tuple[FloatArray, FloatArray, None]:
        """Physical ``(m, Σ, None)``."""
        m, packed = self._moments_of(y)
        return m, self._full(packed), None

    def trace(self, y: FloatArray) -> float:
        """``tr Σ``."""
        _, packed = self._moments_of(y)
        return float(np.sum(packed[self.diag - self.d]))

    def log_scale(self, y: FloatArray) -> float:
        """``log tr Σ``."""
        tr = self.trace(y)
        return math.log(tr) if tr > 0 else -math.inf

    def top(self, y: FloatArray, f: FloatArray) -> tuple[float, float]:
        """``(λ_max Σ, uᵀ Σ̇ u)`` from a symmetric eigensolve."""
        _, s, _ = self.moments(0.0, y)
        ds = self._full(self._rates_of(f)[1])
        w, q = np.linalg.eigh(s)
        u = q[:, -1]
        return float(w[-1]), float(u @ ds @ u)

    def remaining(self, y: FloatArray, f: FloatArray) -> float:
        """``inf``: no step prediction (an eigensolve per step)."""
        return math.inf

    def rate(self, y: FloatArray, f: FloatArray) -> float:
        """Relative speed of the moments, ``max(‖Σ̇‖/‖Σ‖, ‖ṁ‖/‖m‖)`` (packed norms)."""
        m, s = self._moments_of(y)
        dm, ds = self._rates_of(f)
        return max(_ratio(dm, m), _ratio(ds, s))


class _EntryForm(_PackedForm):
    """``y = [m, vech Σ]`` (the entry-wise form, for layers with Brownian forcing)."""

    kind = "entrywise"

    def __init__(
        self, layer_at: LayerAt, budget: Budget, t0: float, mean: FloatArray, cov: FloatArray
    ) -> None:
        self.layer_at, self.budget = layer_at, budget
        self.d = mean.shape[0]
        self._index(self.d)
        self.y0: FloatArray = np.concatenate([mean, vech(cov)])
        self.n = self.y0.size

    def _moments_of(self, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        return y[: self.d], y[self.d :]

    def _rates_of(self, f: FloatArray) -> tuple[FloatArray, FloatArray]:
        return f[: self.d], f[self.d :]

    def _pack(self, dm: FloatArray, ds: FloatArray) -> FloatArray:
        return np.concatenate([dm, ds])

    def needs_restart(self, y: FloatArray) -> bool:
        """Never: the entry-wise state has no scale to renormalize."""
        return False

    def restart(
        self, t: float, y: FloatArray, skew: FloatArray | None, *, gauge: bool = False
    ) -> _EntryForm:
        """The same form at ``(t, y)`` (no frame: the entry-wise form never rotates)."""
        m, s, _ = self.moments(t, y)
        return _EntryForm(self.layer_at, self.budget, t, m, s)

    def scales(self, y: FloatArray) -> FloatArray:
        """Typical size of each component (for the Jacobian's differences)."""
        m_scale = max(float(np.max(np.abs(y[: self.d]), initial=0.0)), 1.0)
        s_scale = max(float(np.max(np.abs(y[self.d :]), initial=0.0)), 1e-300)
        return np.concatenate([np.full(self.d, m_scale), np.full(self.n - self.d, s_scale)])

    def atol(self, atol: float, mean0: FloatArray) -> FloatArray:
        """Absolute tolerance ``atol·max(max|y0|, 1)`` (the historical scaling)."""
        return np.full(self.n, atol * max(float(np.max(np.abs(self.y0))), 1.0))


class DeviationForm(_PackedForm):
    """``y = [(m − m̄)/u_m, vech(Σ − Σ̄)/u_Σ] / ς``: the deviation from a reference ``N(m̄, Σ̄)``.

    Near an equilibrium the moments hardly move while their distance to it falls by many
    orders of magnitude; the factor form controls its error relative to Σ, so its steps are
    set by what is left of the distance at Σ's own scale. Here the state is the distance
    itself, in the reference's units (``u_m = max(‖m̄‖, √‖Σ̄‖_F)``, ``u_Σ = ‖Σ̄‖_F``) and
    normalized to unit norm at every restart (``ς`` absorbs the scale, as ``e^s`` does for
    ``K``), so the error control is relative to the distance's own size. Positive
    semidefiniteness is not built in: a caller takes this form only where the distance is
    small against the reference's smallest eigenvalue (on the range it shares with the start),
    where ``Σ = Σ̄ + (Σ − Σ̄)`` cannot lose it.
    """

    kind = "deviation"

    def __init__(
        self,
        layer_at: LayerAt,
        budget: Budget,
        t0: float,
        mean: FloatArray,
        cov: FloatArray,
        around: tuple[FloatArray, FloatArray],
    ) -> None:
        self.layer_at, self.budget = layer_at, budget
        self.around = around
        ref_m, ref_s = around
        self.d = mean.shape[0]
        self._index(self.d)
        self.ref = (ref_m, vech(ref_s))
        size_s = float(np.linalg.norm(ref_s))
        self.u_s = size_s if size_s > 0 else 1.0
        self.u_m = max(float(np.linalg.norm(ref_m)), math.sqrt(self.u_s))
        dev = np.concatenate([(mean - ref_m) / self.u_m, vech(cov - ref_s) / self.u_s])
        size = float(np.linalg.norm(dev))
        self.scale = size if size > 0 else 1.0
        self.y0: FloatArray = dev / self.scale
        self.n = self.y0.size

    def _rates_of(self, f: FloatArray) -> tuple[FloatArray, FloatArray]:
        d = self.d
        return (self.scale * self.u_m) * f[:d], (self.scale * self.u_s) * f[d:]

    def _moments_of(self, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        dm, ds = self._rates_of(y)  # the same scaling as the state's derivative
        return self.ref[0] + dm, self.ref[1] + ds

    def _pack(self, dm: FloatArray, ds: FloatArray) -> FloatArray:
        return np.concatenate([dm / (self.scale * self.u_m), ds / (self.scale * self.u_s)])

    def needs_restart(self, y: FloatArray) -> bool:
        """True when the normalized distance left ``[1/_WINDOW, _WINDOW]``: the tolerances are
        relative to the distance at the restart."""
        size = float(np.linalg.norm(y))
        return size > 0.0 and not (1.0 / _WINDOW <= size <= _WINDOW)

    def restart(
        self, t: float, y: FloatArray, skew: FloatArray | None, *, gauge: bool = False
    ) -> DeviationForm:
        """The same reference at ``(t, y)``, the distance renormalized."""
        m, s, _ = self.moments(t, y)
        return DeviationForm(self.layer_at, self.budget, t, m, s, self.around)

    def scales(self, y: FloatArray) -> FloatArray:
        """Typical size of each component (for the Jacobian's differences)."""
        return np.full(self.n, max(float(np.max(np.abs(y), initial=0.0)), 1e-300))

    def atol(self, atol: float, mean0: FloatArray) -> FloatArray:
        """``atol/√n`` per entry: absolute on the unit-norm distance, so relative to its size."""
        return np.full(self.n, atol / math.sqrt(self.n))


Form = FactorForm | _EntryForm | DeviationForm


def make_form(
    layer_at: LayerAt,
    budget: Budget,
    t0: float,
    mean: FloatArray,
    cov: FloatArray,
    factor: FloatArray | None,
    *,
    noisy: bool,
    around: tuple[FloatArray, FloatArray] | None = None,
) -> Form:
    """The form for a segment: the deviation from ``around`` when one is given, else the factor
    form unless the layer is noisy or Σ is zero."""
    if around is not None:
        return DeviationForm(layer_at, budget, t0, mean, cov, around)
    if noisy:
        return _EntryForm(layer_at, budget, t0, mean, cov)
    lf = factor if factor is not None else initial_factor(cov)
    if lf.shape[1] == 0:
        return _EntryForm(layer_at, budget, t0, mean, cov)
    return FactorForm(layer_at, budget, t0, mean, lf)
