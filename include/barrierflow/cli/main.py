"""``barrierflow`` — run pipelines and inspect their checkpoints.

Exit codes: 0 success, 2 bad input (spec, arguments, checkpoint chosen), 1 runtime failure,
141 when the reader of the output went away (``| head``: a shell's code for SIGPIPE).
Each command parses its arguments, calls one operation of :mod:`barrierflow.ops` and renders
the result; no rule of its own lives here. The commands live by group, each parser beside its
handler: :mod:`.run` (run, stop, chaos), :mod:`.checkpoints` (checkpoints, restore, reconcile,
verify, retain, savepoint), :mod:`.reports` (skew, rollup, recompute, quality, lake), :mod:`.state`
(state, upgrade), :mod:`.project` (validate, init); :mod:`.exits` holds the exit codes.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import FrameType

from barrierflow.cli import checkpoints, project, reports, run, state
from barrierflow.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_OK,
    EXIT_RUNTIME,
    ArgumentParser,
    Subcommands,
)
from barrierflow.errors import BarrierflowError, UserInputError

__all__ = ["EXIT_BAD_INPUT", "EXIT_BROKEN_PIPE", "EXIT_OK", "EXIT_RUNTIME", "main"]

#: Every command's parser, in the order ``barrierflow --help`` lists them.
COMMANDS: tuple[Callable[[Subcommands], None], ...] = (
    run.add_run,
    checkpoints.add_restore,
    checkpoints.add_reconcile,
    checkpoints.add_checkpoints,
    checkpoints.add_verify,
    reports.add_skew,
    reports.add_rollup,
    reports.add_recompute,
    reports.add_quality,
    reports.add_lake,
    run.add_chaos,
    checkpoints.add_retain,
    checkpoints.add_savepoint,
    run.add_stop,
    state.add_state,
    state.add_upgrade,
    project.add_validate,
    project.add_init,
)


def _version() -> str:
    """The installed distribution's version (package metadata, as pip shows it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("barrierflow")
    except PackageNotFoundError:
        raise UserInputError("barrierflow is not installed as a distribution, so it has no version: install it "
                             "(pip install -e . in the repository) and run again") from None


class _VersionAction(argparse.Action):
    """``--version``: the version is read only when asked for (a source checkout without the
    distribution installed still runs every other command)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="barrierflow", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log at INFO level, with the traceback of a failure (before the command: "
                             "barrierflow --verbose run SPEC)")
    parser.add_argument("--version", action=_VersionAction, help="print the installed barrierflow's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for add in COMMANDS:
        add(sub)
    return parser


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _not_py4j(record: logging.LogRecord) -> bool:
    """Py4J logs every failed call to the JVM (on the root logger, with a traceback): when the
    JVM dies that is a page of tracebacks before the one ``error:`` line that says so. Shown
    with ``--verbose`` only."""
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    try:
        args = _parser().parse_args(list(argv) if argv is not None else None)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not args.verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_py4j)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # kafka-python warns whenever one of its event-loop tasks runs over 0.1 s, which a loaded
    # driver does all the time; the line says nothing an operator can act on.
    logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not in the main thread (e.g. called from a test thread)
        pass
    try:
        return args.handler(args)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BarrierflowError as exc:
        if args.verbose:  # how it came about: the chain of causes (a dead JVM's Py4J errors)
            traceback.print_exception(exc, file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        print(f"interrupted at {datetime.now(UTC).isoformat(timespec='seconds')}", file=sys.stderr)
        return EXIT_RUNTIME
    except BrokenPipeError:
        # The reader of stdout went away (``barrierflow checkpoints SPEC | head``): what was left
        # to print has no reader. Point stdout at /dev/null so that the interpreter's final flush
        # does not raise again, and exit as a shell's pipeline expects (no traceback).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
