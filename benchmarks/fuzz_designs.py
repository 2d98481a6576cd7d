"""Fuzz the command line with mutated design files and count the outcomes (issue 12).

Mutates the shipped ``designs/*.toml`` (made small first, so one valid run takes about a second)
with the operations of ``tests/_design_mutations.py`` (deleted and added keys, values of wrong
types, ragged matrices, numbers beyond the floating-point range, NaN strings, unicode and
mathtext specials, another task, edits of the TOML text), seeded, and runs each file through
``gtcontrol.cli.main(["run", FILE, "-o", OUT])`` in a pool of worker processes, each case under
a time limit (``signal.alarm`` in the worker, and a hard kill of the worker by the parent).

Outcomes:

``ok``
    exit 0 and a complete output folder (every file listed in ``result.json``, nothing else).
``clean error``
    exit 2, exactly one line ``gtcontrol: error: ...`` on stderr, no output folder.
``raw exception``
    anything else that ended the run: exit 3 (internal error), a traceback, several lines, an
    exception escaping ``main``, a worker that died.
``hang``
    no exit within the time limit.
``partial output``
    a failed run that left an output folder, a successful one whose folder is incomplete, or a
    hidden temporary left beside it.
``parse only``
    a valid ``experiment``, ``model`` or ``sweep`` design, or a ``stabilize`` design of a
    pretrained model's layer (they would load real pretrained models or start a cluster, for
    minutes); only validated.
``overtime``
    a run that ended more than ``max(1 s, 10 %)`` after its top-level ``time_limit`` (plus
    3 s for writing the folder and its figures).
``self-contradicting``
    ``status = "success"`` in ``result.json`` while its own numbers or the requirements it
    was given say otherwise (a design whose certificate is invalid, whose ``min_ess`` or token
    check is not met; a steering whose terminal error exceeds the tolerance).

Besides the mutations of the shipped designs, a share of the files (``--hostile2``, default
one half) come from the generators of the second hostile round (issue 22): ``time_limit`` at
every size (``d`` up to 64; tiny, ordinary, NaN, inf, beyond the TOML integer range), extreme
covariance scales (``10^±100``), rank-deficient steering, design targets with condition numbers
up to ``10¹²`` with ``min_ess`` and token checks.

A share of the files (``--models``, default 0) come from the generator of the tasks that load a
model (:func:`make_model_case`): ``model``, ``stabilize`` with ``model`` and ``experiment``, on
tiny random-init models built once (a BERT and a ViT folder, a ViT as an ONNX file), the
``random-*`` names and MiniLM, with time limits of 0.5, 2 and 5 s and hostile ones (tiny,
unlimited, NaN, negative, zero) and their options drawn (too few tokens, a layer past the last,
the text target of an ONNX file). These are run, not only validated; their overtime is judged
by the run's own clock (``result.json`` ``seconds``: importing torch and loading the model
count) against ``max(1 s, 10 %)`` with no slack for the writing, which the limit covers too.

Usage::

    python benchmarks/fuzz_designs.py            # 2,000 files
    python benchmarks/fuzz_designs.py --quick    # 200 files
    python benchmarks/fuzz_designs.py -n 5000 --seed 3 --workers 4 --timeout 60
    python benchmarks/fuzz_designs.py --show 325 352   # print those cases' design files
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _design_mutations import MUTATIONS, SLOW_TASKS, dumps, make_fast, mutate, shipped_designs  # noqa: E402
from _families import TINY_FILES, save_tiny_models  # noqa: E402

#: Share of the files made by the second-round generators (``--hostile2``; a list, set once).
_SHARE = [0.5]
OUTCOMES = (
    "ok",
    "clean error",
    "raw exception",
    "hang",
    "partial output",
    "parse only",
    "overtime",
    "self-contradicting",
)
#: Seconds a run may take past ``max(1 s, 10 %)`` of its time limit to write its folder.
OUTPUT_SLACK = 3.0
#: Share of the files made by the model-task generator (``--models``; a list, set once).
_MODEL_SHARE = [0.0]
#: First line of a file of the model-task generator: run it although its task loads a model.
MODEL_MARK = "# fuzz: a task that loads a model, run on tiny models"
#: The tiny model files of the model-task generator (filled once by :func:`build_models`).
_MODEL_FILES: dict[str, str] = {}


class Hang(BaseException):
    """The case ran past its time limit (a BaseException: ``main`` does not swallow it)."""


def _spd(rng: random.Random, d: int, condition: float, scale: float) -> list[list[float]]:
    import numpy as np

    g = np.random.default_rng(rng.randrange(2**32))
    q, _ = np.linalg.qr(g.standard_normal((d, d)))
    cov = scale * (q * np.logspace(0, -math.log10(condition), d)) @ q.T
    cov = 0.5 * (cov + cov.T)
    return [[float(x) for x in row] for row in cov]


def _lowrank(rng: random.Random, d: int, r: int, scale: float) -> list[list[float]]:
    import numpy as np

    m = np.random.default_rng(rng.randrange(2**32)).standard_normal((d, r))
    cov = scale * m @ m.T / max(r, 1)
    cov = 0.5 * (cov + cov.T)
    return [[float(x) for x in row] for row in cov]


def _vec(rng: random.Random, d: int, scale: float = 1.0) -> list[float]:
    return [scale * rng.gauss(0.0, 1.0) for _ in range(d)]


#: Top-level time limits of the second-round files: ordinary, tiny, hostile (as TOML values).
_TIME_LIMITS: tuple[Any, ...] = (0.05, 0.3, 1.0, 3.0, 0.5, 2.0, math.nan, math.inf, 1e10, -1.0, 0)


def make_hostile2(index: int, seed: int) -> tuple[str, str]:
    """A design file of the second-round generators: ``(description, TOML text)``."""
    rng = random.Random(seed * 7_000_003 + index)
    kind = rng.choice(["budget", "scale", "rank_steer", "ill_design", "token_check"])
    d = rng.choice([1, 2, 3, 4, 8, 16, 32, 64]) if kind == "budget" else rng.randrange(1, 6)
    limit = rng.choice(_TIME_LIMITS) if kind == "budget" else 10.0
    if kind == "budget" and d > 8 and not (isinstance(limit, float) and 0 < limit < 10):
        limit = 0.5  # no unlimited runs at large d: they would only measure the machine
    scale = 10.0 ** rng.uniform(-100, 100) if kind == "scale" else 10.0 ** rng.uniform(-2, 2)
    task = rng.choice(["simulate", "analyze", "steer", "design", "compare-tokens"])
    if kind in ("rank_steer",):
        task = "steer"
    if kind in ("ill_design", "token_check"):
        task = "design"
    doc: dict[str, Any] = {"task": task, "title": f"hostile2 {kind}", "time_limit": limit}
    if task in ("simulate", "analyze", "compare-tokens"):
        g = random.Random(rng.randrange(2**32))
        doc["initial"] = {"mean": _vec(g, d), "cov": _spd(g, d, 10.0, scale)}
        doc["layer"] = {
            "A": [[g.gauss(0, 1) / math.sqrt(d) for _ in range(d)] for _ in range(d)],
            "B": _spd(g, d, 10.0, 1.0 / scale if kind == "scale" else 1.0),
            "V": -1.0,
        }
        doc["horizon"] = {"T": rng.choice([0.5, 2.0, 20.0])}
        if task == "compare-tokens":
            doc["compare-tokens"] = {"n_tokens": [16, 64], "repeats": 1}
        if task == "simulate":
            doc["simulate"] = {"tokens": 64, "n_points": 21}
    elif task == "steer":
        r0 = rng.randrange(0, d + 1) if kind == "rank_steer" else d
        r1 = r0 if rng.random() < 0.8 else rng.randrange(0, d + 1)
        g = random.Random(rng.randrange(2**32))
        doc["initial"] = {"mean": _vec(g, d), "cov": _lowrank(g, d, r0, scale)}
        doc["target"] = {"mean": _vec(g, d), "cov": _lowrank(g, d, r1, scale)}
        doc["horizon"] = {"T": 1.0, "layers": rng.choice([2, 4, 8])}
        doc["steer"] = {"mode": rng.choice(["full", "ffn", "attention"]), "tokens": 0}
    else:
        condition = 10.0 ** rng.uniform(0, 12) if kind == "ill_design" else 10.0
        g = random.Random(rng.randrange(2**32))
        doc["target"] = {
            "mean": _vec(g, d, 10.0 ** rng.uniform(-2, 6)),
            "cov": _spd(g, d, condition, scale),
        }
        opts: dict[str, Any] = {"n_starts": 2, "robustness": False}
        opts["min_ess"] = rng.choice([0.5, 0.0, 0.9])
        if kind == "token_check" or rng.random() < 0.3:
            opts["token_check"] = rng.choice([16, 64, 256])
        doc["design"] = opts
        if rng.random() < 0.3:
            doc["horizon"] = {"T": rng.choice([1.0, 1e3, 1e9])}
    return f"hostile2:{kind}:{task}:d={d}", dumps(doc)


#: Time limits of the model-task files: the promised ones, then hostile ones (as TOML values).
_MODEL_LIMITS: tuple[Any, ...] = (0.5, 2.0, 5.0, 0.5, 2.0, 5.0, 1e-9, 0.05, math.inf, 1e10)
_MODEL_BAD_LIMITS: tuple[Any, ...] = (math.nan, -1.0, 0)


def build_models(folder: Path) -> dict[str, str]:
    """Build the tiny models of the model-task generator into ``folder`` (in a child process:
    the workers are forked, and a parent that imported torch would hand them its threads)."""
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_build_models, args=(str(folder),))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"building the tiny models failed (exit {proc.exitcode})")
    return {key: str(folder / name) for key, name in TINY_FILES.items()}


def _build_models(folder: str) -> None:
    import transformers as tr

    tr.logging.set_verbosity_error()
    tr.logging.disable_progress_bar()
    save_tiny_models(Path(folder))


def make_model_case(index: int, seed: int) -> tuple[str, str]:
    """A design file of a task that loads a model: ``(description, TOML text)``."""
    rng = random.Random(seed * 11_000_027 + index)
    files = _MODEL_FILES
    task = rng.choice(["model", "model", "stabilize", "stabilize", "experiment"])
    tiny = [files["bert"], files["vit"], files["onnx"]]
    named = ["random-bert", "random-vit", "random-deit", "random-gpt2", "minilm"]
    model = rng.choice(tiny * 3 + named + ["random-modernbert"])
    limit = rng.choice(_MODEL_LIMITS) if rng.random() < 0.9 else rng.choice(_MODEL_BAD_LIMITS)
    unlimited = not (isinstance(limit, float) and 0 < limit < 100)
    if unlimited and (task == "experiment" or model not in tiny):
        limit = 2.0  # no unlimited run on a full-size model: it would only measure the machine
    doc: dict[str, Any] = {"task": task, "title": f"models {task}", "time_limit": limit}
    if rng.random() < 0.5:
        doc["seed"] = rng.randrange(0, 5)
    if task == "model":
        opts: dict[str, Any] = {"model": model, "n_null": rng.choice([8, 16])}
        opts["n_tokens"] = rng.choice([0, 16, 20, 33, 34, 64, 400])
        if opts["n_tokens"] == 0 and model in tiny:
            opts["n_tokens"] = 64  # automatic: max(512, d + 64), slow on a loaded machine
        opts["T"] = rng.choice([0.5, 4.0])
        opts["flows"] = rng.random() < 0.6
    elif task == "stabilize":
        opts = {"model": model, "layer": rng.choice([0, 0, 1, 5])}
        opts["target_from"] = rng.choice(["text", "identity", "identity"])
        opts["add"] = rng.choice(["head", "head", "gains", "auto"])
        if rng.random() < 0.3:
            opts["token_check"] = rng.choice([64, 256])
        opts["before"] = rng.random() < 0.7
    else:
        opts = {"quick": True} if rng.random() < 0.7 else {"flows": True}
    doc[task] = opts
    name = Path(model).name if task != "experiment" else "minilm"
    return f"models:{task}:{name}:{limit!r}", f"{MODEL_MARK}\n{dumps(doc)}"


def _limit_of(text: str) -> float | None:
    """The finite top-level ``time_limit`` of a design text (``None``: none or not finite)."""
    try:
        value = tomllib.loads(text).get("time_limit")
    except tomllib.TOMLDecodeError:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and 0 < value < 1e9 else None


def contradiction(res: dict[str, Any]) -> str:
    """Why a ``status = "success"`` record contradicts itself ('' when it does not)."""
    if res.get("status") != "success":
        return ""
    out = res.get("outputs", {})
    task = res.get("task")
    if task == "design":
        if not out.get("certificate", {}).get("success", True):
            return "design: success without a valid certificate"
        ess = out.get("ess")
        if ess and ess.get("min_ess") is not None and ess.get("status") != "success":
            return f"design: success although min_ess is not met ({ess.get('message')})"
        tc = out.get("token_certificate")
        if tc and not tc.get("success", True):
            return "design: success with a failed token check"
    if task == "steer":
        err = out.get("terminal_error")
        if not (isinstance(err, (int, float)) and err <= 1e-6):
            return f"steer: success with terminal error {err}"
    return ""


def make_case(index: int, seed: int, bases: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """The ``index``-th design file: of the model-task generator (a share), mutated, or (a
    share) of the second-round generators."""
    if random.Random(seed * 5_000_011 + index).random() < _MODEL_SHARE[0]:
        return make_model_case(index, seed)
    if random.Random(seed * 3_000_017 + index).random() < _SHARE[0]:
        return make_hostile2(index, seed)
    rng = random.Random(seed * 1_000_003 + index)
    names = sorted(bases)
    name = names[index % len(names)]
    doc: dict[str, Any] | str = bases[name]
    ops = [rng.choice(MUTATIONS) for _ in range(rng.randrange(1, 4))]
    for op in ops:
        if isinstance(doc, str):
            break
        doc = mutate(doc, rng, op)
        if op == "task" and isinstance(doc, dict):
            doc = make_fast(doc)
    text = doc if isinstance(doc, str) else dumps(doc)
    return f"{name}+{'+'.join(ops)}", text


def _pretrained_stabilize(doc: dict[str, Any]) -> bool:
    """Whether a design stabilizes a layer of a pretrained model: like the ``model`` and
    ``experiment`` tasks it loads that model (torch and its weights, minutes on two cores), so
    it is only validated."""
    opts = doc.get("stabilize")
    return doc.get("task") == "stabilize" and isinstance(opts, dict) and bool(opts.get("model"))


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang()


def run_case(text: str, root: Path, limit: int) -> tuple[str, str]:
    """Run one design file in this process (a file of the model-task generator in a fresh
    ``gtcontrol run`` process); return ``(outcome, detail)``."""
    from gtcontrol import DesignFileError
    from gtcontrol.cli import main
    from gtcontrol.cli.schema import parse_design

    root.mkdir(parents=True)
    design = root / "d.toml"
    design.write_text(text, "utf-8", errors="surrogatepass")
    out = root / "out"
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        parsed = {}
    task = parsed.get("task")
    if text.startswith(MODEL_MARK):  # the family of the tasks that load a model: run
        return _run_fresh(design, out, root, text, limit)
    if task in SLOW_TASKS or _pretrained_stabilize(parsed):
        try:
            parse_design(text)
        except DesignFileError:
            return "clean error", ""
        except Exception as exc:
            return "raw exception", f"parse: {type(exc).__name__}: {exc}"
        return "parse only", ""
    err, std = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(limit)
    clock = time.perf_counter()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            code = main(["run", str(design), "-o", str(out)])
    except Hang:
        return "hang", f"no exit after {limit} s"
    except BaseException as exc:
        return "raw exception", f"escaped main: {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
    wall = time.perf_counter() - clock
    promised = _limit_of(text)
    if promised is not None and wall > promised + max(1.0, 0.1 * promised) + OUTPUT_SLACK:
        return "overtime", f"exit {code} after {wall:.1f} s for time_limit = {promised:g}"
    return _judge(code, err.getvalue(), root, out)


def _run_fresh(design: Path, out: Path, root: Path, text: str, limit: int) -> tuple[str, str]:
    """A file of the model-task generator, run as the command runs: a fresh process (a load
    it gives up on ends with it). Overtime is judged by the run's own clock (``result.json``
    ``seconds``); the wall clock, which adds Python's start, the import of gtcontrol and the
    exit, is reported in the detail of a run that succeeded (``wall=...``, not a warning)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    clock = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gtcontrol", "run", "-q", str(design), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=limit,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return "hang", f"no exit after {limit} s"
    wall = time.perf_counter() - clock
    promised = _limit_of(text)
    own = _own_seconds(out) if proc.returncode == 0 else None
    if promised is not None and own is not None and own > promised + max(1.0, 0.1 * promised):
        summary = json.loads((out / "result.json").read_text("utf-8"))["summary"]
        return "overtime", (
            f"result.json seconds {own:.2f} (wall {wall:.1f}) for time_limit = {promised:g}: "
            f"{summary.get('status')}: {str(summary.get('message'))[:300]}"
        )
    stderr = "\n".join(
        ln for ln in proc.stderr.splitlines() if not ln.startswith("gtcontrol: wrote ")
    )
    outcome, detail = _judge(proc.returncode, stderr, root, out, quiet=True)
    if outcome == "ok" and not detail:
        detail = f"wall={wall:.2f} own={own if own is None else round(own, 2)}"
    return outcome, detail


def _judge(
    code: int, stderr: str, root: Path, out: Path, *, quiet: bool = False
) -> tuple[str, str]:
    """The outcome of a run that ended with exit ``code`` and ``stderr`` (``quiet``: a run
    with ``-q``, whose stderr holds nothing but warning lines when it succeeds)."""
    lines = stderr.splitlines()
    leftovers = sorted(p.name for p in root.iterdir() if p.name not in ("d.toml", "out"))
    if code == 0:
        try:
            res = json.loads((out / "result.json").read_text("utf-8"))
            present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
            complete = sorted(res["files"]) == present
        except (OSError, ValueError, KeyError):
            complete = False
        if not complete or leftovers:
            return "partial output", f"exit 0, complete={complete}, leftovers={leftovers}"
        why = contradiction(res)
        if why:
            return "self-contradicting", why
        warned = [ln for ln in lines if ln.startswith("gtcontrol: warning:")]
        if quiet and len(warned) < len(lines):  # anything else on stderr is raw
            return "raw exception", f"exit 0 with stderr: {stderr.strip()[:300]}"
        return "ok", warned[0] if warned else ""
    if "Traceback" in stderr or code not in (2, 130):
        return "raw exception", f"exit {code}: {stderr.strip()[:300]}"
    if len(lines) != 1 or not lines[0].startswith("gtcontrol: error: "):
        return "raw exception", f"exit {code} with {len(lines)} lines: {stderr.strip()[:300]}"
    if out.exists() or leftovers:
        return "partial output", f"exit {code}, out={out.exists()}, leftovers={leftovers}"
    return "clean error", lines[0][:300]


def _own_seconds(out: Path) -> float | None:
    """The run's own clock: ``seconds`` of its ``result.json`` (``None`` when unreadable)."""
    try:
        value = json.loads((out / "result.json").read_text("utf-8"))["seconds"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def _worker(conn: Connection, workdir: str, limit: int) -> None:
    from threadpoolctl import threadpool_limits

    import gtcontrol.cli  # noqa: F401 - import once per worker

    # one BLAS thread per worker (as dask's workers): several workers with a thread per core
    # each oversubscribe the cores, and the time limits measure the contention
    threadpool_limits(1)

    while True:
        job = conn.recv()
        if job is None:
            return
        index, text = job
        root = Path(workdir) / f"case{index}"
        try:
            outcome, detail = run_case(text, root, limit)
        except BaseException as exc:
            outcome, detail = "raw exception", f"harness: {type(exc).__name__}: {exc}"
        shutil.rmtree(root, ignore_errors=True)
        conn.send((index, outcome, detail))


class _Logged(list[tuple[int, str, str]]):
    """The results, each also appended to ``log`` (JSON lines, flushed) as it arrives, so that
    a run killed part-way keeps what it measured."""

    def __init__(self, log: Path | None, cases: list[tuple[str, str]]) -> None:
        super().__init__()
        self.cases = cases
        self.fh = None if log is None else log.open("a", encoding="utf-8")

    def append(self, item: tuple[int, str, str]) -> None:
        super().append(item)
        if self.fh is not None:
            index, outcome, detail = item
            row = {"case": index, "mutation": self.cases[index][0], "outcome": outcome}
            self.fh.write(json.dumps({**row, "detail": detail}) + "\n")
            self.fh.flush()


class _Pool:
    """Worker processes, each running one case at a time; a stuck worker is killed."""

    def __init__(self, n: int, workdir: str, limit: int) -> None:
        self.ctx = mp.get_context("fork")
        self.workdir, self.limit = workdir, limit
        self.workers: list[dict[str, Any]] = [self._start() for _ in range(n)]

    def _start(self) -> dict[str, Any]:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.workdir, self.limit))
        proc.daemon = True
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "job": None, "since": 0.0}

    def run(
        self,
        cases: list[tuple[str, str]],
        progress: bool,
        log: Path | None = None,
        start: int = 0,
        only: list[int] | None = None,
    ) -> list[tuple[int, str, str]]:
        results = _Logged(log, cases)
        todo = list(enumerate(cases))[start:][::-1]
        if only is not None:
            wanted = set(only)
            todo = [(i, case) for i, case in todo if i in wanted]
        hard = self.limit + 30  # the alarm fires first unless C code does not return
        while todo or any(w["job"] is not None for w in self.workers):
            for w in self.workers:
                if w["job"] is None and todo:
                    index, (_, text) = todo.pop()
                    w["conn"].send((index, text))
                    w["job"], w["since"] = index, time.monotonic()
            busy = [w["conn"] for w in self.workers if w["job"] is not None]
            for conn in wait(busy, timeout=1.0):
                w = next(x for x in self.workers if x["conn"] is conn)
                try:
                    results.append(conn.recv())
                except EOFError:
                    results.append((w["job"], "raw exception", "worker died"))
                    self._replace(w)
                    continue
                w["job"] = None
            now = time.monotonic()
            for w in self.workers:
                if w["job"] is not None and now - w["since"] > hard:
                    results.append((w["job"], "hang", f"killed after {hard} s"))
                    self._replace(w)
            if progress and len(results) % 100 == 0 and results:
                print(f"  {len(results)}/{len(cases)}", file=sys.stderr, flush=True)
        for w in self.workers:
            w["conn"].send(None)
            w["proc"].join(timeout=10)
        return results

    def _replace(self, w: dict[str, Any]) -> None:
        w["proc"].kill()
        w["proc"].join()
        w.update(self._start())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=2000, help="number of design files (default 2000)")
    p.add_argument("--quick", action="store_true", help="200 files, 30 s per case")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--start",
        type=int,
        default=0,
        help="first case index (a run split in parts: cases START .. N-1, same files)",
    )
    p.add_argument("--workers", type=int, default=max(1, min(4, (os.cpu_count() or 2))))
    p.add_argument("--timeout", type=int, default=60, help="seconds per case (default 60)")
    p.add_argument("--json", type=Path, default=None, help="write every case's outcome here")
    p.add_argument("--progress", action="store_true")
    p.add_argument(
        "--log", type=Path, default=None, help="append every outcome here as it arrives (JSONL)"
    )
    p.add_argument(
        "--hostile2",
        type=float,
        default=_SHARE[0],
        help="share of files from the second-round generators (default 0.5)",
    )
    p.add_argument(
        "--models",
        type=float,
        default=_MODEL_SHARE[0],
        help="share of files from the generator of the tasks that load a model (default 0; "
        "1: only those)",
    )
    p.add_argument(
        "--cases",
        type=int,
        nargs="+",
        metavar="INDEX",
        help="run only these case indices (with --seed), e.g. to re-run a report's defects",
    )
    p.add_argument(
        "--show",
        type=int,
        nargs="+",
        metavar="INDEX",
        help="print the design files of these case indices (with --seed) and exit",
    )
    args = p.parse_args(argv)
    n, limit = (200, 30) if args.quick else (args.n, args.timeout)
    _SHARE[0] = args.hostile2
    _MODEL_SHARE[0] = args.models
    bases = {name: make_fast(doc) for name, doc in shipped_designs().items()}
    with tempfile.TemporaryDirectory(prefix="gtcontrol-fuzz-") as workdir:
        if args.models > 0:
            _MODEL_FILES.update(build_models(Path(workdir) / "models"))
        else:
            _MODEL_FILES.update(TINY_FILES)  # never run
        return _fuzz(args, n, limit, bases, workdir)


def _fuzz(
    args: argparse.Namespace, n: int, limit: int, bases: dict[str, dict[str, Any]], workdir: str
) -> int:
    """Make the cases, run them (or show them) and print the counts."""
    if args.show:
        for index in args.show:
            desc, text = make_case(index, args.seed, bases)
            print(f"# case {index} (seed {args.seed}): {desc}\n{text}")
        return 0
    cases = [make_case(i, args.seed, bases) for i in range(n)]
    clock = time.perf_counter()
    pool = _Pool(args.workers, workdir, limit)
    results = pool.run(cases, args.progress, args.log, start=args.start, only=args.cases)
    seconds = time.perf_counter() - clock
    counts = Counter(outcome for _, outcome, _ in results)
    print(
        f"{len(results)} mutated design files (cases {args.start}-{n - 1}, seed {args.seed}), "
        f"{args.workers} workers, "
        f"{limit} s per case: {seconds:.1f} s"
    )
    for outcome in OUTCOMES:
        print(f"  {outcome:15s} {counts.get(outcome, 0)}")
    warned = sum(1 for _, o, d in results if o == "ok" and d.startswith("gtcontrol: warning:"))
    print(f"  (ok runs that printed a warning line: {warned})")
    _print_model_clocks(results, cases)
    defects = ("raw exception", "hang", "partial output", "overtime", "self-contradicting")
    bad = [r for r in sorted(results) if r[1] in defects]
    for index, outcome, detail in bad[:20]:
        print(f"  case {index} [{cases[index][0]}] {outcome}: {detail}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {"case": i, "mutation": cases[i][0], "outcome": o, "detail": d}
                    for i, o, d in sorted(results)
                ],
                indent=1,
            )
        )
    return 1 if bad else 0


def _print_model_clocks(results: list[tuple[int, str, str]], cases: list[tuple[str, str]]) -> None:
    """The largest run's own clock past its limit and the largest wall clock of the fresh
    processes of the model-task generator, by time limit."""
    worst: dict[float, tuple[float, float]] = {}
    for index, outcome, detail in results:
        if outcome != "ok" or not detail.startswith("wall=") or "None" in detail:
            continue
        promised = _limit_of(cases[index][1])
        wall, own = (float(x.split("=")[1]) for x in detail.split())
        key = -1.0 if promised is None else promised
        old = worst.get(key, (-math.inf, -math.inf))
        worst[key] = (max(old[0], own - max(0.0, key)), max(old[1], wall))
    for key in sorted(worst):
        over, wall = worst[key]
        own = f"at most {over:.1f} s" if key < 0 else f"at most {over:+.2f} s past the limit"
        name = "none" if key < 0 else f"{key:g} s"
        print(
            f"  model tasks, time_limit {name}: own clock {own}; wall of the fresh process at "
            f"most {wall:.1f} s"
        )


if __name__ == "__main__":
    sys.exit(main())
