"""Command line: ``gtcontrol run DESIGN.toml [-o OUTDIR]``, ``gtcontrol reproduce`` (also
``python -m gtcontrol``).

Errors in the design or the inputs print one line on stderr and exit with status 2; nothing
half-written is left behind (the output directory is replaced atomically on success only).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .._output import write_run
from .._version import __version__
from ..errors import GTControlError
from .schema import load_design
from .tasks import TASKS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # one line, exit 2 (argparse's default prints the whole usage block)
        self.exit(2, f"gtcontrol: error: {message} (see gtcontrol --help)\n")


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
    return p


def run_design(design_path: Path, outdir: Path | None = None) -> Path:
    """Run a design file and write ``result.json`` and figures into ``outdir``; return it.

    Parameters
    ----------
    design_path
        The design file (TOML).
    outdir
        Output directory; ``out/<design name>`` by default. Replaced atomically on success.

    Returns
    -------
    pathlib.Path
        The output directory.

    Raises
    ------
    GTControlError
        If the design is invalid or the task refuses its inputs (nothing is written then).
    """
    design = load_design(design_path)
    out = outdir if outdir is not None else Path("out") / design_path.stem
    return write_run(
        out,
        design.task,
        lambda tmp: TASKS[design.task].run(design, tmp),
        title=design.title,
        source=str(design_path),
        inputs=design.raw,
        options=design.options,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gtcontrol`` command.

    Parameters
    ----------
    argv
        Command-line arguments (``sys.argv[1:]`` when ``None``).

    Returns
    -------
    int
        Exit status: 0 on success, 2 on an error (one line on stderr), 130 when interrupted.
    """
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "reproduce":
            from ..experiments.report import reproduce

            out = reproduce(
                args.outdir, n_tokens=args.n_tokens, seed=args.seed, quick=args.quick
            ).outdir
        else:
            out = run_design(args.design, args.outdir)
    except GTControlError as exc:
        print(f"gtcontrol: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gtcontrol: interrupted; no output written", file=sys.stderr)
        return 130
    print(f"gtcontrol: wrote {out}/result.json")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
