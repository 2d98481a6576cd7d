"""The tokens that enter every layer's attention when the real network reads data.

For a ``transformers`` module the module runs (:func:`._forward.data_batch`,
:func:`._forward.attention_inputs`). For an ONNX file the graph itself runs — its embeddings,
LayerNorms and feed-forwards included — and each layer's attention input is captured: the
tensor its query, key and value projections read (:class:`._onnx.OnnxPlan`; a post-LN layer's
input, a pre-LN layer's LayerNorm output).

The data are those of a module: the sentences through the tokenizer saved beside the file
(loadable offline), else 40 sequences of 16 random token ids uniform over the rows of the
embedding table the ids input gathers from; for an image input, 8 smooth random images. The
other inputs are fed as the model expects them: an attention mask (ones on tokens, zeros on
padding), token type ids 0, position ids ``0 … n-1``; any other input is refused. Without an
attention-mask input, sentences of different lengths run in separate batches (no padding). A
graph with fixed dimensions runs in batches of its fixed shape — sequences padded (or cut) to
its fixed length, a short last batch filled with copies of its first row (dropped), random ids
drawn at the fixed length — and the description says so. onnxruntime runs the graph when it is
installed, else onnx's reference evaluator (the one that read the graph).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._linalg import FloatArray
from ..errors import InvalidParametersError
from ..interop._deps import ModelFileError, quiet_transformers, require_onnx
from ..interop._onnx import NOT_IDS, GraphInput, OnnxPlan, onnx_plan, reference_evaluator
from ..interop.extraction import ExtractedModel
from ._forward import (
    attention_inputs,
    data_batch,
    data_rng,
    folder_tokenizer,
    random_ids,
    sentences_what,
    smooth_images,
)

__all__ = ["attention_tokens", "data_refusal"]

#: Sequences per run of a graph whose batch is free (bounds the attention's memory).
_CHUNK = 64
_ROLES = {"mask": "mask", "type": "type", "segment": "type", "position": "position"}


@dataclass(frozen=True)
class _Run:
    feeds: dict[str, Any]
    seq: np.ndarray  # (b,): the sequence each row holds, -1 for a filler row
    real: np.ndarray | None  # (b, n): the tokens that are not padding; None: all


def attention_tokens(
    em: ExtractedModel, sentences: Sequence[str], seed: int
) -> tuple[list[FloatArray], str]:
    """The tokens entering every layer's attention on data, padding left out, and what the
    data were (module docstring): one ``(N, d)`` array per layer, float64.

    Raises
    ------
    ModelFileError
        For an ONNX graph that cannot be fed (no input of token ids, an input that is none of
        ids, mask, token types, positions or an image) or that fails on the batch; the message
        names the file and what was expected.
    """
    if em.family == "onnx":
        return _onnx_tokens(em, sentences, seed)
    batch, mask, what = data_batch(em, list(sentences), seed)
    out = [
        np.asarray(x[mask] if mask is not None else x.reshape(-1, x.shape[-1]))
        for x in attention_inputs(em, batch)
    ]
    return out, what


def data_refusal(em: ExtractedModel) -> str | None:
    """Why data cannot be fed to the real network of ``em`` (the :class:`ModelFileError`'s
    message), or ``None`` when they can."""
    if em.family != "onnx":
        return None if em.network is not None else f"{em.label}: no network to run on data"
    try:
        plan = onnx_plan(em)
        if em.inputs == "image":
            _image_input(plan)
        else:
            _roles(plan)
    except ModelFileError as exc:
        return str(exc)
    return None


def _fail(plan: OnnxPlan, what: str) -> ModelFileError:
    return ModelFileError(f"{plan.path}: {what}")


def _onnx_tokens(
    em: ExtractedModel, sentences: Sequence[str], seed: int
) -> tuple[list[FloatArray], str]:
    per_layer, _, what = onnx_sequences(em, sentences, seed)
    return [np.concatenate(seqs) for seqs in per_layer], what


def onnx_sequences(
    em: ExtractedModel, sentences: Sequence[str], seed: int
) -> tuple[list[list[FloatArray]], list[FloatArray], str]:
    """Per layer, the tokens entering its attention one sequence at a time (padding left out,
    in the order of the sequences) for an ONNX model; the first layer's inputs (the residual
    stream before a pre-LN model's first LayerNorm), the same way; and what the data were."""
    plan = onnx_plan(em)
    rng = data_rng(seed)
    if em.inputs == "image":
        runs, what = _image_runs(plan, rng)
    else:
        runs, what = _text_runs(plan, sentences, rng)
    run = _runner(plan)
    got: list[dict[int, FloatArray]] = [{} for _ in _outputs(plan)]
    for r in runs:
        for k, x in enumerate(run(r.feeds)):
            a = _tokens(plan, k, x, r, em.dim)
            for row, s in enumerate(r.seq):
                if s >= 0:
                    got[k][int(s)] = a[row] if r.real is None else a[row][r.real[row]]
    # in the order of the sequences, whatever the batches (grouped by length, say)
    seqs = [[g[s] for s in sorted(g)] for g in got]
    first = seqs[_outputs(plan).index(plan.first_input)]
    return seqs[: len(plan.reads)], first, what


def _outputs(plan: OnnxPlan) -> list[str]:
    """The tensors a run fetches: every layer's attention input, then the first layer's input
    when it is not one of them (pre-LN)."""
    names = list(plan.reads)
    return names if plan.first_input in names else [*names, plan.first_input]


def _tokens(plan: OnnxPlan, k: int, x: Any, r: _Run, d: int) -> FloatArray:
    """Output ``k`` of a run (:func:`_outputs`) as ``(b, n, d)``, float64."""
    a = np.asarray(x, dtype=float)
    b = r.seq.shape[0]
    if a.ndim == 2 and a.shape[0] % b == 0:  # a Gemm reads (batch·tokens, d): GPT-2's Conv1D
        a = a.reshape(b, -1, a.shape[-1])
    n = r.real.shape[1] if r.real is not None else (a.shape[1] if a.ndim == 3 else -1)
    what = (
        f"layer {k}'s attention reads {plan.reads[k]!r}"
        if k < len(plan.reads)
        else f"the first layer's input is {plan.first_input!r}"
    )
    if a.shape != (b, n, d):
        raise _fail(
            plan,
            f"{what} of shape {np.shape(x)} on a batch "
            f"of {b} sequences ({n if n >= 0 else '?'} tokens); expected (batch, tokens, {d}) "
            f"or (batch·tokens, {d})",
        )
    if not np.all(np.isfinite(a)):
        raise _fail(plan, f"{what}: non-finite numbers on the data batch")
    return a


def _roles(plan: OnnxPlan) -> dict[str, str]:
    """What each input of a text graph is fed as: ids, mask, type or position."""
    if plan.ids is None:
        found = "; ".join(i.shown() for i in plan.inputs) or "none"
        raise _fail(
            plan,
            f"no input of token ids (an integer input that indexes an embedding table; the "
            f"graph's inputs: {found}): data are fed as token ids, so expected a graph that "
            "takes input_ids",
        )
    roles = {}
    for i in plan.inputs:
        low = i.name.lower()
        role = (
            "ids" if i.name == plan.ids else next((r for w, r in _ROLES.items() if w in low), None)
        )
        if role is None or (role != "mask" and not np.issubdtype(i.dtype, np.integer)):
            raise _fail(
                plan,
                f"input {i.shown()} cannot be fed: expected the token ids {plan.ids!r}, an "
                f"attention mask, token type ids or position ids (names with {NOT_IDS})",
            )
        if len(i.dims) != 2:
            raise _fail(plan, f"input {i.shown()}: expected (batch, tokens)")
        roles[i.name] = role
    return roles


def _sequences(
    plan: OnnxPlan, sentences: Sequence[str], rng: np.random.Generator, length: int | None
) -> tuple[list[list[int]], int, str]:
    """The token ids of every sequence, the padding id and what the data are."""
    tok = folder_tokenizer(plan.path.parent)
    if tok is None:
        ids, what = random_ids(rng, plan.vocab, 16 if length is None else length)
        return ids.tolist(), 0, what
    if not sentences:
        raise InvalidParametersError("sentences: expected at least one text, got none")
    with quiet_transformers():
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        seqs = [[int(t) for t in q] for q in tok(list(sentences))["input_ids"]]
    top = max((max(q) for q in seqs if q), default=0)
    if top >= plan.vocab:
        raise _fail(
            plan,
            f"the tokenizer beside it gives token id {top}, but the embedding table of "
            f"{plan.ids!r} has {plan.vocab} rows; expected the model's own tokenizer",
        )
    pad = tok.pad_token_id
    return seqs, 0 if pad is None else int(pad), sentences_what(len(sentences))


def _groups(
    seqs: list[list[int]], pad: int, length: int | None, padded: bool
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(sequence indices, ids, real)``: all sequences at one length (``length``, else the
    longest when ``padded``), or, without padding, one group per length."""
    if length is None and not padded:
        out = []
        for n in sorted({len(q) for q in seqs}):
            idx = np.array([s for s, q in enumerate(seqs) if len(q) == n])
            ids = np.array([seqs[s] for s in idx], dtype=np.int64).reshape(len(idx), n)
            out.append((idx, ids, np.ones(ids.shape, bool)))
        return out
    n = length if length is not None else max(len(q) for q in seqs)
    ids = np.full((len(seqs), n), pad, dtype=np.int64)
    real = np.zeros((len(seqs), n), dtype=bool)
    for row, q in enumerate(seqs):
        ids[row, : min(len(q), n)] = q[:n]
        real[row, : min(len(q), n)] = True
    return [(np.arange(len(seqs)), ids, real)]


def _batches(m: int, batch: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(rows, kept)`` of each run over ``m`` rows: at most ``batch`` (else :data:`_CHUNK`)
    rows; a fixed batch is filled up with copies of its first row, not kept."""
    size = batch or _CHUNK
    out = []
    for start in range(0, m, size):
        rows = np.arange(start, min(start + size, m))
        fill = 0 if batch is None else batch - rows.shape[0]
        kept = np.arange(rows.shape[0] + fill) < rows.shape[0]
        out.append((np.concatenate([rows, np.full(fill, start)]), kept))
    return out


def _text_runs(
    plan: OnnxPlan, sentences: Sequence[str], rng: np.random.Generator
) -> tuple[list[_Run], str]:
    roles = _roles(plan)
    ids_in = next(i for i in plan.inputs if i.name == plan.ids)
    batch, length = ids_in.dims
    masked = "mask" in roles.values()
    seqs, pad, what = _sequences(plan, sentences, rng, length)
    runs = []
    for idx, ids, real in _groups(seqs, pad, length, masked):
        for rows, kept in _batches(idx.shape[0], batch):
            feeds = _feeds(plan, roles, ids[rows], real[rows])
            runs.append(_Run(feeds, np.where(kept, idx[rows], -1), real[rows]))
    return runs, what + _fixed_note(batch, length, seqs, masked)


def _fixed_note(batch: int | None, length: int | None, seqs: list[list[int]], masked: bool) -> str:
    """What a graph's fixed batch or length did to the data, for the description."""
    if batch is None and length is None:
        return ""
    parts = []
    if batch is not None:
        parts.append("one sequence at a time" if batch == 1 else f"{batch} sequences at a time")
    short = sum(len(q) < length for q in seqs) if length is not None else 0
    cut = sum(len(q) > length for q in seqs) if length is not None else 0
    if short:
        parts.append(f"padded to its {length} tokens")
        if not masked:
            parts.append("which it attends to (it has no attention-mask input)")
    if cut:
        parts.append(f"{cut} of {len(seqs)} cut to its {length} tokens")
    shape = " × ".join("?" if n is None else str(n) for n in (batch, length))
    done = f": {', '.join(parts)}" if parts else ""
    return f"; the graph has a fixed shape (batch × tokens {shape}){done}"


def _feeds(
    plan: OnnxPlan, roles: dict[str, str], ids: np.ndarray, real: np.ndarray
) -> dict[str, Any]:
    b, n = ids.shape
    values = {
        "ids": ids,
        "mask": real,
        "type": np.zeros((b, n), dtype=np.int64),
        "position": np.broadcast_to(np.arange(n), (b, n)),
    }
    return {
        i.name: np.ascontiguousarray(values[roles[i.name]]).astype(i.dtype) for i in plan.inputs
    }


def _image_input(plan: OnnxPlan) -> GraphInput:
    images = [i for i in plan.inputs if len(i.dims) == 4]
    others = [i.shown() for i in plan.inputs if len(i.dims) != 4]
    if len(images) != 1 or others:
        found = "; ".join(i.shown() for i in plan.inputs)
        raise _fail(plan, f"inputs {found} cannot be fed: expected one image input")
    inp = images[0]
    _, ch, h, w = inp.dims
    if ch is None or h is None or h != w or not np.issubdtype(inp.dtype, np.floating):
        raise _fail(
            plan,
            f"image input {inp.shown()}: expected floats of fixed channels and a fixed square "
            "size (batch, channels, size, size)",
        )
    return inp


def _image_runs(plan: OnnxPlan, rng: np.random.Generator) -> tuple[list[_Run], str]:
    inp = _image_input(plan)
    batch, ch, size, _ = inp.dims
    img, what = smooth_images(rng, int(ch or 0), int(size or 0))
    runs = [
        _Run({inp.name: img[rows].astype(inp.dtype)}, np.where(kept, rows, -1), None)
        for rows, kept in _batches(img.shape[0], batch)
    ]
    if batch is not None:
        what += f"; the graph has a fixed batch of {batch}: {batch} at a time"
    return runs, what


def _prune(model: Any, names: list[str]) -> None:
    """Make ``names`` the outputs of ``model`` (in place) and drop the nodes they do not need
    (the last layer's feed-forward, say); a graph with subgraphs keeps every node."""
    onnx = require_onnx()
    graph = model.graph
    if not any(a.type == onnx.AttributeProto.GRAPH for n in graph.node for a in n.attribute):
        need, keep = set(names), []
        for node in reversed(graph.node):
            if any(o in need for o in node.output):
                keep.append(node)
                need.update(i for i in node.input if i)
        kept = [onnx.NodeProto() for _ in keep]
        for new, old in zip(kept, reversed(keep), strict=True):
            new.CopyFrom(old)
        del graph.node[:]
        graph.node.extend(kept)
    del graph.output[:]
    graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)


def _ort_session(model: Any) -> Any:
    """An onnxruntime session of ``model``, or ``None`` (not installed, or it refuses)."""
    try:
        ort = importlib.import_module("onnxruntime")
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only: no warnings printed on a valid graph
    try:
        return ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
    except Exception:  # a graph onnxruntime refuses: the reference evaluator that read it runs it
        return None


def _runner(plan: OnnxPlan) -> Callable[[dict[str, Any]], list[Any]]:
    """A function of the feeds giving every layer's attention input (``plan.reads``) and the
    first layer's input (:func:`_outputs`)."""
    onnx = require_onnx()
    try:
        model = onnx.load(str(plan.path))
    except Exception as exc:  # a protobuf error of any kind: the file changed or is damaged
        line = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise _fail(plan, f"not a readable ONNX model ({line})") from None
    names = _outputs(plan)
    _prune(model, names)
    session = _ort_session(model)
    # both take (output names, feeds)
    engine = session if session is not None else reference_evaluator(model)

    def run(feeds: dict[str, Any]) -> list[Any]:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")  # masked scores overflow to -inf by design
                return list(engine.run(names, feeds))
        except Exception as exc:  # the runtime raises anything
            line = " ".join(str(exc).split())[:300] or type(exc).__name__
            shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in feeds.items())
            raise _fail(
                plan,
                f"the graph does not run on the data batch ({shapes}; {type(exc).__name__}: "
                f"{line}); expected a graph that runs on token ids of its declared shape",
            ) from None

    return run
