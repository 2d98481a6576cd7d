"""Reading a Transformer from an ONNX file by following its graph (extra ``experiments``).

No name of a node or an initializer is trusted. For every ``Softmax`` over the last axis:

1. **Scores.** Walk back from the softmax through scalar scalings (``Mul``/``Div`` by a scalar,
   whatever computes it) and masks (``Add``, ``Sub``, ``Where``) to the ``MatMul`` of two
   activations: its inputs are the query heads ``Q`` and the transposed key heads ``Kᵀ``. The
   ``MatMul`` that reads the softmax's output has the value heads ``V`` as its other input.
2. **Projections.** From each of ``Q``, ``Kᵀ``, ``V`` the nearest ``MatMul`` (or ``Gemm``) with a
   constant 2-D weight up the graph is its projection; a following ``Add`` of a constant vector
   (or ``Gemm``'s ``C``) is its bias. The three must read the same tensor (one projection may
   feed all three: a fused ``c_attn``/``Wqkv``).
3. **Head layout, by evaluation.** The operations between a projection's output and ``Q`` (or
   ``Kᵀ``, ``V``) — reshapes, transposes, splits, gathers, a scalar scaling — are run with onnx's
   reference evaluator on a coded probe (column ``j`` holds ``j + 1``), on ones and on random
   numbers: the coded output says which column lands at head ``h``, entry ``e``; the ones
   say the scalar factor; the random probe checks that the path is exactly that (anything else
   is refused, naming the path). The output projection is read the same way forward from the
   attention's context. The weights themselves are the file's initializers, in float64.
4. **Wiring.** The residual ``Add`` after the output projection, the ``LayerNormalization`` nodes
   around it and the feed-forward (two constant-weight projections with an activation between
   them, identified by evaluating it: exact or tanh GELU, ReLU, SiLU, plain or gated) give the
   norm placement: post-LN when the feed-forward's residual adds the normalized sum, pre-LN when
   it adds the sum itself.

The graph is run once at one token (every symbolic dimension set to 1; position inputs at 0,
inputs named ``*mask*`` at one) to give every tensor a value; what depends on positions and
masks — position embeddings, causal or padding masks, rotations of queries and keys — is read
at that one token at position 0 and otherwise not interpreted (the model's notes say so).

Reading a file also records what running it on data needs (:class:`OnnxPlan`, kept per file
and found again by :func:`onnx_plan`): the tensor each layer's attention reads (the input of
its projections), the graph's inputs, and the input of token ids with the row count of the
embedding table it gathers from (:mod:`._onnx_data` runs the graph).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .._linalg import FloatArray
from ..errors import GTControlError
from ._deps import ModelFileError, require_onnx
from ._weights import (
    ACTIVATIONS,
    AttentionWeights,
    FeedForwardWeights,
    LayerNormWeights,
    activation,
)
from .extraction import ExtractedLayer, ExtractedModel

__all__ = ["NOT_IDS", "GraphInput", "OnnxPlan", "onnx_plan", "read_onnx"]

_SHAPE_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "Dropout")
_MASK_OPS = ("Add", "Sub", "Where", "Mul", "Div", "Cast", "Identity")
_PROJ = ("MatMul", "Gemm")
_MAX_WALK = 64
#: Words of input names that are not token ids (masks, token types, positions).
NOT_IDS = ("mask", "type", "segment", "position")
_MAX_PLANS = 16


@dataclass(frozen=True)
class _Projection:
    node: Any
    weight: FloatArray  # nn.Linear layout (out, in)
    bias: FloatArray | None
    input: str  # the activation it reads
    output: str  # after the bias


@dataclass(frozen=True)
class _Block:
    attention: AttentionWeights
    reads: str  # what the attention reads (the projections' input)
    writes: str  # the output projection's output (after its bias)
    positional: bool


@cache
def _gather_elements() -> type:
    """ONNX ``GatherElements``, exactly (``numpy.take_along_axis``).

    onnx's reference implementation gathers with ``numpy.choose``, which takes at most 64
    choices, and falls back to a 2-D path that reads only each row's first index: a static
    export's token-type gather over a 64-position buffer (BERT) comes out wrong or fails.
    """
    from onnx.reference.op_run import OpRun

    class GatherElements(OpRun):
        op_domain = ""

        def _run(self, data: Any, indices: Any, axis: int = 0) -> tuple[Any]:
            data, idx = np.asarray(data), np.asarray(indices).astype(np.int64)
            ax = int(axis) % max(data.ndim, 1)
            size = data.shape[ax]
            if idx.ndim != data.ndim or (idx.size and (idx.min() < -size or idx.max() >= size)):
                raise ValueError(
                    f"GatherElements: indices of shape {idx.shape} outside data {data.shape}"
                )
            # the other axes of the indices may be shorter than the data's (the spec's rule)
            part = tuple(slice(None) if i == ax else slice(0, n) for i, n in enumerate(idx.shape))
            return (np.take_along_axis(data[part], np.where(idx < 0, idx + size, idx), axis=ax),)

    return GatherElements


@cache
def _erf() -> type:
    """ONNX ``Erf``, vectorized (scipy) in float64.

    onnx's reference implementation calls ``math.erf`` element by element (most of the time
    of a BERT's forward pass) and rounds to float32 even for float64 inputs.
    """
    from onnx.reference.op_run import OpRun
    from scipy.special import erf

    class Erf(OpRun):
        op_domain = ""

        def _run(self, x: Any) -> tuple[Any]:
            a = np.asarray(x)
            return (np.asarray(erf(a.astype(np.float64))).astype(a.dtype),)

    return Erf


def reference_evaluator(model: Any) -> Any:
    """onnx's reference evaluator for ``model``, with the operators it gets wrong (or slowly)
    replaced."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model, new_ops=[_gather_elements(), _erf()])


class _Graph:
    """An ONNX graph with producers, consumers, constants and one reference run of values."""

    def __init__(self, model: Any, path: Path) -> None:
        onnx = require_onnx()
        self.onnx, self.model, self.path = onnx, model, path
        graph = model.graph
        self.nodes = list(graph.node)
        self.init = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
        self.producer = {out: n for n in self.nodes for out in n.output}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for n in self.nodes:
            for name in n.input:
                self.consumers[name].append(n)
        self.const = set(self.init) | {""}
        for n in self.nodes:
            if all(i in self.const for i in n.input):
                self.const.update(n.output)
        self.inputs = [i for i in graph.input if i.name not in self.init]
        foreign = sorted(
            {f"{n.domain}.{n.op_type}" for n in self.nodes if n.domain not in ("", "ai.onnx")}
        )
        if foreign:
            raise ModelFileError(
                f"{path}: unsupported op pattern: operators of another domain "
                f"({', '.join(foreign)}; fused by a graph optimizer); expected a plain export "
                "(torch.onnx.export)"
            )
        self.values = self._run_all()

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what}")

    def _feeds(self) -> dict[str, Any]:
        onnx = self.onnx
        feeds = {}
        for inp in self.inputs:
            tt = inp.type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
            shape = [d.dim_value if d.dim_value > 0 else 1 for d in tt.shape.dim]
            fill = 1 if "mask" in inp.name.lower() else 0
            feeds[inp.name] = np.full(shape, fill, dtype=dtype)
        return feeds

    def _run_all(self) -> dict[str, Any]:
        try:
            values = reference_evaluator(self.model).run(None, self._feeds(), intermediate=True)
        except Exception as exc:  # the reference evaluator raises anything
            line = " ".join(str(exc).split())[:300] or type(exc).__name__
            raise self.fail(
                "onnx's reference evaluator, which gtcontrol reads the graph with, cannot run it "
                f"({type(exc).__name__}: {line}); expected a graph that runs on one input of "
                "its declared shape"
            ) from None
        return dict(values)

    def value(self, name: str) -> Any:
        return self.init[name] if name in self.init else self.values[name]

    def scalar(self, name: str) -> float | None:
        v = np.asarray(self.value(name))
        return float(v.reshape(-1)[0]) if v.size == 1 else None

    def between(self, sources: Iterable[str], targets: Iterable[str]) -> list[Any]:
        """The nodes on a path from ``sources`` to ``targets``, in graph order."""
        down: set[str] = set(sources)
        chosen = []
        for n in self.nodes:
            if any(i in down for i in n.input):
                down.update(n.output)
                chosen.append(n)
        up: set[str] = set(targets)
        keep = []
        for n in reversed(chosen):
            if any(o in up for o in n.output):
                up.update(n.input)
                keep.append(n)
        keep.reverse()
        return keep

    def evaluate(self, probes: dict[str, Any], outputs: list[str]) -> list[Any]:
        """Run only the nodes between ``probes`` and ``outputs``; everything else from the run."""
        onnx = self.onnx
        keep = self.between(probes, outputs)
        made = {o for n in keep for o in n.output}
        ext = {i for n in keep for i in n.input if i and i not in made}
        feeds = {name: (probes[name] if name in probes else self.value(name)) for name in ext}
        vinfo = [
            onnx.helper.make_tensor_value_info(
                k, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v)
            )
            for k, v in feeds.items()
        ]
        graph = onnx.helper.make_graph(
            keep, "probe", vinfo, [onnx.helper.make_empty_tensor_value_info(o) for o in outputs]
        )
        sub = onnx.helper.make_model(
            graph, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version
        )
        return list(reference_evaluator(sub).run(outputs, feeds))

    # ------------------------------------------------------------------ structure
    def data_inputs(self, node: Any) -> list[str]:
        """The non-constant inputs of ``node`` (a reshape-like op: its first input only)."""
        if node.op_type in (*_SHAPE_OPS, "Transpose", "Expand"):
            return [i for i in node.input[:1] if i not in self.const]
        if node.op_type in ("Shape", "Size"):
            return []
        return [i for i in node.input if i not in self.const]

    def root(self, name: str) -> str:
        """``name`` with reshapes, casts, identities and dropouts walked back through."""
        for _ in range(_MAX_WALK):
            node = self.producer.get(name)
            if node is None or node.op_type not in _SHAPE_OPS:
                return name
            data = self.data_inputs(node)
            if len(data) != 1:
                return name
            name = data[0]
        return name

    def forward_one(self, name: str, stop: Iterable[str], where: str) -> tuple[Any, str]:
        """Follow the single data consumer through shape ops to a node of type in ``stop``."""
        allowed = (*_SHAPE_OPS, "Transpose", "Concat")
        for _ in range(_MAX_WALK):
            cons = [c for c in self.consumers.get(name, []) if c.op_type not in ("Shape", "Size")]
            guarded = self.nan_guard(name, cons)
            if guarded is not None:
                name = guarded
                continue
            if len(cons) != 1:
                ops = ", ".join(c.op_type for c in cons) or "nothing"
                raise self.fail(f"unsupported op pattern {where}: {name!r} feeds {ops}")
            node = cons[0]
            if node.op_type in stop:
                return node, name
            if node.op_type not in allowed or self.data_inputs(node) != [name]:
                raise self.fail(f"unsupported op pattern {where}: {node.op_type} ({node.name!r})")
            name = node.output[0]
        raise self.fail(f"unsupported op pattern {where}: the path is longer than {_MAX_WALK}")

    def nan_guard(self, name: str, cons: list[Any]) -> str | None:
        """The output of ``Where(IsNaN(name), 0, name)`` if ``cons`` are exactly that (an
        identity on finite values: an SDPA export's guard after a masked softmax), else
        ``None``."""
        if sorted(c.op_type for c in cons) != ["IsNaN", "Where"]:
            return None
        isnan, where = sorted(cons, key=lambda c: str(c.op_type))
        zero = where.input[1]
        if (
            list(where.input) != [isnan.output[0], zero, name]
            or zero not in self.const
            or self.scalar(zero) != 0.0
            or len(self.consumers.get(isnan.output[0], [])) != 1
        ):
            return None
        return str(where.output[0])

    def projection(self, node: Any) -> _Projection | None:
        """``node`` as a projection ``x Wᵀ + b`` with a constant 2-D weight, else ``None``."""
        if node.op_type not in _PROJ or len(node.input) < 2 or node.input[1] not in self.const:
            return None
        if node.input[0] in self.const:
            return None
        w = np.asarray(self.value(node.input[1]), dtype=float)
        if w.ndim != 2:
            return None
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        bias = None
        out = node.output[0]
        if node.op_type == "Gemm":
            if attrs.get("transA", 0):
                return None
            w = (w if attrs.get("transB", 0) else w.T) * float(attrs.get("alpha", 1.0))
            if len(node.input) > 2 and node.input[2]:
                c = np.asarray(self.value(node.input[2]), dtype=float) * float(
                    attrs.get("beta", 1.0)
                )
                bias = np.broadcast_to(c.reshape(-1), (w.shape[0],)).copy()
        else:
            w = w.T
            for c in self.consumers.get(out, []):
                other = [i for i in c.input if i != out]
                if c.op_type == "Add" and len(other) == 1 and other[0] in self.const:
                    b = np.asarray(self.value(other[0]), dtype=float)
                    if b.size == w.shape[0]:
                        bias, out = b.reshape(-1), c.output[0]
                        break
        return _Projection(node, w, bias, node.input[0], out)

    def nearest_projection(self, name: str, where: str) -> _Projection:
        queue, seen = [name], set()
        for _ in range(_MAX_WALK * 4):
            if not queue:
                break
            t = queue.pop(0)
            node = self.producer.get(t)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            proj = self.projection(node)
            if proj is not None:
                return proj
            queue.extend(self.data_inputs(node))
        raise self.fail(
            "unsupported op pattern: no projection (MatMul/Gemm with a constant weight) "
            f"feeds {where}"
        )

    def layernorm(self, name: str) -> tuple[LayerNormWeights, str] | None:
        """``(weights, input)`` if ``name`` is (a reshape of) a LayerNormalization's output."""
        node = self.producer.get(self.root(name))
        if node is None or node.op_type != "LayerNormalization":
            return None
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        x = np.asarray(self.value(node.input[0]))
        if int(attrs.get("axis", -1)) not in (-1, x.ndim - 1):
            raise self.fail(f"LayerNormalization {node.name!r}: expected the last axis")
        gamma = np.asarray(self.value(node.input[1]), dtype=float).reshape(-1)
        beta = None
        if len(node.input) > 2 and node.input[2]:
            beta = np.asarray(self.value(node.input[2]), dtype=float).reshape(-1)
        eps = float(attrs.get("epsilon", 1e-5))
        return LayerNormWeights(gamma, beta, eps), node.input[0]


def _token0(out: Any, axis: int) -> FloatArray:
    """The ``(heads, d_head)`` entries of token 0 of a heads tensor (batch 0)."""
    a = np.moveaxis(np.asarray(out, dtype=float), axis, -1)[..., 0]
    if a.ndim >= 3:
        a = a.reshape(-1, *a.shape[-2:])[0]
    if a.ndim != 2:
        raise ValueError(f"a heads tensor of shape {np.shape(out)}")
    return a


def _least_precision(g: _Graph, src: str, target: str) -> float:
    """The machine epsilon of the least precise floating tensor between ``src`` and ``target``
    (a float64 export may round to float32 on the way: ModernBERT's rotary step does)."""
    eps = [float(np.finfo(np.asarray(g.value(src)).dtype).eps)]
    for n in g.between([src], [target]):
        for o in n.output:
            v = g.values.get(o)
            if v is not None and np.issubdtype(np.asarray(v).dtype, np.floating):
                eps.append(float(np.finfo(np.asarray(v).dtype).eps))
    return max(eps)


def _layout(g: _Graph, src: str, target: str, axis: int, where: str) -> tuple[np.ndarray, float]:
    """Which column of ``src`` lands at each (head, entry) of ``target``, and the scale."""
    p = np.asarray(g.value(src))
    width = p.shape[-1]
    code = np.broadcast_to(np.arange(1, width + 1, dtype=p.dtype), p.shape).copy()
    rng = np.random.default_rng(0)
    rand = rng.standard_normal(p.shape).astype(p.dtype)
    try:
        outs = [g.evaluate({src: probe}, [target])[0] for probe in (code, np.ones_like(p), rand)]
        c_code, c_one, c_rand = (_token0(o, axis) for o in outs)
    except Exception as exc:  # the evaluator or an unexpected shape: the path is not a layout
        line = " ".join(str(exc).split())[:200]
        raise g.fail(f"unsupported op pattern on the path to {where} ({line})") from None
    scale = float(c_one.reshape(-1)[0])
    tol = 100 * _least_precision(g, src, target)
    if scale == 0 or not np.allclose(c_one, scale, rtol=tol, atol=0):
        raise g.fail(f"unsupported op pattern: the path to {where} is not a scalar multiple")
    idx = c_code / scale - 1
    cols = np.rint(idx).astype(int)
    row0 = rand.reshape(-1, width)[0]
    if (
        np.max(np.abs(idx - cols)) > 1e-3
        or cols.min() < 0
        or cols.max() >= width
        or len(np.unique(cols)) != cols.size
        or not np.allclose(c_rand, scale * row0[cols], rtol=tol, atol=tol * np.abs(row0).max())
    ):
        raise g.fail(
            f"unsupported op pattern: the path to {where} is not a selection of the projection's "
            "columns (reshape/transpose/split) times a scalar"
        )
    return cols, scale


def _scores(g: _Graph, softmax: Any) -> tuple[Any, float]:
    """The ``MatMul`` of queries and keys behind ``softmax``, and the scalar scale on the way."""
    name, scale = softmax.input[0], 1.0
    for _ in range(_MAX_WALK):
        node = g.producer.get(name)
        if node is None:
            break
        data = g.data_inputs(node)
        if node.op_type == "MatMul" and len(data) == 2:
            return node, scale
        if node.op_type not in _MASK_OPS:
            raise g.fail(
                f"unsupported op pattern between the attention scores and Softmax "
                f"{softmax.name!r}: {node.op_type} ({node.name!r})"
            )
        path = [i for i in data if _reaches_scores(g, i)]
        if len(path) != 1:
            found = sorted({g.producer[i].op_type for i in data if i in g.producer})
            raise g.fail(
                f"unsupported op pattern: no MatMul of queries and keys feeds Softmax "
                f"{softmax.name!r} (its scores come from {', '.join(found) or 'a graph input'} "
                f"through {node.op_type})"
            )
        if node.op_type in ("Mul", "Div"):
            other = node.input[1] if node.input[0] == path[0] else node.input[0]
            s = g.scalar(other)
            if s is None or (node.op_type == "Div" and node.input[1] == path[0]):
                raise g.fail(
                    f"unsupported op pattern: the scores of Softmax {softmax.name!r} "
                    f"are scaled by a non-scalar ({node.op_type} {node.name!r})"
                )
            scale = scale * s if node.op_type == "Mul" else scale / s
        elif node.op_type == "Sub" and node.input[1] == path[0]:
            raise g.fail(f"unsupported op pattern: negated scores before Softmax {softmax.name!r}")
        name = path[0]
    raise g.fail(
        f"unsupported op pattern: no MatMul of queries and keys feeds Softmax {softmax.name!r}"
    )


def _reaches_scores(g: _Graph, name: str, depth: int = 12) -> bool:
    node = g.producer.get(name)
    if node is None or depth == 0:
        return False
    data = g.data_inputs(node)
    if node.op_type == "MatMul" and len(data) == 2:
        return True
    return node.op_type in _MASK_OPS and any(_reaches_scores(g, i, depth - 1) for i in data)


def _positional(g: _Graph, src: str, target: str) -> bool:
    """Whether the path ``src → target`` multiplies by a non-scalar activation (a rotation)."""
    nodes = g.between([src], [target])
    made = {src} | {o for n in nodes for o in n.output}
    return any(
        g.scalar(i) is None
        for n in nodes
        if n.op_type == "Mul"
        for i in n.input
        if i not in made and i not in g.const
    )


def _pick(p: _Projection, cols: np.ndarray, factor: float) -> tuple[FloatArray, FloatArray | None]:
    rows = cols.reshape(-1)
    return p.weight[rows] * factor, None if p.bias is None else p.bias[rows] * factor


def _block(g: _Graph, softmax: Any) -> _Block:
    attrs = {a.name: g.onnx.helper.get_attribute_value(a) for a in softmax.attribute}
    rank = np.ndim(g.value(softmax.input[0]))
    if attrs.get("axis", -1) not in (-1, rank - 1):
        raise g.fail(f"Softmax {softmax.name!r} normalizes axis {attrs['axis']}, expected the last")
    where = f"Softmax {softmax.name!r}"
    scores, s_chain = _scores(g, softmax)
    ctx_node, fed = g.forward_one(softmax.output[0], ("MatMul",), f"after {where}")
    if ctx_node.input[0] != fed:
        raise g.fail(f"unsupported op pattern: {where} is not the left factor of its MatMul")
    targets = (scores.input[0], scores.input[1], ctx_node.input[1])
    names = ("queries", "keys", "values")
    projs = [g.nearest_projection(t, f"the {w} of {where}") for t, w in zip(targets, names)]
    reads = {g.root(p.input) for p in projs}
    if len(reads) != 1:
        raise g.fail(
            f"unsupported op pattern: the queries, keys and values of {where} read different "
            f"tensors ({sorted(reads)})"
        )
    lays = [
        _layout(g, p.output, t, ax, f"the {w} of {where}")
        for p, t, ax, w in zip(projs, targets, (-2, -1, -2), names)
    ]
    shapes = [c.shape for c, _ in lays]
    if len(set(shapes)) != 1:
        heads = ", ".join(f"{w} {s[0]} heads of width {s[1]}" for w, s in zip(names, shapes))
        raise g.fail(
            f"mismatched head counts at {where}: {heads} (expected the same heads for all "
            "three; grouped or multi-query attention is not read)"
        )
    n_heads, dh = shapes[0]
    (cq, sq), (ck, sk), (cv, sv) = lays
    logit = s_chain * sq * sk
    sign = 1.0 if logit > 0 else -1.0  # a negative scale is folded into W_Q, b_Q
    wq, bq = _pick(projs[0], cq, sign)
    wk, bk = _pick(projs[1], ck, 1.0)
    wv, bv = _pick(projs[2], cv, sv)
    o_node, m_in = g.forward_one(ctx_node.output[0], _PROJ, f"after the context of {where}")
    out = g.projection(o_node)
    if out is None or o_node.input[0] != m_in:
        raise g.fail(
            f"unsupported op pattern: no constant-weight projection reads the context of {where}"
        )
    cols, c_o = _context_layout(g, ctx_node.output[0], m_in, n_heads, dh, where)
    wo = np.empty_like(out.weight)
    wo[:, cols] = out.weight * c_o  # column j of the projection reads head entry cols[j]
    if logit == 0 or not np.isfinite(logit):
        raise g.fail(f"{where}: the logit scale {logit:g} is not a finite non-zero number")
    att = AttentionWeights(
        wq, wk, wv, wo, b_Q=bq, b_K=bk, b_V=bv, b_O=out.bias, n_heads=n_heads, scale=abs(logit)
    )
    pos = any(_positional(g, p.output, t) for p, t in zip(projs[:2], targets[:2]))
    return _Block(att, projs[0].input, out.output, pos)


def _context_layout(
    g: _Graph, ctx: str, m_in: str, n_heads: int, dh: int, where: str
) -> tuple[np.ndarray, float]:
    """For each input column of the output projection, the (head, entry) index it carries."""
    value = np.asarray(g.value(ctx))
    shape = value.shape
    code = np.arange(n_heads)[:, None] * dh + np.arange(dh)[None, :] + 1.0
    try:
        if len(shape) >= 4:  # (batch, heads, tokens, d_head)
            probe = np.broadcast_to(code[:, None, :], shape)
        else:  # (batch·heads, tokens, d_head), batch 1
            probe = np.broadcast_to(code.reshape(n_heads, 1, dh), shape)
        outs = [
            g.evaluate({ctx: p.astype(value.dtype)}, [m_in])[0] for p in (probe, np.ones(shape))
        ]
    except Exception as exc:  # the evaluator or a shape that is not (heads, tokens, d_head)
        line = " ".join(str(exc).split())[:200]
        raise g.fail(f"unsupported op pattern after the context of {where} ({line})") from None
    inner = n_heads * dh
    row = np.asarray(outs[0], dtype=float).reshape(-1, inner)[0]
    ones = np.asarray(outs[1], dtype=float).reshape(-1, inner)[0]
    c = float(ones[0])
    cols = np.rint(row / c - 1).astype(int) if c != 0 else np.zeros(inner, dtype=int)
    if c == 0 or not np.allclose(ones, c) or sorted(cols.tolist()) != list(range(inner)):
        raise g.fail(
            f"unsupported op pattern: the context of {where} does not reach its output "
            "projection as a merge of the heads"
        )
    return cols, c


_CANDIDATES = [
    (a, gated, first)
    for a in ACTIVATIONS
    for gated, first in ((False, True), (True, True), (True, False))
]


def _activation(g: _Graph, p1: str, m2: str, where: str) -> tuple[str, bool, bool]:
    """The feed-forward's activation between ``p1`` and ``m2`` by evaluation (and gating)."""
    z = np.asarray(g.value(p1))
    rng = np.random.default_rng(1)
    probe = (2.0 * rng.standard_normal(z.shape)).astype(z.dtype)
    try:
        out = np.asarray(g.evaluate({p1: probe}, [m2])[0], dtype=float)
    except Exception as exc:  # the evaluator refuses: not an activation path
        raise g.fail(f"unsupported op pattern in the feed-forward {where} ({exc})") from None
    zz = probe.astype(float).reshape(-1, z.shape[-1])
    out = out.reshape(zz.shape[0], -1)
    k = out.shape[1]
    best: tuple[float, str, bool, bool] | None = None
    for act, gated, first in _CANDIDATES:
        if (2 * k if gated else k) != zz.shape[1]:
            continue
        if gated:
            a, gate = (zz[:, :k], zz[:, k:]) if first else (zz[:, k:], zz[:, :k])
            pred = activation(act, a) * gate
        else:
            pred = activation(act, zz)
        err = float(np.max(np.abs(pred - out)))
        if best is None or err < best[0]:
            best = (err, act, gated, first)
    # 1e-5: exports write constants (sqrt 2, 0.044715) in float32 even for float64 models
    tol = 1e-5 * max(1.0, float(np.max(np.abs(out))))
    if best is None or best[0] > tol:
        raise g.fail(
            f"unsupported op pattern: the feed-forward {where} is none of the activations "
            f"{ACTIVATIONS} (plain or gated)"
        )
    return best[1], best[2], best[3]


def _first_projection(g: _Graph, start: str, where: str) -> _Projection:
    """The one constant-weight projection reading ``start`` (through reshapes)."""
    found, queue = [], [start]
    for _ in range(_MAX_WALK):
        if not queue:
            break
        t = queue.pop(0)
        for c in g.consumers.get(t, []):
            proj = g.projection(c)
            if proj is not None and c.input[0] == t:
                found.append(proj)
            elif c.op_type in _SHAPE_OPS and c.input[0] == t:
                queue.append(c.output[0])
    if len(found) != 1:
        raise g.fail(
            f"unsupported op pattern: expected one feed-forward projection reading {where}, "
            f"found {len(found)}"
        )
    return found[0]


def _ffn(g: _Graph, start: str, where: str) -> tuple[FeedForwardWeights, str]:
    """The feed-forward reading ``start``: ``(weights, its output after the bias)``."""
    first = _first_projection(g, start, f"the feed-forward norm {where}")
    down, second = {first.output}, None
    for n in g.nodes:
        if any(i in down for i in n.input):
            proj = g.projection(n)
            if proj is not None:
                second = proj
                break
            down.update(n.output)
    if second is None:
        raise g.fail(
            f"unsupported op pattern: no second projection after {first.node.name!r} ({where})"
        )
    act, gated, input_first = _activation(g, first.output, second.input, where)
    w_in, b_in = first.weight, first.bias
    if gated and not input_first:
        k = w_in.shape[0] // 2
        w_in = np.vstack([w_in[k:], w_in[:k]])
        b_in = None if b_in is None else np.concatenate([b_in[k:], b_in[:k]])
    weights = FeedForwardWeights(
        w_in, second.weight, b_in=b_in, b_out=second.bias, activation=act, gated=gated
    )
    return weights, second.output


def _residual(g: _Graph, name: str, where: str) -> tuple[str, str]:
    """The residual ``Add`` reading ``name``: ``(its output, its other operand's root)``."""
    node, t = g.forward_one(name, ("Add",), where)
    other = [i for i in node.input if i != t]
    if len(other) != 1 or other[0] in g.const:
        raise g.fail(f"unsupported op pattern: no residual Add after {where}")
    return node.output[0], g.root(other[0])


def _norm_after(g: _Graph, name: str) -> tuple[LayerNormWeights, str] | None:
    for c in g.consumers.get(name, []):
        if c.op_type == "LayerNormalization":
            found = g.layernorm(c.output[0])
            if found is not None:
                return found[0], c.output[0]
    return None


def _required_norm(g: _Graph, name: str, missing: str) -> tuple[LayerNormWeights, str]:
    """The LayerNormalization that the layer pattern requires after ``name``.

    :func:`_norm_after`, failing when there is none.

    Parameters
    ----------
    g
        The graph read.
    name
        The tensor (a residual sum) the LayerNormalization must read.
    missing
        Where it was expected, completing the message ``no LayerNormalization …``.

    Returns
    -------
    tuple
        Its weights and its output tensor.

    Raises
    ------
    ModelFileError
        If no LayerNormalization reads ``name``.
    """
    found = _norm_after(g, name)
    if found is None:
        raise g.fail(f"unsupported op pattern: no LayerNormalization {missing}")
    return found


def _layer(g: _Graph, b: _Block, k: int) -> tuple[ExtractedLayer, str, str]:
    """Layer ``k`` around attention block ``b``: the layer, its input and its output tensors."""
    where = f"layer {k}"
    x_att = g.root(b.reads)
    pre = g.layernorm(x_att)
    summed, x_res = _residual(g, b.writes, f"the attention output of {where}")
    if pre is not None and g.root(pre[1]) == x_res:
        attn_norm, layer_in = pre[0], x_res
    elif x_res == x_att:
        attn_norm, layer_in = None, x_att
    else:
        raise g.fail(
            f"unsupported op pattern: the attention residual of {where} adds {x_res!r}, "
            "neither what the attention reads nor the input of its LayerNorm"
        )
    mid = _required_norm(
        g,
        summed,
        f"reads the attention residual of {where} (a LayerNorm decomposed into "
        "ReduceMean/Sub/Pow is not read: export with opset_version >= 17)",
    )
    ffn, f_out = _ffn(g, mid[1], f"of {where}")
    summed2, y_res = _residual(g, f_out, f"the feed-forward output of {where}")
    if y_res == g.root(mid[1]):  # post-LN: the feed-forward's residual adds the normalized sum
        if attn_norm is not None:
            raise g.fail(
                f"unsupported op pattern: {where} normalizes both before its attention "
                "and after its residual"
            )
        last = _required_norm(g, summed2, f"after the feed-forward residual of post-LN {where}")
        lay = ExtractedLayer(b.attention, ffn, mid[0], last[0], "post-LN")
        return lay, layer_in, last[1]
    if y_res == g.root(summed):
        return ExtractedLayer(b.attention, ffn, attn_norm, mid[0], "pre-LN"), layer_in, summed2
    raise g.fail(f"unsupported op pattern: the feed-forward residual of {where} adds {y_res!r}")


@dataclass(frozen=True)
class GraphInput:
    """One input of a graph: its name, numpy dtype and dimensions (``None``: left free)."""

    name: str
    dtype: Any
    dims: tuple[int | None, ...]

    def shown(self) -> str:
        """``name dtype [dims]`` for a message."""
        dims = ", ".join("?" if n is None else str(n) for n in self.dims)
        return f"{self.name!r} {np.dtype(self.dtype).name} [{dims}]"


@dataclass(frozen=True)
class OnnxPlan:
    """What running an ONNX file on data needs, found while reading it (module docstring).

    ``reads[k]`` is the tensor layer ``k``'s query, key and value projections read; ``ids`` the
    input of token ids (``None``: the graph has none) and ``vocab`` the rows of the embedding
    table it gathers from; ``first_input`` the first layer's input (the residual stream its
    attention adds to: ``reads[0]`` itself post-LN, its LayerNorm's input pre-LN); ``stamp``
    the file's ``(mtime_ns, size)`` and ``fingerprint`` a hash of the layers read, which tie
    the plan to the file and to the model it came with.
    """

    path: Path
    stamp: tuple[int, int]
    fingerprint: str
    inputs: tuple[GraphInput, ...]
    reads: tuple[str, ...]
    ids: str | None
    vocab: int
    first_input: str


#: The latest plan of each file read (by resolved path), oldest first.
_PLANS: dict[str, OnnxPlan] = {}


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size


def _fingerprint(layers: Iterable[ExtractedLayer]) -> str:
    """A hash of every weight, shape and setting of ``layers``."""
    h = hashlib.sha256()

    def feed(obj: Any) -> None:
        if isinstance(obj, np.ndarray):
            h.update(repr(obj.shape).encode())
            h.update(np.ascontiguousarray(obj, dtype=float).tobytes())
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                feed(getattr(obj, f.name))
        else:
            h.update(repr(obj).encode())

    for lay in layers:
        feed(lay)
    return h.hexdigest()


def _graph_input(g: _Graph, inp: Any) -> GraphInput:
    tt = inp.type.tensor_type
    dtype = g.onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
    dims = tuple(d.dim_value if d.dim_value > 0 else None for d in tt.shape.dim)
    return GraphInput(inp.name, dtype, dims)


def _gathered_rows(g: _Graph, name: str) -> int:
    """Rows of the largest constant 2-D table that ``name`` (through reshapes, casts) indexes."""
    rows, queue, seen = 0, [name], {name}
    for _ in range(_MAX_WALK):
        if not queue:
            break
        t = queue.pop(0)
        for c in g.consumers.get(t, []):
            if c.op_type == "Gather" and c.input[1] == t and c.input[0] in g.const:
                table = np.shape(g.value(c.input[0]))
                rows = max(rows, table[0] if len(table) == 2 else 0)
            elif c.op_type in _SHAPE_OPS and c.input[0] == t and c.output[0] not in seen:
                seen.add(c.output[0])
                queue.append(c.output[0])
    return rows


def _token_ids(g: _Graph, inputs: Iterable[GraphInput]) -> tuple[str | None, int]:
    """The input of token ids (an integer input that indexes an embedding table; by name, not a
    mask, type or position input) and the table's rows; ``(None, 0)`` when there is none."""
    found = {
        i.name: _gathered_rows(g, i.name)
        for i in inputs
        if np.issubdtype(i.dtype, np.integer) and not any(w in i.name.lower() for w in NOT_IDS)
    }
    found = {k: v for k, v in found.items() if v > 0}
    if not found:
        return None, 0
    name = "input_ids" if "input_ids" in found else max(found, key=lambda k: found[k])
    return name, found[name]


def onnx_plan(em: ExtractedModel) -> OnnxPlan:
    """The plan of the ONNX file ``em`` was read from (``em.source``), read again if the file
    changed since.

    Raises
    ------
    ModelFileError
        If the file cannot be read (any more), or its layers are not ``em``'s.
    """
    path = Path(em.source)
    try:
        stamp = _stamp(path)
    except OSError as exc:
        raise ModelFileError(
            f"{path}: cannot be read ({exc.strerror or exc}); expected the ONNX file "
            f"{em.label} was read from (data run its graph)"
        ) from None
    plan = _PLANS.get(str(path.resolve()))
    if plan is None or plan.stamp != stamp:
        read_onnx(path)
        plan = _PLANS[str(path.resolve())]
    if plan.fingerprint != _fingerprint(em.layers):
        raise ModelFileError(
            f"{path}: its layers are not those of the model {em.label} (the file changed since "
            "it was read?); expected the ONNX file the model was read from: extract it again"
        )
    return plan


def read_onnx(path: Path) -> ExtractedModel:
    """Every layer of the Transformer in the ONNX file ``path`` (module docstring); its
    :class:`OnnxPlan` is kept for :func:`onnx_plan`."""
    try:
        stamp = _stamp(path)
        em, plan = _read(path, stamp)
    except ModelFileError:
        raise
    except GTControlError as exc:  # weights the checks refuse (misshapen, non-finite)
        raise ModelFileError(f"{path}: {exc}") from None
    key = str(path.resolve())
    _PLANS.pop(key, None)
    _PLANS[key] = plan
    while len(_PLANS) > _MAX_PLANS:
        _PLANS.pop(next(iter(_PLANS)))
    return em


def _read(path: Path, stamp: tuple[int, int]) -> tuple[ExtractedModel, OnnxPlan]:
    onnx = require_onnx()
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as exc:  # a protobuf or checker error of any kind: the file is damaged
        line = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ModelFileError(f"{path}: not a readable ONNX model ({line})") from None
    g = _Graph(model, path)
    softmaxes = [n for n in g.nodes if n.op_type == "Softmax"]
    if not softmaxes:
        ops = sorted({n.op_type for n in g.nodes})
        raise g.fail(
            f"no Softmax node: expected a Transformer's attention (found {', '.join(ops[:20])})"
        )
    blocks = [_block(g, s) for s in softmaxes]
    built = [_layer(g, b, k) for k, b in enumerate(blocks)]
    layers = tuple(lay for lay, _, _ in built)
    placements = {lay.norm_placement for lay in layers}
    if len(placements) != 1:
        raise g.fail(f"mixed norm placements {sorted(placements)} across the layers")
    for k in range(len(built) - 1):
        if g.root(built[k][2]) != g.root(built[k + 1][1]):
            raise g.fail(f"unsupported op pattern: layer {k + 1} does not read layer {k}'s output")
    placement = placements.pop()
    final = None
    if placement == "pre-LN":
        after = _norm_after(g, g.root(built[-1][2])) or _norm_after(g, built[-1][2])
        final = None if after is None else after[0]
    notes = [
        "read from the graph at one token, position 0: position embeddings, masks (causal, "
        "padding, local windows) and inputs before the first layer are not interpreted; "
        "whether the model is causal is not known from the graph"
    ]
    if any(b.positional for b in blocks):
        notes.append(
            "queries or keys are multiplied by position-dependent factors (rotary embeddings?): "
            "B_h is read at position 0, where the rotation is the identity"
        )
    image = any(len(i.type.tensor_type.shape.dim) == 4 for i in g.inputs)
    d, h = layers[0].dim, layers[0].weights.n_heads
    dtype = str(np.asarray(g.value(blocks[0].reads)).dtype)
    inputs = tuple(_graph_input(g, i) for i in g.inputs)
    ids, vocab = _token_ids(g, inputs)
    reads = tuple(b.reads for b in blocks)
    plan = OnnxPlan(path, stamp, _fingerprint(layers), inputs, reads, ids, vocab, built[0][1])
    em = ExtractedModel(
        layers,
        family="onnx",
        norm_placement=placement,
        final_norm=final,
        label=path.stem,
        description=f"ONNX graph {path.name} ({len(layers)} layers, d = {d}, {h} heads, "
        f"{placement})",
        source=str(path),
        inputs="image" if image else "text",
        notes=tuple(notes),
        dtype=dtype,
    )
    return em, plan
