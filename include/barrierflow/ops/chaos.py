"""Prove exactly-once on a pipeline under random kills (``barrierflow chaos``, the chaos DAG).

See :mod:`barrierflow.chaos` for the method and what a pass does and does not prove.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from barrierflow.chaos.report import summary_lines, write_report
from barrierflow.chaos.runner import ChaosOptions, ChaosResult, run_chaos

__all__ = ["ChaosOptions", "ChaosOutcome", "chaos"]


@dataclass(frozen=True)
class ChaosOutcome:
    """The result, its summary lines and where the JSON report and the HTML page are."""

    result: ChaosResult
    report_json: Path
    report_html: Path

    @property
    def lines(self) -> list[str]:
        return summary_lines(self.result)


def chaos(spec_path: str | os.PathLike[str], options: ChaosOptions) -> ChaosOutcome:
    """Run a failure-free reference and the same pipeline under ``options.kills`` kills in
    scratch copies, compare their committed outputs and write the report beside them. A
    difference is a result (``outcome.result.passed`` is False), not an error.

    Raises:
        SpecError: the spec does not load.
        ChaosRefusedError: an unbounded source or a transformation declared non-deterministic.
        UserInputError: bad options; a sink's table or topic to copy does not exist.
        ChaosRunError: a run failed without being killed, or hung (its log is in the message).
        OutputReadError: an output could not be read.
    """
    result = run_chaos(spec_path, options)
    json_path, html_path = write_report(result, Path(result.scratch))
    return ChaosOutcome(result, json_path, html_path)
