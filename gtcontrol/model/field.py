"""The moment vector field: the affine velocity a layer induces on a Gaussian.

For ``μ = N(m, Σ)`` the tilted law ``∝ e^{yᵀBx} N(y; m, Σ)`` is ``N(m + ΣBx, Σ)``, so each head's
attention is the affine map ``Attn_h(x) = m + Σ B_h x`` and the velocity is ``v(x) = M x + c`` with

    M = A + Σ_h V_h Σ B_h,        c = b + Σ_h V_h m,

and the moments move by ``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ`` (docs/theory.md §2). This is
the one home of the field: everything in gtcontrol that needs it calls :func:`affine_velocity`
or :func:`moment_field` (re-exported by :mod:`gtcontrol.model.moments`).

Factored heads
--------------
A layer built by :meth:`~gtcontrol.model.params.Layer.from_projections` keeps ``B_h = s W_K,hᵀ
W_Q,h`` and ``V_h = W_O,h W_V,h`` as rank-``d_head`` factors, and the field never forms a
``d×d×d`` product per head:

    M Σ = A Σ + s Σ_h W_O,h (W_V,h Σ W_K,hᵀ)(W_Q,h Σ),        c = b + Σ_h W_O,h W_V,h m.

The heads are batched: ``W_V Σ`` and ``W_Q Σ`` are single ``(H d_head × d)·(d × d)`` products, the
``d_head × d_head`` cores ``C_h = s W_V,h Σ W_K,hᵀ`` one batched product, and the sum over heads
one ``(d × H d_head)·(H d_head × d)`` product: ``3 d² H d_head`` multiply-adds (plus ``d³`` for a
non-zero ``A``) against ``(2H + 1) d³`` for dense heads. In factor form (``Σ = L Lᵀ``) the cores
are ``(W_V,h L)(W_K,h L)ᵀ``, so ``dL/dt = M L`` costs ``O(H d_head d r)``.

Reference: the paper cited in :mod:`gtcontrol`, §2.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .._linalg import FloatArray
from .._validation import as_float_array
from .heads import FactoredHeads
from .params import Layer

__all__ = ["affine_velocity", "factor_field", "moment_field"]


def _moments_in(layer: Layer, mean: Any, cov: Any) -> tuple[Any, Any]:
    """``mean`` and ``cov`` as the field needs them. Float arrays of the layer's shapes (every
    caller inside gtcontrol) and CasADi symbols (the transcription's) pass as they are; anything
    else is validated, so that a wrong shape or type is refused by name."""
    d = getattr(layer, "dim", None)
    if (
        (
            type(mean) is np.ndarray
            and type(cov) is np.ndarray
            and mean.dtype.kind == cov.dtype.kind == "f"
            and mean.shape == (d,)
            and cov.shape == (d, d)
        )
        or type(mean).__module__.split(".")[0] == "casadi"
        or not isinstance(d, int)
    ):
        return mean, cov
    return (
        as_float_array("mean", mean, ndim=1, shape=(d,)),
        as_float_array("cov", cov, ndim=2, shape=(d, d)),
    )


def affine_velocity(
    layer: Layer, mean: FloatArray, cov: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The affine velocity ``v(x) = M x + c`` that ``layer`` induces on ``N(mean, cov)``.

    ``M = A + Σ_h V_h Σ B_h`` and ``c = b + Σ_h V_h m`` (docs/theory.md §2); ``A, b`` include an
    identity-activation feed-forward. One head costs two ``d×d`` products; factored heads
    (``layer.factored_heads``) cost ``2 d² H d_head`` in all (``M = A + s Σ_h W_O,h (W_V,h Σ
    W_K,hᵀ) W_Q,h``).

    Parameters
    ----------
    layer
        The layer; its feed-forward, if any, must be affine (identity activation).
    mean
        The mean ``m``, shape ``(d,)``.
    cov
        The covariance ``Σ``, shape ``(d, d)`` (not checked: this is the inner loop).

    Returns
    -------
    tuple of numpy.ndarray
        ``(M, c)`` of shapes ``(d, d)`` and ``(d,)``.

    Raises
    ------
    InvalidParametersError
        If the layer has a ReLU/GELU feed-forward (outside the exact Gaussian theory), or if
        ``mean`` or ``cov`` is not a real array of shape ``(d,)`` or ``(d, d)``.

    Examples
    --------
    One head ``V = −I`` (``v = −1``) with ``B = I`` at ``N(2, 0.5)``: ``M = A + VΣB = −0.5``
    and ``c = b + Vm = −2``.

    >>> from gtcontrol import Layer, affine_velocity
    >>> M, c = affine_velocity(Layer(B=[[1.0]], V=-1.0), [2.0], [[0.5]])
    >>> M, c
    (array([[-0.5]]), array([-2.]))
    """
    return _affine(layer, *_moments_in(layer, mean, cov))


def _affine(layer: Layer, mean: Any, cov: Any) -> tuple[FloatArray, FloatArray]:
    """:func:`affine_velocity` of checked moments."""
    a, b = layer.affine_ffn()
    fh = _factored(layer)
    if fh is not None:
        cores = _cores(fh, fh.flat("v") @ cov, fh.k)
        m_mat = a + fh.o_cat @ np.matmul(cores, fh.q).reshape(-1, fh.dim)
        c = b + fh.o_cat @ (fh.flat("v") @ mean)
    else:
        m_mat = a.copy()
        c = b.copy()
    for v_h, b_h in _dense(layer):
        m_mat += v_h @ (cov @ b_h)
        c += v_h @ mean
    return m_mat, c


def _factored(layer: Layer) -> FactoredHeads | None:
    """The layer's factored heads; ``None`` for dense heads and for duck-typed layers (the
    symbolic layer of :mod:`gtcontrol.control._transcription` has ``affine_ffn``, ``heads``,
    ``noise``)."""
    fh: FactoredHeads | None = getattr(layer, "factored_heads", None)
    return fh


def _dense(layer: Layer) -> tuple[tuple[FloatArray, FloatArray], ...]:
    """The heads held as dense pairs (every head of a duck-typed layer)."""
    dense: tuple[tuple[FloatArray, FloatArray], ...] = getattr(layer, "dense_heads", layer.heads)
    return dense


def _cores(fh: FactoredHeads, v_x: FloatArray, k_y: FloatArray) -> FloatArray:
    """The ``(H, d_head, d_head)`` cores ``s (W_V,h X)(W_K,h Y)ᵀ`` from ``W_V X`` and ``W_K Y``.

    ``v_x`` is ``W_V X`` with the heads as rows, ``(H d_head, n)``; ``k_y`` is ``W_K Y`` stacked
    per head, ``(H, d_head, n)`` (``fh.k`` itself for ``Y = I``).
    """
    vx = v_x.reshape(fh.n_heads, fh.head_dim, -1)
    cores: FloatArray = np.matmul(vx, k_y.transpose(0, 2, 1))
    cores *= fh.scale
    return cores


def _factored_apply(
    fh: FactoredHeads, a: FloatArray, b: FloatArray, mean: FloatArray, x: FloatArray, *, gram: bool
) -> tuple[FloatArray, FloatArray]:
    """``(M m + c, M X)`` for factored heads, with ``Σ = X`` (``gram=False``) or ``X Xᵀ``.

    ``M X = A X + s Σ_h W_O,h C_h (W_Q,h X)`` with the cores ``C_h = W_V,h Σ W_K,hᵀ``, which are
    ``(W_V,h X)(W_K,h X)ᵀ`` in factor form. The projections of ``X`` onto every head come from one
    product with the stacked ``[W_V; W_Q; W_K]``, the head sum from one product with ``W_O``.
    """
    inner, n = fh.n_heads * fh.head_dim, x.shape[1]
    vqk = fh.vqk
    if gram:
        proj = vqk @ x
        cores = _cores(fh, proj[:inner], proj[2 * inner :].reshape(fh.n_heads, fh.head_dim, n))
    else:
        proj = vqk[: 2 * inner] @ x
        cores = _cores(fh, proj[:inner], fh.k)
    qx = proj[inner : 2 * inner].reshape(fh.n_heads, fh.head_dim, n)
    mx: FloatArray = fh.o_cat @ np.matmul(cores, qx).reshape(inner, n)
    vm_qm = vqk[: 2 * inner] @ mean
    qm = vm_qm[inner:].reshape(fh.n_heads, fh.head_dim, 1)
    dm: FloatArray = fh.o_cat @ (np.matmul(cores, qm).reshape(inner) + vm_qm[:inner]) + b
    if np.any(a):
        mx += a @ x
        dm += a @ mean
    return dm, mx


def moment_field(layer: Layer, mean: FloatArray, cov: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Right-hand side of the moment ODE: ``(dm/dt, dΣ/dt) = (M m + c, M Σ + Σ Mᵀ [+ G Gᵀ])``.

    The covariance derivative is formed as ``P + Pᵀ`` with ``P = M Σ``, so it is exactly symmetric
    and costs one more ``d×d`` product (three in all for one head). With factored heads ``P`` is
    formed directly, ``P = A Σ + s Σ_h W_O,h (W_V,h Σ W_K,hᵀ)(W_Q,h Σ)``, never ``M``:
    ``3 d² H d_head`` multiply-adds (module docstring). A layer with Brownian forcing ``G``
    (``layer.noise``) adds ``G Gᵀ`` (docs/theory.md §6).

    Parameters
    ----------
    layer, mean, cov
        As in :func:`affine_velocity`.

    Returns
    -------
    tuple of numpy.ndarray
        ``(dm/dt, dΣ/dt)`` of shapes ``(d,)`` and ``(d, d)``; ``dΣ/dt`` is exactly symmetric.

    Raises
    ------
    InvalidParametersError
        If the layer has a ReLU/GELU feed-forward: the moments are then not a closed system
        (:func:`gtcontrol.simulate_closure` follows the Gaussian closure); or as
        :func:`affine_velocity` for ``mean`` and ``cov``.

    Examples
    --------
    The moment derivatives of the same layer at ``N(2, 0.5)``: ``dm/dt = Mm + c = −3`` and
    ``dΣ/dt = MΣ + ΣMᵀ = −0.5``.

    >>> from gtcontrol import Layer, moment_field
    >>> dm, dS = moment_field(Layer(B=[[1.0]], V=-1.0), [2.0], [[0.5]])
    >>> dm, dS
    (array([-3.]), array([[-0.5]]))
    """
    mean, cov = _moments_in(layer, mean, cov)
    fh = _factored(layer)
    if fh is not None:
        a, b = layer.affine_ffn()
        dm, p = _factored_apply(fh, a, b, mean, cov, gram=False)
        for v_h, b_h in _dense(layer):
            dm += v_h @ (cov @ (b_h @ mean) + mean)
            p += v_h @ (cov @ (b_h @ cov))
    else:
        m_mat, c = _affine(layer, mean, cov)
        p = m_mat @ cov
        dm = m_mat @ mean + c
    ds = p + p.T
    if layer.noise is not None:
        ds += layer.noise @ layer.noise.T
    return dm, ds


def factor_field(
    layer: Layer, mean: FloatArray, factor: FloatArray, *, shift: FloatArray | None = None
) -> tuple[FloatArray, FloatArray]:
    """Right-hand side of the moment ODE in factor form: ``(dm/dt, dL/dt) = (M m + c, M L)``.

    With ``Σ = L Lᵀ`` (``L`` of size ``d×r``), ``dL/dt = M(Σ) L`` reproduces ``dΣ/dt = MΣ + ΣMᵀ``
    (a congruence), so an integrator on ``L`` keeps Σ positive semidefinite and of rank ``r``
    by construction (docs/theory.md §2). Each head's ``V_h Σ B_h x`` is applied as
    ``V_h (L (Lᵀ (B_h x)))``: O(d² r) per head, never a d×d×d product. Factored heads apply
    ``s W_O,h ((W_V,h L)(W_K,h L)ᵀ)(W_Q,h x)``: O(H d_head d r) in all. Brownian forcing is
    not expressible in factor form (it raises the rank).

    Parameters
    ----------
    layer
        The layer; affine feed-forward only, no noise.
    mean
        The mean ``m``, shape ``(d,)``.
    factor
        ``L``, shape ``(d, r)``.
    shift
        A ``d×d`` matrix ``S`` subtracted from ``A``: the field of ``M − S`` (a rotating frame's
        generator, :mod:`gtcontrol.model._moment_integrator`), formed without the cancellation
        of ``M L − S L`` when ``S`` is large.

    Returns
    -------
    tuple of numpy.ndarray
        ``(dm/dt, dL/dt)`` of shapes ``(d,)`` and ``(d, r)``.
    """
    a, b = layer.affine_ffn()
    if shift is not None:
        a = a - shift
    fh = _factored(layer)
    x = np.column_stack([mean, factor])  # apply M to m and L in one pass
    if fh is not None:
        dm, dl = _factored_apply(fh, a, b, mean, factor, gram=True)
        for v_h, b_h in _dense(layer):
            dm += _times(v_h, mean)
            if _uniform(b_h):
                continue
            vx = _times(v_h, factor @ (factor.T @ _times(b_h, x)))
            dm += vx[:, 0]
            dl += vx[:, 1:]
        return dm, dl
    mx = a @ x
    c = b.copy()
    for v_h, b_h in layer.heads:
        c += _times(v_h, mean)
        if not _uniform(b_h):
            mx += _times(v_h, factor @ (factor.T @ _times(b_h, x)))
    return mx[:, 0] + c, mx[:, 1:]


def _uniform(b: FloatArray) -> bool:
    """``B = 0``: the head attends uniformly and moves only the mean (tested from d = 64, where
    the O(d²) test is cheaper than the O(d² r) products it saves)."""
    return b.shape[0] >= 64 and _structure(b)[0]


def _times(v: FloatArray, x: FloatArray) -> FloatArray:
    """``V x``, as a row scaling when ``V`` is diagonal (e.g. :func:`gtcontrol.stabilize`'s added
    heads ``−scP``, ``κP`` and ``B₀ = P/s`` for a target ``I ⊕ 0``): the test is O(d²), the
    product it saves O(d² r) (so it runs from d = 64)."""
    if v.shape[0] >= 64:  # below, the test costs more than the product
        diag = _structure(v)[1]
        if diag is not None:
            out: FloatArray = diag[:, None] * x if x.ndim == 2 else diag * x
            return out
    prod: FloatArray = v @ x
    return prod


#: The structure of each read-only head matrix seen (by identity, while it lives): the O(d²)
#: tests of :func:`_uniform` and :func:`_times` are otherwise a tenth of every field evaluation
#: with stabilize's dense heads (docs/benchmarks.md).
_STRUCTURES: dict[int, tuple[weakref.ref[FloatArray], bool, FloatArray | None]] = {}


def _structure(v: FloatArray) -> tuple[bool, FloatArray | None]:
    """Whether ``v`` is zero, and its diagonal if it is diagonal (else ``None``); cached for
    arrays that cannot change (read-only and owning their data, as a :class:`Layer`'s)."""
    key = id(v)
    hit = _STRUCTURES.get(key)
    if hit is not None and hit[0]() is v:
        return hit[1], hit[2]
    nonzero = np.count_nonzero(v)
    diag: FloatArray | None = None
    if nonzero <= v.shape[0]:
        d = v.diagonal()
        if np.count_nonzero(d) == nonzero:
            diag = np.array(d)
    if not v.flags.writeable and v.flags.owndata:

        def forget(_: object, k: int = key) -> None:
            _STRUCTURES.pop(k, None)

        _STRUCTURES[key] = (weakref.ref(v, forget), nonzero == 0, diag)
    return nonzero == 0, diag
