"""Layer parameters and piecewise-constant schedules.

A layer is the time-invariant velocity field (docs/theory.md §1)

    v(x; μ) = A x + b + Σ_h V_h Attn_h(x; μ) [+ W_out σ(W_in x + b_in)]

with attention ``Attn_h(x; μ) = ∫ y e^{yᵀB_h x} dμ(y) / ∫ e^{yᵀB_h x} dμ(y)``. In Transformer terms
``B_h = K_hᵀ Q_h / sqrt(d_head)`` and ``V_h = W_O,h W_V,h``; :meth:`Layer.from_projections` keeps
those rank-``d_head`` factors (:class:`~gtcontrol.model.heads.FactoredHeads`) so that the moment and
token fields never form a ``d×d×d`` product per head. An L-layer network of depth T is a
:class:`Schedule`: L layers, each active for ``T/L``.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from .._linalg import FloatArray
from .._readonly import ReadOnlyArrays
from .._status import shown
from .._validation import (
    as_dim,
    as_float_array,
    as_positive_float,
    as_positive_int,
    frozen,
    leading_size,
    set_fields,
)
from ..errors import GTControlError, InvalidParametersError
from ._layer_stack import LayerStack
from .heads import FactoredHeads

__all__ = ["Control", "FeedForward", "Layer", "Schedule", "as_control"]

_ACTIVATIONS = ("identity", "relu", "gelu")


@dataclass(frozen=True, eq=False, init=False)
class FeedForward(ReadOnlyArrays):
    """A token-level feed-forward ``W_out σ(W_in x + b_in)`` (added to the layer's ``A x + b``).

    With ``activation="identity"`` it is affine (``W_out W_in x + W_out b_in``) and the moment
    model stays exact; ``"relu"`` and ``"gelu"`` (exact erf form) are outside the Gaussian theory
    and are only accepted by the token-level simulator. The names and the ``nn.Linear`` layout
    are those of :class:`gtcontrol.interop.FeedForwardWeights`, the feed-forward read from a
    model (whose output bias is the layer's ``b`` here).

    Parameters
    ----------
    W_in
        Input matrix, shape ``(k, d)``.
    W_out
        Output matrix, shape ``(d, k)``.
    b_in
        Hidden bias, shape ``(k,)``; zero when omitted.
    activation
        ``"identity"``, ``"relu"`` (default) or ``"gelu"``.

    Raises
    ------
    InvalidParametersError
        On NaN/inf, inconsistent shapes or an unknown activation.
    """

    W_in: FloatArray
    W_out: FloatArray
    b_in: FloatArray
    activation: str

    def __init__(
        self, W_in: Any, W_out: Any, *, b_in: Any = None, activation: str = "relu"
    ) -> None:
        w_in = as_float_array("FeedForward.W_in", W_in, ndim=2)
        k, d = w_in.shape
        w_out = as_float_array("FeedForward.W_out", W_out, ndim=2, shape=(d, k))
        bias = (
            np.zeros(k)
            if b_in is None
            else as_float_array("FeedForward.b_in", b_in, ndim=1, shape=(k,))
        )
        if activation not in _ACTIVATIONS:
            raise InvalidParametersError(
                f"FeedForward.activation: expected one of {_ACTIVATIONS}, got {activation!r}"
            )
        set_fields(self, W_in=w_in, W_out=w_out, b_in=bias, activation=activation)

    @property
    def dim(self) -> int:
        return int(self.W_in.shape[1])

    @property
    def is_affine(self) -> bool:
        """True for the identity activation (then the term is ``W_out W_in x + W_out b_in``)."""
        return self.activation == "identity"


@dataclass(frozen=True, eq=False, init=False)
class Layer(ReadOnlyArrays):
    """One time-invariant layer: feed-forward ``(A, b)`` plus attention heads ``(V_h, B_h)``.

    Parameters
    ----------
    A, b
        Affine feed-forward, shapes ``(d, d)`` and ``(d,)``; zero when omitted.
    B, V
        A single attention head; ``V`` defaults to zero when only ``B`` is given and ``B`` to
        zero when only ``V`` is given (then attention returns the mean). A scalar ``V`` means
        ``V I`` (the Riccati class, docs/theory.md §2), as for the heads.
    heads
        Several heads as a sequence of ``(V_h, B_h)`` pairs, a
        :class:`~gtcontrol.model.heads.FactoredHeads` (see :meth:`from_projections`), or a
        sequence whose first item is a ``FactoredHeads`` followed by dense pairs (a pretrained
        layer with heads added to it, e.g. by :func:`gtcontrol.stabilize`); exclusive with
        ``B`` and ``V``. A scalar ``V_h`` means ``V_h I``.
    ffn
        Optional non-affine token-level feed-forward term (see :class:`FeedForward`).
    noise
        Optional ``(d, k)`` matrix ``G`` (usually ``k = d``): every token is also driven by
        independent Brownian forcing, ``dx = v(x) dt + G dW`` (docs/theory.md §6). Gaussians stay
        Gaussian and the covariance gains ``G Gᵀ``: ``dΣ/dt = MΣ + ΣMᵀ + G Gᵀ``.
    dim
        Dimension, needed only when no matrix is given.

    Attributes
    ----------
    A, b, heads
        Always set: zero matrices for omitted parts, ``heads`` a tuple of ``(V_h, B_h)``, the
        factored heads first, then the dense ones. For a layer with factored heads their dense
        pairs are computed on first access and cached.
    factored_heads
        The :class:`~gtcontrol.model.heads.FactoredHeads` the layer was built with, else ``None``.
        The moment and token fields use it when set; the layer equals the dense layer built from
        ``heads`` in every computation (to round-off).
    dense_heads
        The heads held as dense ``(V_h, B_h)`` pairs: every head of a layer without factored
        heads, the heads after the factored group otherwise.

    Raises
    ------
    InvalidParametersError
        On NaN/inf, inconsistent dimensions (the message names the matrix and both shapes), or
        conflicting arguments.

    Examples
    --------
    One head ``V = −0.5 I`` (a scalar ``V``) with a feed-forward ``A``; omitted parts are zero.

    >>> import numpy as np
    >>> from gtcontrol import Layer
    >>> layer = Layer(A=-np.eye(2), B=np.eye(2), V=-0.5)
    >>> layer.dim, len(layer.heads)
    (2, 1)
    >>> V, B = layer.heads[0]
    >>> bool(np.array_equal(V, -0.5 * np.eye(2)))
    True
    >>> Layer(dim=3).b
    array([0., 0., 0.])
    """

    A: FloatArray
    b: FloatArray
    factored_heads: FactoredHeads | None
    ffn: FeedForward | None
    noise: FloatArray | None
    dense_heads: tuple[tuple[FloatArray, FloatArray], ...]
    # ``heads`` is a property: the dense pairs of ``factored_heads`` (computed once), then
    # ``dense_heads``.
    _all_heads: tuple[tuple[FloatArray, FloatArray], ...] | None

    def __init__(
        self,
        A: Any = None,
        B: Any = None,
        V: Any = None,
        b: Any = None,
        *,
        heads: Sequence[tuple[Any, Any]] | FactoredHeads | None = None,
        ffn: FeedForward | None = None,
        noise: Any = None,
        dim: int | None = None,
    ) -> None:
        if heads is not None and (B is not None or V is not None):
            raise InvalidParametersError("Layer: give either heads or a single head (B, V)")
        d = _infer_dim(A, B, V, b, heads, ffn, dim)
        a = np.zeros((d, d)) if A is None else as_float_array("A", A, ndim=2, shape=(d, d))
        bb = np.zeros(d) if b is None else as_float_array("b", b, ndim=1, shape=(d,))
        factored, rest = _split_heads(heads)
        pairs: list[tuple[Any, Any]] = []
        names: list[tuple[str, str]] = []
        if heads is None:
            if B is not None or V is not None:
                pairs.append((V, B))
            names = [("V", "B")] * len(pairs)
        else:
            offset = 0 if factored is None else 1
            pairs = [tuple(h) for h in rest]
            names = [
                (f"heads[{i + offset}].V", f"heads[{i + offset}].B") for i in range(len(pairs))
            ]
        hs: list[tuple[FloatArray, FloatArray]] = []
        for (vh, bh), (nv, nb) in zip(pairs, names, strict=True):
            if vh is None:
                vm = np.zeros((d, d))
            elif leading_size(nv, vh) is None:
                vm = _scalar_times_identity(nv, vh, d)
            else:
                vm = as_float_array(nv, vh, ndim=2, shape=(d, d))
            bm = np.zeros((d, d)) if bh is None else as_float_array(nb, bh, ndim=2, shape=(d, d))
            hs.append((vm, bm))
        if ffn is not None and not isinstance(ffn, FeedForward):
            raise InvalidParametersError(f"ffn: expected a FeedForward, got {type(ffn).__name__}")
        if ffn is not None and ffn.dim != d:
            raise InvalidParametersError(
                f"ffn: FeedForward acts on dimension {ffn.dim}, layer dimension is {d}"
            )
        g = None if noise is None else as_float_array("noise", noise, ndim=2, shape=(d, None))
        set_fields(
            self,
            A=a,
            b=bb,
            factored_heads=factored,
            dense_heads=tuple(hs),
            _all_heads=None if factored is not None else tuple(hs),
            ffn=ffn,
            noise=g,
        )

    @classmethod
    def from_projections(
        cls,
        W_Q: Any,
        W_K: Any,
        W_V: Any,
        W_O: Any,
        *,
        n_heads: int,
        A: Any = None,
        b: Any = None,
        ffn: FeedForward | None = None,
        noise: Any = None,
        scale: float | None = None,
    ) -> Layer:
        """A layer whose heads are kept as the projection factors of a Transformer layer.

        With nn.Linear weights and ``d_head = rows(W_Q) / n_heads``, head ``h`` is
        ``B_h = scale · W_K,hᵀ W_Q,h`` and ``V_h = W_O,h W_V,h`` (docs/theory.md §2), so the
        attention weight of key ``y`` for query ``x`` is ``exp(yᵀ B_h x)``. The layer keeps the
        rank-``d_head`` factors (:attr:`factored_heads`): the moment field then costs
        ``O(H d² d_head)`` and token attention projects to ``d_head`` first. ``heads`` (dense
        pairs) stays available, computed on first access.

        Parameters
        ----------
        W_Q, W_K, W_V, W_O, n_heads
            The attention weights and head count, as in :meth:`FactoredHeads.from_projections`.
        A, b, ffn, noise
            Feed-forward ``(A, b)``, token-level ``ffn`` and Brownian forcing, as in :class:`Layer`.
        scale
            Logit scale; ``None`` (default) means ``1/sqrt(d_head)``.

        Returns
        -------
        Layer
            The layer, equal to ``Layer(A, b=b, heads=layer.heads, ...)`` in every computation.

        Raises
        ------
        InvalidParametersError
            If a weight is not a finite real matrix or does not fit the others (the message
            names it), if ``n_heads`` does not divide ``W_Q``'s rows, or as in :class:`Layer`.

        Examples
        --------
        >>> import numpy as np
        >>> from gtcontrol import Layer
        >>> rng = np.random.default_rng(0)
        >>> wq, wk, wv = (rng.standard_normal((4, 3)) for _ in range(3))
        >>> layer = Layer.from_projections(wq, wk, wv, rng.standard_normal((3, 4)), n_heads=2)
        >>> layer.n_heads, layer.factored_heads.head_dim, len(layer.heads)
        (2, 2, 2)
        """
        fh = FactoredHeads.from_projections(W_Q, W_K, W_V, W_O, n_heads=n_heads, scale=scale)
        return cls(A, b=b, heads=fh, ffn=ffn, noise=noise, dim=fh.dim)

    def __getstate__(self) -> dict[str, Any]:
        """What a copy (``pickle``, ``copy``) keeps: every field but the dense pairs computed
        from factored heads, a cache that :attr:`heads` rebuilds on first use (28 MB for
        twelve heads at d = 385, whose factors take 2.4 MB)."""
        state = dict(self.__dict__)
        if self.factored_heads is not None:
            state["_all_heads"] = None
        return state

    @property
    def heads(self) -> tuple[tuple[FloatArray, FloatArray], ...]:
        """Every head as a dense ``(V_h, B_h)`` pair, the factored ones first (computed once)."""
        every = self._all_heads
        if every is None:
            assert self.factored_heads is not None
            every = self.factored_heads.dense() + self.dense_heads
            set_fields(self, _all_heads=every)
        return every

    @property
    def n_heads(self) -> int:
        """Number of attention heads (without forming dense factored heads)."""
        n_factored = 0 if self.factored_heads is None else self.factored_heads.n_heads
        return n_factored + len(self.dense_heads)

    @property
    def head_groups(self) -> list[FactoredHeads | tuple[FloatArray, FloatArray]]:
        """The heads as given: the factored group (if any), then the dense pairs.

        ``Layer(A, b=b, heads=layer.head_groups)`` rebuilds the layer with the same storage.
        """
        group: list[FactoredHeads | tuple[FloatArray, FloatArray]] = []
        if self.factored_heads is not None:
            group.append(self.factored_heads)
        group.extend(self.dense_heads)
        return group

    @property
    def dim(self) -> int:
        """Token dimension ``d``."""
        return int(self.A.shape[0])

    @property
    def is_gaussian_exact(self) -> bool:
        """True when the layer keeps Gaussians Gaussian (no non-affine feed-forward term)."""
        return self.ffn is None or self.ffn.is_affine

    def affine_ffn(self) -> tuple[FloatArray, FloatArray]:
        """The effective affine feed-forward ``(A_eff, b_eff)`` used by the moment model.

        Raises
        ------
        InvalidParametersError
            If the layer has a ReLU/GELU feed-forward: the moment model is not exact there.
        """
        if self.ffn is None:
            return self.A, self.b
        if not self.ffn.is_affine:
            raise InvalidParametersError(
                f"ffn: a {self.ffn.activation} feed-forward is outside the exact Gaussian moment "
                "model; use simulate_tokens for it"
            )
        return self.A + self.ffn.W_out @ self.ffn.W_in, self.b + self.ffn.W_out @ self.ffn.b_in

    def replace(self, **changes: Any) -> Layer:
        """A copy with some of ``A``, ``b``, ``heads``, ``ffn``, ``noise`` replaced.

        Factored heads are kept unless ``heads`` is replaced (by dense pairs or another
        :class:`~gtcontrol.model.heads.FactoredHeads`).

        Parameters
        ----------
        **changes
            New values for some of ``A``, ``b``, ``heads``, ``ffn``, ``noise``.

        Returns
        -------
        Layer
            The new layer.

        Raises
        ------
        InvalidParametersError
            On an unknown field or an invalid value.
        """
        kw: dict[str, Any] = {
            "A": self.A,
            "b": self.b,
            "heads": self.head_groups,
            "ffn": self.ffn,
            "noise": self.noise,
        }
        unknown = set(changes) - set(kw)
        if unknown:
            raise InvalidParametersError(f"Layer.replace: unknown field(s) {sorted(unknown)}")
        kw.update(changes)
        return Layer(
            kw["A"], b=kw["b"], heads=kw["heads"], ffn=kw["ffn"], noise=kw["noise"], dim=self.dim
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters, in the keys of a design file's ``[layer]`` table.

        ``A``, ``b`` always; one head as ``V``, ``B`` (zero matrices when there is none),
        several as ``heads = [{V, B}, ...]``; ``ffn`` and ``noise`` when set. Feeding the dict
        back to a design file rebuilds the same layer. Factored heads are written as their dense
        pairs (design files hold dense heads only), so the rebuilt layer is dense and equal to
        this one.
        """
        d = self.dim
        out: dict[str, Any] = {"A": self.A.tolist(), "b": self.b.tolist()}
        if len(self.heads) <= 1:
            v, b = self.heads[0] if self.heads else (np.zeros((d, d)), np.zeros((d, d)))
            out["V"], out["B"] = v.tolist(), b.tolist()
        else:
            out["heads"] = [{"V": v.tolist(), "B": b.tolist()} for v, b in self.heads]
        if self.ffn is not None:
            out["ffn"] = {
                "W_in": self.ffn.W_in.tolist(),
                "W_out": self.ffn.W_out.tolist(),
                "b_in": self.ffn.b_in.tolist(),
                "activation": self.ffn.activation,
            }
        if self.noise is not None:
            out["noise"] = self.noise.tolist()
        return out

    # A Layer is also a control valid for any horizon.
    def layer_at(self, t: float) -> Layer:
        """The layer active at depth ``t``: always this one."""
        return self

    def __repr__(self) -> str:
        fh = self.factored_heads
        factored = "" if fh is None else f", factored=True, head_dim={fh.head_dim}"
        if fh is not None and self.dense_heads:
            factored += f", dense_heads={len(self.dense_heads)}"
        return (
            f"Layer(dim={self.dim}, heads={self.n_heads}{factored}, ffn={self.ffn is not None}, "
            f"noise={self.noise is not None})"
        )


def _split_heads(heads: Any) -> tuple[FactoredHeads | None, Sequence[Any]]:
    """``heads`` as ``(factored group or None, the dense pairs that follow)``."""
    if heads is None:
        return None, ()
    if isinstance(heads, FactoredHeads):
        return heads, ()
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence):
        raise InvalidParametersError(
            "heads: expected a sequence of (V_h, B_h) pairs, a FactoredHeads, or a FactoredHeads "
            "followed by pairs"
        )
    factored = heads[0] if len(heads) and isinstance(heads[0], FactoredHeads) else None
    rest = heads[1:] if factored is not None else heads
    for i, h in enumerate(rest):
        if isinstance(h, FactoredHeads):
            raise InvalidParametersError(
                f"heads[{i + (factored is not None)}]: a FactoredHeads may only come first "
                "(one factored group, then dense (V_h, B_h) pairs)"
            )
    return factored, rest


def _scalar_times_identity(name: str, value: Any, d: int) -> FloatArray:
    x = as_float_array(name, value, ndim=0)
    return float(x) * np.eye(d)


def _infer_dim(
    A: Any, B: Any, V: Any, b: Any, heads: Any, ffn: FeedForward | None, dim: int | None
) -> int:
    candidates: list[tuple[str, int]] = []
    for name, val in (("A", A), ("B", B), ("V", V), ("b", b)):
        n = None if val is None else leading_size(name, val)
        if n is not None:
            candidates.append((name, n))
    factored, rest = _split_heads(heads)
    if factored is not None:
        candidates.append(("heads", factored.dim))
    if heads is not None:
        offset = 0 if factored is None else 1
        for j, h in enumerate(rest):
            i = j + offset
            if not isinstance(h, Sequence) or len(h) != 2:
                raise InvalidParametersError(f"heads[{i}]: expected a pair (V_h, B_h)")
            for nm, val in zip(("V", "B"), h):
                n = None if val is None else leading_size(f"heads[{i}].{nm}", val)
                if n is not None:
                    candidates.append((f"heads[{i}].{nm}", n))
    if ffn is not None and isinstance(ffn, FeedForward):
        candidates.append(("ffn.W_in", ffn.dim))
    if dim is not None:
        candidates.insert(0, ("dim", as_dim("dim", as_positive_int("dim", dim))))
    if not candidates:
        raise InvalidParametersError("Layer: give at least one matrix or dim to fix the dimension")
    first_name, first = candidates[0]
    for name, n in candidates[1:]:
        if n != first:
            raise InvalidParametersError(
                f"{name}: has leading size {n}, but {first_name} fixes the dimension to {first}"
            )
    return first


@runtime_checkable
class Control(Protocol):
    """Anything that assigns a layer to each depth ``t ∈ [0, T]``.

    Schedules and closed-form controls implement it. ``breakpoints`` are the depths where the
    parameters may jump (integrators step exactly onto them). A control may also set a class
    attribute ``piecewise_constant = True`` when its parameters are constant between breakpoints.
    """

    @property
    def T(self) -> float: ...

    @property
    def breakpoints(self) -> FloatArray: ...

    def layer_at(self, t: float) -> Layer: ...


@dataclass(frozen=True, eq=False, init=False)
class Schedule(LayerStack[Layer]):
    """An L-layer network of depth ``T``: layer ``k`` is active on ``[k T/L, (k+1) T/L)``.

    Parameters
    ----------
    layers
        One or more :class:`Layer` of equal dimension.
    T
        Total depth, positive.

    Attributes
    ----------
    dim, n_layers
        The dimension of every layer and the number ``L`` of layers.

    Raises
    ------
    InvalidParametersError
        If ``layers`` is empty, holds something else than :class:`Layer`, or mixes dimensions,
        or if ``T`` is not a positive number.

    Examples
    --------
    >>> from gtcontrol import Layer, Schedule
    >>> sched = Schedule([Layer(V=-1.0, dim=2), Layer(dim=2)], T=2.0)
    >>> sched.duration, sched.layer_at(1.5) is sched.layers[1]
    (1.0, True)
    """

    layers: tuple[Layer, ...]
    T: float
    #: Parameters are constant between breakpoints (integrators may fix the layer per segment).
    piecewise_constant = True

    def __init__(self, layers: Sequence[Layer] | Layer, T: float) -> None:
        if isinstance(layers, Layer):
            layers = [layers]
        if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence):
            raise InvalidParametersError("layers: expected a sequence of Layer objects")
        if len(layers) == 0:
            raise InvalidParametersError("layers: expected at least one layer, got 0")
        for i, lay in enumerate(layers):
            if not isinstance(lay, Layer):
                raise InvalidParametersError(
                    f"layers[{i}]: expected a Layer, got {type(lay).__name__}"
                )
            if lay.dim != layers[0].dim:
                raise InvalidParametersError(
                    f"layers[{i}]: dimension {lay.dim} differs from layers[0] dimension "
                    f"{layers[0].dim}"
                )
        set_fields(self, layers=tuple(layers), T=as_positive_float("T", T))

    @property
    def duration(self) -> float:
        """Duration ``T/L`` of each layer."""
        return self.T / len(self.layers)

    @property
    def breakpoints(self) -> FloatArray:
        """Layer boundaries ``0, T/L, ..., T``."""
        return frozen(np.linspace(0.0, self.T, len(self.layers) + 1))

    def to_dict(self) -> dict[str, Any]:
        """``{"T": T, "layers": [{A, b, V, B | heads, ..., "duration": T/L}, ...]}`` (§8)."""
        return {
            "T": self.T,
            "layers": [{**lay.to_dict(), "duration": self.duration} for lay in self.layers],
        }

    def index_at(self, t: float) -> int:
        """Index of the layer active at ``t`` (right-continuous; ``t = T`` maps to the last).

        A non-numeric or NaN ``t`` raises :class:`InvalidParametersError`.
        """
        try:
            tf = float(t)
        except (TypeError, ValueError, OverflowError):
            tf = float("nan")
        if tf != tf or isinstance(t, (str, bytes, bool)):
            raise InvalidParametersError(f"t: expected a real depth, got {t!r}")
        k = (
            int(np.floor(tf / self.duration + 1e-12))
            if abs(tf) < 1e300
            else (-1 if tf < 0 else len(self.layers))
        )
        return min(max(k, 0), len(self.layers) - 1)

    def layer_at(self, t: float) -> Layer:
        """The layer active at depth ``t``."""
        return self.layers[self.index_at(t)]

    def __repr__(self) -> str:
        return f"Schedule(dim={self.dim}, L={len(self.layers)}, T={self.T:g})"


@dataclass(frozen=True)
class _ConstantControl:
    """A single layer held for depth ``T`` (what ``simulate(layer, ..., T)`` integrates)."""

    layer: Layer
    T: float
    piecewise_constant = True

    @property
    def breakpoints(self) -> FloatArray:
        return np.array([0.0, self.T])

    def layer_at(self, t: float) -> Layer:
        return self.layer


def as_control(control: Any, T: float | None) -> Control:
    """Normalize ``control`` (a Layer, a Schedule or any :class:`Control`) and a horizon.

    A :class:`Layer` needs ``T``; a control with its own ``T`` accepts ``T=None`` or its own ``T``
    (a different value is an error rather than a silent rescaling).

    Parameters
    ----------
    control
        A :class:`Layer`, a :class:`Schedule` or any :class:`Control`.
    T
        The horizon, or ``None`` to use the control's own.

    Returns
    -------
    Control
        The control to integrate (a single layer held for ``T``, or ``control`` itself).

    Raises
    ------
    InvalidParametersError
        If ``T`` is missing for a Layer, not positive, or differs from the control's own, or if
        ``control`` is not a control.
    """
    if isinstance(control, Layer):
        if T is None:
            raise InvalidParametersError("T: a single Layer needs a horizon T > 0")
        return _ConstantControl(control, as_positive_float("T", T))
    if isinstance(control, Control):
        checked: Control = (
            control
            if isinstance(control, (Schedule, _ConstantControl))
            else _checked_control(control)
        )
        if T is not None:
            t = as_positive_float("T", T)
            if not np.isclose(t, checked.T, rtol=1e-12, atol=0.0):
                raise InvalidParametersError(
                    f"T: {t:g} differs from the model's own horizon T = {checked.T:g}; "
                    "omit T or rebuild the schedule"
                )
        return checked
    raise InvalidParametersError(
        f"control: expected a Layer, Schedule or control with .T and .layer_at, "
        f"got {type(control).__name__}"
    )


def _checked_control(control: Any) -> Control:
    """``control`` once its protocol is checked: a positive ``T``; finite ``breakpoints``
    rising strictly from 0 to ``T``; a :class:`Layer` at depth 0. A control written outside
    gtcontrol is wrapped so that every later layer is checked too (type and dimension)."""
    try:
        horizon, breaks, first = control.T, control.breakpoints, control.layer_at(0.0)
    except GTControlError:
        raise
    except Exception as exc:  # a user's control: anything it raises is its own failure
        raise InvalidParametersError(
            f"control: its T, breakpoints or layer_at(0) failed ({type(exc).__name__}: {exc})"
        ) from None
    t = as_positive_float("control.T", horizon)
    # depths, not entries of a product: any finite float (a Schedule's T may pass 1e150)
    b = as_float_array("control.breakpoints", breaks, ndim=1, max_abs=math.inf)
    if b.size < 2 or b[0] != 0.0 or np.any(np.diff(b) <= 0) or not np.isclose(b[-1], t):
        raise InvalidParametersError(
            "control.breakpoints: expected depths rising strictly from 0 to the control's "
            f"T = {t:g}, got {shown(breaks)}"
        )
    if not isinstance(first, Layer):
        raise InvalidParametersError(
            f"control.layer_at(0): expected a Layer, got {type(first).__name__}"
        )
    if type(control).__module__.split(".")[0] == "gtcontrol":
        return cast(Control, control)
    return _CheckedControl(control, t, frozen(b), first.dim)


class BrokenControl(InvalidParametersError):
    """A control written outside gtcontrol broke its protocol partway through a run: bad input,
    which the integrators let through instead of reporting it as a failed step."""


@dataclass(frozen=True, eq=False)
class _CheckedControl:
    """A control written outside gtcontrol, whose every layer is checked as it is asked for."""

    inner: Any
    T: float
    breakpoints: FloatArray
    dim: int

    @property
    def piecewise_constant(self) -> bool:
        return bool(getattr(self.inner, "piecewise_constant", False))

    def layer_at(self, t: float) -> Layer:
        lay = self.inner.layer_at(t)
        if not isinstance(lay, Layer) or lay.dim != self.dim:
            got = f"dimension {lay.dim}" if isinstance(lay, Layer) else type(lay).__name__
            raise BrokenControl(
                f"control.layer_at({t:g}): expected a Layer of dimension {self.dim}, got {got}"
            )
        return lay
