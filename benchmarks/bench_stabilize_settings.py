"""Why ``stabilize``'s settings are what they are: one setting varied, everything else kept.

Runs :func:`gtcontrol.stabilize` on one layer and target of a real model as
:func:`gtcontrol.experiments.stabilize_model` poses it (by default all-MiniLM-L6-v2 with a
1,024-token check, as the map runs it), once per value of one module constant of the modules it
runs through (the modules of :mod:`gtcontrol.control.stabilization`, ``_finite_n`` of
:mod:`gtcontrol.control.design`,
:mod:`gtcontrol.model._moment_integrator`, :mod:`gtcontrol.analysis.stability`;
``--set NAME=V1,V2,...``), or per number of BLAS threads (``--threads 1,2``), and prints what
each run spent where: the verifying simulations and the screens (calls, right-hand-side
evaluations, seconds), the spectra's operator products, each token run (seconds, depth reached,
W2 in sampling floors), ``c``, the gauge ``s``, the verifications' end errors and the status.
The table "The settings of stabilize" of docs/benchmarks.md comes from it.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_stabilize_settings.py --layer 1
--target text --set _VERIFY_INTEGRATOR_RTOL=1e-6,1e-7`` (needs the ``experiments`` extra);
``--screen-method RK45`` integrates the screens by RK45 instead of simulate's default DOP853.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import gtcontrol as gt
from gtcontrol.experiments import data_tokens, text_target
from gtcontrol.interop import extract

_verify = importlib.import_module("gtcontrol.control.stabilization._verify")
_head = importlib.import_module("gtcontrol.control.stabilization._head")
_tokens = importlib.import_module("gtcontrol.control.stabilization._tokens")
MODULES = tuple(
    importlib.import_module(f"gtcontrol.{name}")
    for name in (
        "control.stabilization._plan",
        "control.stabilization._verify",
        "control.stabilization._tokens",
        "control.stabilization._report",
        "control.stabilization._head",
        "control.design._finite_n",
        "model._moment_integrator",
        "analysis.stability",
    )
)


class Recorder:
    """Wraps the module functions a stabilization calls and records each call."""

    def __init__(self, screen_method: str | None) -> None:
        self.calls: dict[str, list[dict[str, float]]] = {"verify": [], "screen": [], "tokens": []}
        self.screen_method = screen_method

    def timed(self, kind: str, func: Callable[..., Any], **extra: Any) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            clock = time.perf_counter()
            out = func(*args, **{**kwargs, **extra})
            row = {"seconds": time.perf_counter() - clock}
            if kind == "tokens":
                floor = float(getattr(out, "floor", float("nan")))
                depth = float(out.t[-1]) if len(out.t) else 0.0
                evals = float(out.stats.get("n_velocity", float("nan")))
                row.update(w2_floors=float(out.w2) / floor, depth=depth, nfev=evals)
            else:
                row.update(nfev=float(out.stats.get("nfev", 0)), depth=float(out.t[-1]))
            self.calls[kind].append(row)
            return out

        return call

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        saved = (_verify.simulate, _head.simulate, _tokens.design_token_certificate)
        screen_extra = {} if self.screen_method is None else {"method": self.screen_method}
        _verify.simulate = self.timed("verify", saved[0])
        _head.simulate = self.timed("screen", saved[1], **screen_extra)
        _tokens.design_token_certificate = self.timed("tokens", saved[2])
        try:
            yield
        finally:
            _verify.simulate, _head.simulate, _tokens.design_token_certificate = saved


@contextlib.contextmanager
def constant(name: str | None, value: float | None) -> Iterator[None]:
    """``name`` set to ``value`` in whichever module defines it (nothing when ``name`` is None)."""
    if name is None:
        yield
        return
    homes = [m for m in MODULES if hasattr(m, name)]
    if not homes:
        raise SystemExit(f"--set: no constant {name} in {[m.__name__ for m in MODULES]}")
    saved = [getattr(m, name) for m in homes]
    for m in homes:
        setattr(m, name, value)
    try:
        yield
    finally:
        for m, old in zip(homes, saved, strict=True):
            setattr(m, name, old)


def problem(em: Any, layer: int, target: str) -> tuple[Any, Any, Any]:
    """The layer, the target and the probe tokens, as stabilize_model poses them."""
    tokens, _ = data_tokens(em, seed=0)
    lay = em.layers[layer].attention_layer
    probe = np.hstack([tokens[layer], np.ones((tokens[layer].shape[0], 1))])
    if target == "text":
        goal, _ = text_target(tokens[layer])
    else:
        cov = np.eye(lay.dim)
        cov[-1, -1] = 0.0
        goal = gt.Gaussian(np.eye(lay.dim)[-1], cov, name="target")
    return lay, goal, probe


def run(setup: tuple[Any, Any, Any], args: argparse.Namespace, label: str, threads: int) -> None:
    lay, goal, probe = setup
    rec = Recorder(args.screen_method)
    clock = time.perf_counter()
    with rec.installed(), threadpool_limits(threads):
        as_map = {"initial": "perturbed", "untouched_tokens": False} if args.as_map else {}
        res = gt.stabilize(
            lay, goal, rate=args.rate, token_check=args.tokens, tokens=probe, seed=0, **as_map
        )
    wall = time.perf_counter() - clock
    ends = [
        f"{v.name}: Σ {v.cov_error[-1]:.3g}, m {v.mean_error[-1]:.3g}" for v in res.verification
    ]
    screens = res.stats.get("c_screens", "")
    print(
        f"\n## {label}: {res.status.value} in {wall:.1f} s, c = {res.c:.4g} (local minimum "
        f"{res.stats.get('c_local', float('nan')):.4g}; screens {screens}), gauge s = "
        f"{res.scale:.4g}, design rate {res.stats.get('design_rate', args.rate):g}, "
        f"{res.stats.get('matvecs', 0)} spectrum products"
    )
    for kind in ("verify", "screen"):
        calls = rec.calls[kind]
        nfev = sum(c["nfev"] for c in calls)
        secs = sum(c["seconds"] for c in calls)
        print(f"{kind}: {len(calls)} integrations, {nfev:.0f} evaluations, {secs:.1f} s")
    for i, c in enumerate(rec.calls["tokens"]):
        print(
            f"token run {i}: {c['seconds']:.1f} s, {c['nfev']:.0f} evaluations, "
            f"depth {c['depth']:.3g}, "
            f"W2 {c['w2_floors']:.3g} floors"
        )
    print("verification end errors: " + "; ".join(ends))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--target", choices=("text", "identity"), default="text")
    ap.add_argument("--tokens", type=int, default=1024, help="token check (0: none)")
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--set", default=None, help="NAME=V1,V2,...: one module constant")
    ap.add_argument("--threads", default="1", help="BLAS threads per run, e.g. 1,2")
    ap.add_argument("--screen-method", default=None, help="ivp method of the screens")
    ap.add_argument(
        "--as-map",
        action="store_true",
        help="as the model map asks: the perturbed target only, no untouched token run",
    )
    args = ap.parse_args()
    args.tokens = args.tokens or None
    setup = problem(extract(args.model), args.layer, args.target)
    name, values = None, [None]
    if args.set:
        name, _, text = args.set.partition("=")
        values = [int(v) if v.lstrip("-").isdigit() else float(v) for v in text.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    for value in values:
        for n in threads:
            label = ", ".join(
                part
                for part in (
                    f"{name} = {value:g}" if name else "",
                    f"{n} BLAS threads",
                )
                if part
            )
            with constant(name, value):
                run(setup, args, label, n)


if __name__ == "__main__":
    main()
