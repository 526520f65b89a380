"""Prove exactly-once on a pipeline under random kills (``barrierflow chaos``, the chaos DAG).

See :mod:`barrierflow.chaos` for the method and what a pass does and does not prove.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from barrierflow.chaos.report import summary_lines, write_report
from barrierflow.chaos.runner import ChaosOptions, ChaosResult, run_chaos
from barrierflow.spec.loader import load_any_spec
from barrierflow.storage import open_store

#: Where the latest chaos report is kept in the pipeline's own checkpoint store (the
#: Checkpoints page links to both).
STORED_JSON, STORED_HTML = "reports/chaos-latest.json", "reports/chaos-latest.html"

__all__ = ["ChaosOptions", "ChaosOutcome", "chaos"]


@dataclass(frozen=True)
class ChaosOutcome:
    """The result, its summary lines, where the JSON report and the HTML page are, and their
    URIs in the pipeline's checkpoint store."""

    result: ChaosResult
    report_json: Path
    report_html: Path
    stored: tuple[str, str]

    @property
    def lines(self) -> list[str]:
        return summary_lines(self.result)


def chaos(spec_path: str | os.PathLike[str], options: ChaosOptions) -> ChaosOutcome:
    """Run a failure-free reference and the same pipeline under ``options.kills`` kills in
    scratch copies, compare their committed outputs and write the report beside them. A
    difference is a result (``outcome.result.passed`` is False), not an error.

    Raises:
        SpecError: the spec does not load.
        ChaosRefusedError: an unbounded source, a Kafka source starting at ``latest``, a
            transformation declared non-deterministic, or a reference run that committed no
            row (nothing to compare); the message says why and what to change.
        UserInputError: bad options; a sink's table or topic to copy does not exist.
        ChaosRunError: a run failed without being killed, or hung (its log is in the message).
        OutputReadError: an output could not be read.
    """
    spec = load_any_spec(spec_path)
    if options.upgrade_to is not None:
        from barrierflow.upgrade.chaos import run_upgrade_chaos

        result = run_upgrade_chaos(spec_path, options)
    else:
        result = run_chaos(spec_path, options)
    json_path, html_path = write_report(result, Path(result.scratch))
    objects = open_store(spec.checkpoint.storage)
    objects.put_bytes(STORED_JSON, json_path.read_bytes())
    objects.put_bytes(STORED_HTML, html_path.read_bytes())
    return ChaosOutcome(result, json_path, html_path, (objects.describe(STORED_JSON), objects.describe(STORED_HTML)))
