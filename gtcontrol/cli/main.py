"""Command line: ``gtcontrol run DESIGN.toml [-o OUTDIR] [-q]``, ``gtcontrol reproduce``,
``gtcontrol designs [NAME]``, ``gtcontrol init TASK [-o FILE]``, ``gtcontrol models`` (also
``python -m gtcontrol``).

A run shows progress bars on stderr when it is a terminal (never in a pipe or a log, nor with
``--quiet``) and ends with a summary of the result (a table on a terminal, aligned lines in a
pipe; not with ``--quiet``) on stdout, then the line ``gtcontrol: wrote OUTDIR/result.json``.

Exit statuses: 0 success; 2 an error in the design, the inputs, the output folder or the
system (a ``GTControlError``, ``OSError``, ``MemoryError`` or ``RecursionError``): one line on
stderr; 3 an internal error (any other exception, a bug in gtcontrol): one line that names it;
130 interrupted (Ctrl-C); 143 terminated (SIGTERM: ``kill``, ``timeout``, a service manager),
handled as Ctrl-C. No traceback unless ``--debug`` (given before the command,
``gtcontrol --debug run ...``) asks for the full traceback of the error after its line, for a
bug report or a look inside; nothing half-written is left behind (the output directory is
replaced atomically on success only). Warnings raised during a successful run are printed
after it as one line each (``gtcontrol: warning: ...``); after a failure only the error line is
printed.

Interruption (:class:`_Interrupts`): the first SIGINT or SIGTERM raises ``KeyboardInterrupt`` in
the main thread, which unwinds the run (a sweep keeps its finished points, a ``model`` run the
rows it stored, and the line says where; other tasks remove what they had begun); later signals
are ignored while that bounded cleanup runs. Work in gtcontrol's background threads (a model
load, a model map on its dask cluster) is stopped too (:func:`_stop_background`), and the one
line ``gtcontrol: interrupted; ...`` (``terminated (SIGTERM); ...``) comes last. A thread
still inside native code after :data:`_STOP_WAIT` seconds (torch, a model load) makes the
command end with ``os._exit`` after flushing its streams: the interpreter's exit would stop
that daemon thread inside C++ code, which aborts the process (exit 134, "terminate called
without an active exception").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from .._blas import calm_blas
from .._output import write_run
from .._progress import reporting
from .._status import abandoned_work, cancellable
from .._version import __version__
from ..errors import GTControlError, Status
from ._refusals import refusals
from .schema import UnreadDesign, read_design
from .starters import shipped_design_text, shipped_designs, starter, write_starter
from .summary import print_summary
from .tasks import TASKS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # one line, exit 2 (argparse's default prints the whole usage block)
        self.exit(2, f"gtcontrol: error: {message} (see gtcontrol --help)\n")


_QUIET_HELP = "no progress bars and no summary: only warnings, errors and the final 'wrote' line"


def _build_parser() -> argparse.ArgumentParser:
    tasks = "\n".join(f"  {name:15s} {spec.summary}" for name, spec in TASKS.items())
    p = _Parser(
        prog="gtcontrol",
        description="Control-theory design tools for the Gaussian mean-field dynamics of "
        "Transformers (arXiv:2606.07600).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"tasks a design file can name:\n{tasks}\n\nschema: docs/designs.md",
    )
    p.add_argument("--version", action="version", version=f"gtcontrol {__version__}")
    p.add_argument(
        "--debug",
        action="store_true",
        help="after the error line, print the full traceback (for a bug report)",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run = sub.add_parser("run", help="run a design file", description="Run a design file.")
    run.add_argument("design", type=Path, help="the design file (TOML)")
    run.add_argument(
        "-o",
        "--outdir",
        type=Path,
        default=None,
        help="output directory (default: out/<design name>); replaced atomically on success",
    )
    run.add_argument("-q", "--quiet", action="store_true", help=_QUIET_HELP)
    run.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="sweep designs: run the points on the dask cluster of this scheduler "
        "(tcp://HOST:8786; default: local worker processes); the run resumes a killed one",
    )
    rep = sub.add_parser(
        "reproduce",
        help="reproduce the paper's numerical evidence (needs the 'experiments' extra)",
        description="Run every experiment of gtcontrol.experiments offline and write the "
        "figures, report.md, report.html and result.json (same as a design with "
        'task = "experiment", e.g. designs/paper.toml).',
    )
    rep.add_argument("-o", "--outdir", type=Path, default=Path("out/paper"))
    rep.add_argument("--n-tokens", type=int, default=1024, help="tokens fed to the encoders")
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--quick", action="store_true", help="reduced smoke run (< 60 s)")
    rep.add_argument("-q", "--quiet", action="store_true", help=_QUIET_HELP)
    des = sub.add_parser(
        "designs",
        help="list the example designs shipped with gtcontrol, or print one",
        description="Without NAME: list the shipped example designs (name, task, title). "
        "With NAME: print that design file (e.g. gtcontrol designs quickstart > my.toml).",
    )
    des.add_argument("name", nargs="?", default=None, help="a shipped design to print")
    sub.add_parser(
        "models",
        help="list the models gtcontrol can load offline (needs the 'experiments' extra)",
        description="List the model names of the 'model' task and of gtcontrol.interop.extract "
        "(the packaged MiniLM and random-weight encoders of the paper's shapes), whether each "
        "loads offline here, and what else is read: a Hugging Face folder or an .onnx file.",
    )
    ini = sub.add_parser(
        "init",
        help="write a commented starter design for a task",
        description="Write a small, commented starter design file for TASK, with every option "
        "of the task listed; an existing file is never overwritten.",
    )
    ini.add_argument("task", help=f"one of: {', '.join(TASKS)}")
    ini.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="the design file to create (default: <task>.toml; '-' prints it)",
    )
    return p


def run_design(
    design_path: Path, outdir: Path | None = None, *, scheduler: str | None = None
) -> Path:
    """Run a design file and write ``result.json`` and figures into ``outdir``; return it.

    Parameters
    ----------
    design_path
        The design file (TOML).
    outdir
        Output directory; ``out/<design name>`` by default. Replaced atomically on success
        (a ``sweep`` writes into it point by point instead, and resumes: docs/sweeps.md).
    scheduler
        ``sweep`` and ``model`` designs: the address of a dask scheduler to run the points
        (the layers) on (``None``: local worker processes, or inline).

    Returns
    -------
    pathlib.Path
        The output directory.

    Raises
    ------
    GTControlError
        If the design is invalid or the task refuses its inputs (nothing is written then).
    """
    design = read_design(design_path)
    out = outdir if outdir is not None else Path("out") / design_path.stem
    if isinstance(design, UnreadDesign):
        return _write_unread(design, out, design_path)
    if design.task == "sweep":
        from .sweep import run_sweep

        return run_sweep(design, out, scheduler=scheduler)
    if design.task == "model":
        from .tasks import map_rows_store, run_model

        store = map_rows_store(out)
        existed = store.exists()

        def run(tmp: Path) -> Mapping[str, Any]:
            with refusals(design):  # the API's refusal names the design file and its key
                return run_model(design, tmp, store=store, scheduler=scheduler)

        try:
            return _write(design, out, design_path, run)
        except KeyboardInterrupt:
            raise KeyboardInterrupt(_model_interrupted(out, store, existed)) from None

    elif scheduler is not None:
        from ..errors import DesignFileError

        raise DesignFileError(
            f"{design_path}: --scheduler is for task 'sweep' and 'model' designs only"
        )
    else:

        def run(tmp: Path) -> Mapping[str, Any]:
            # on a busy machine BLAS's threads stall inside calls no time limit interrupts;
            # the API's refusal of an input names the design file and its key
            with calm_blas(), refusals(design):
                return TASKS[design.task].run(design, tmp)

    return _write(design, out, design_path, run)


def _write(
    design: Any, out: Path, design_path: Path, run: Callable[[Path], Mapping[str, Any]]
) -> Path:
    """:func:`write_run` of ``run``; on an interrupt, the run's background threads are stopped
    before its temporary folder is removed (they would write into it)."""

    def stopping(tmp: Path) -> Mapping[str, Any]:
        try:
            return run(tmp)
        except KeyboardInterrupt:
            _stop_background()
            raise

    return write_run(
        out,
        design.task,
        stopping,
        title=design.title,
        source=str(design_path),
        inputs=design.raw,
        options=design.options,
        started=design.started,
    )


def _model_interrupted(out: Path, store: Path, existed: bool) -> str:
    """The line of an interrupted ``model`` run: its row store ``OUT.rows`` is kept when it
    holds finished rows (a rerun maps only the others) or was there before, else removed."""
    from ..experiments._layer_jobs import remove_store

    _stop_background()
    if not store.exists():
        return "interrupted; no output written"
    rows = len(list((store / "rows").glob("layer_*.pkl")))
    if rows == 0 and not existed and not _background_left():
        with contextlib.suppress(OSError):
            if remove_store(store):
                return "interrupted; no output written"
    return (
        f"interrupted; nothing written to {out}, {rows} finished row file(s) kept in {store} "
        "(run the same command again to map only the other layers)"
    )


def _write_unread(design: UnreadDesign, out: Path, design_path: Path) -> Path:
    """The ``budget_exhausted`` result of a design file not parsed within its time limit."""
    message = design.message
    skipped = ["the design file (not parsed)"]
    record = {
        "status": Status.BUDGET_EXHAUSTED,
        "outputs": {"message": message, "skipped": skipped},
        "figures": [],
        "summary": {"message": message, "skipped": skipped[0]},
    }
    return write_run(
        out,
        design.task,
        lambda tmp: record,
        title=design.title,
        source=str(design_path),
        inputs={},
        options={},
        started=design.started,
    )


def _is_terminal(stream: object) -> bool:
    """Whether ``stream`` is an interactive terminal (``False`` for pipes, files, StringIO)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed stream
        return False


def _one_line(text: str, limit: int = 2000) -> str:
    """``text`` on one line (whitespace runs collapsed), shortened past ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}…"


def _error_line(exc: BaseException) -> tuple[str, int]:
    """The stderr line and exit status for an exception that ended a run."""
    if isinstance(exc, GTControlError):
        return f"gtcontrol: error: {_one_line(str(exc))}", 2
    if isinstance(exc, MemoryError):
        return "gtcontrol: error: out of memory (the inputs are too large)", 2
    if isinstance(exc, RecursionError):
        return "gtcontrol: error: the inputs are nested too deeply", 2
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"gtcontrol: error: {_one_line(exc.strerror or str(exc))}{where}", 2
    name = type(exc).__name__
    return f"gtcontrol: internal error: {name}: {_one_line(str(exc))} (please report this)", 3


def _other_command(args: argparse.Namespace) -> None:
    """``gtcontrol designs`` and ``gtcontrol init``: print or write a design file."""
    if args.command == "designs":
        if args.name is not None:
            print(shipped_design_text(args.name), end="")
            return
        found = shipped_designs()
        width = max((len(d.name) for d in found), default=4)
        task_width = max((len(d.task) for d in found), default=4)
        for d in found:
            print(f"{d.name:{width}}  {d.task:{task_width}}  {d.title}".rstrip())
        return
    if args.output is not None and str(args.output) == "-":
        print(starter(args.task), end="")
        return
    path = write_starter(args.task, args.output or Path(f"{args.task}.toml"))
    print(f"gtcontrol: wrote {path} (edit it, then: gtcontrol run {path})")


def _list_models() -> None:
    """``gtcontrol models``: the named models, whether each loads offline, what else is read."""
    from ..interop.models import FAMILIES, available_models

    entries = available_models()
    width = max(len(e.name) for e in entries)
    for e in entries:
        state = "ok" if e.available else "missing"
        print(f"{e.name:{width}}  {state:7}  {e.description}")
    for e in entries:
        if not e.available:
            print(f"gtcontrol: {e.name}: {_one_line(e.reason, 300)}")
    print(
        "also: a Hugging Face folder (config.json + model.safetensors) of the families "
        f"{', '.join(FAMILIES)}, or an .onnx file (docs/own_model.md)"
    )


def _run(args: argparse.Namespace) -> Path | None:
    if args.command == "models":
        _list_models()
        return None
    if args.command in ("designs", "init"):
        _other_command(args)
        return None
    if args.command == "reproduce":
        from ..experiments.report import reproduce

        return reproduce(
            args.outdir, n_tokens=args.n_tokens, seed=args.seed, quick=args.quick
        ).outdir
    return run_design(args.design, args.outdir, scheduler=args.scheduler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gtcontrol`` command.

    Parameters
    ----------
    argv
        Command-line arguments (``sys.argv[1:]`` when ``None``: the command itself, which then
        exits the process at once after a run that gave up on a load at its time limit, rather
        than wait for the load or abort inside it).

    Returns
    -------
    int
        Exit status: 0 on success; 2 on an error in the design, the inputs, the output folder
        or the system (one line on stderr); 3 on an internal error (one line naming the
        exception); 130 when interrupted (Ctrl-C), 143 on SIGTERM. A traceback only with
        ``--debug``.

    Examples
    --------
    >>> from gtcontrol.cli import main
    >>> main(["run", "no/such/design.toml"])  # the error line goes to stderr
    2
    """
    code = _main(argv)
    # a load given up on, or native work an interrupt could not stop, still runs: leave it
    # unfinished (the interpreter's exit would stop it inside C++ code and abort)
    if argv is None and (abandoned_work() or (code in _INTERRUPTED and _background_left())):
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)
    return code


def _main(argv: Sequence[str] | None) -> int:
    """:func:`main` without its exit."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet = bool(getattr(args, "quiet", False))
        signals = _Interrupts()
        try:
            with signals.handled(), cancellable(signals.stop, "the run was interrupted"):
                try:
                    with reporting(enabled=not quiet and _is_terminal(sys.stderr)):
                        out = _run(args)
                except KeyboardInterrupt as exc:
                    _stop_background()
                    # a sweep keeps its finished points, a model run its rows, and says where;
                    # other tasks write nothing
                    what = str(exc) or "interrupted; no output written"
                    if signals.first == signal.SIGTERM:
                        what = what.replace("interrupted", "terminated (SIGTERM)", 1)
                    print(f"gtcontrol: {what}", file=sys.stderr)
                    return 143 if signals.first == signal.SIGTERM else 130
        except Exception as exc:  # every failure: one line; the traceback only with --debug
            line, code = _error_line(exc)
            print(line, file=sys.stderr)
            if args.debug:
                traceback.print_exception(exc, file=sys.stderr)
            return code
    seen: set[str] = set()
    for w in caught:
        line = f"gtcontrol: warning: {w.category.__name__}: {_one_line(str(w.message), 300)}"
        if line not in seen:
            seen.add(line)
            print(line, file=sys.stderr)
    if out is None:
        return 0
    return _report(out, quiet=quiet)


#: Exit statuses of an interrupted command: SIGINT (Ctrl-C) and SIGTERM.
_INTERRUPTED = (130, 143)
#: Seconds an interrupted run waits for its background threads to stop (a model map closes
#: its dask cluster: at most twice :data:`gtcontrol._cluster.CLOSE_TIMEOUT`).
_STOP_WAIT = 8.0
#: Names (prefixes) of gtcontrol's background threads that an interrupt stops.
_BACKGROUND = ("gtcontrol-within", "gtcontrol-sweep-preload")


class _Interrupts:
    """SIGINT and SIGTERM while a command runs: the first raises ``KeyboardInterrupt`` in the
    main thread and sets :attr:`stop` (the budgets of gtcontrol's background threads, made
    inside :func:`~gtcontrol._status.cancellable`, are then spent); later ones are ignored, so
    that a second Ctrl-C does not cut the cleanup short (it is bounded)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        #: The first signal received (``None``: none).
        self.first: int | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.first is not None:
            return
        self.first = signum
        self.stop.set()
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def handled(self) -> Iterator[None]:
        """Handle both signals in the block (from the main thread only; elsewhere: as is)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


_STOPPED: set[int] = set()


def _background() -> list[threading.Thread]:
    """gtcontrol's background threads that still run.

    Not ``Thread.is_alive()``: a ``join`` interrupted by Ctrl-C (the main thread waiting in
    :func:`~gtcontrol._status.within`) marks the thread it waited for as stopped while it runs
    on (CPython 3.11, bpo-45274's fix); a thread runs while the interpreter has its frames.
    """
    running = sys._current_frames()
    return [
        t
        for t in threading.enumerate()
        if t is not threading.current_thread()
        and t.ident in running
        and t.name.startswith(_BACKGROUND)
    ]


def _background_left() -> bool:
    """Whether a background thread an interrupt did not stop still runs."""
    return bool(_background())


def _stop_background(wait: float = _STOP_WAIT) -> None:
    """Stop gtcontrol's background threads after an interrupt and wait for them (at most
    ``wait`` seconds in all).

    Each gets a ``KeyboardInterrupt`` raised in it once (``PyThreadState_SetAsyncExc``): at its
    next Python instruction it unwinds as the main thread did, through its ``finally`` blocks
    (a model map closes its dask cluster and its row store, an import stops). A thread inside
    a long native call (a forward pass) gets it only when that call returns; one still running
    after ``wait`` is left to :func:`main`'s ``os._exit``.
    """
    import ctypes

    end = time.monotonic() + wait
    for thread in _background():
        ident = thread.ident
        if ident is None or ident in _STOPPED:
            continue
        _STOPPED.add(ident)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(ident), ctypes.py_object(KeyboardInterrupt)
        )
    while _background() and time.monotonic() < end:  # (join() may return at once: above)
        time.sleep(0.02)


def _report(out: Path, *, quiet: bool) -> int:
    """Print the summary of the run written to ``out`` and where it went. A reader that left
    (``| head``) ends it quietly with 0: the output is written; a standard output that cannot
    be written (a full disk) gets one line on stderr and 2."""
    try:
        if not quiet:
            print_summary(out, rich=_is_terminal(sys.stdout))
        print(f"gtcontrol: wrote {out}/result.json")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that does not fail too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(
            f"gtcontrol: error: the run was written to {out}, but its summary could not be "
            f"written to standard output ({exc.strerror or exc})",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
