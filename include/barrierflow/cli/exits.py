"""How the CLI ends: its exit codes, and the parser whose errors are the user's (exit 2).

Exit codes: 0 success, 2 bad input (spec, arguments, checkpoint chosen), 1 runtime failure,
141 when the reader of the output went away (``| head``: a shell's code for SIGPIPE).
"""

from __future__ import annotations

import argparse
import signal
import sys

from barrierflow.errors import UserInputError

__all__ = ["EXIT_BAD_INPUT", "EXIT_BROKEN_PIPE", "EXIT_OK", "EXIT_RUNTIME", "ArgumentParser", "Subcommands"]

EXIT_OK, EXIT_RUNTIME, EXIT_BAD_INPUT = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
#: What each command module's ``add_<command>`` is given to add its parser to.
Subcommands = argparse._SubParsersAction


class ArgumentParser(argparse.ArgumentParser):
    """A parser whose errors raise :class:`~barrierflow.errors.UserInputError` (exit 2) after the usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise UserInputError(f"{self.prog}: {message}")
