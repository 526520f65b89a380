"""The scheduled watermark-skew report: ``barrierflow skew SPEC --json`` once, failing with
:class:`barrierflow.reports.skew.SkewExpectationError` naming each stage, checkpoint and value
that broke ``reports.max_skew`` / ``reports.max_lag``."""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def report_watermark_skew(spec_path: str | os.PathLike[str], *, last: int | None = None) -> dict[str, Any]:
    """One watermark-skew report of the pipeline, as ``barrierflow skew SPEC [--last N] --json``.

    The report (see :mod:`barrierflow.reports.skew`) is stored in the checkpoint store as
    ``reports/skew-latest.json`` when there is a completed checkpoint.

    Returns:
        The JSON document, when every expectation passed; also when there is no completed
        checkpoint yet (``"checkpoints": []``, ``"message": "no completed checkpoints yet"``).

    Raises:
        SpecError: the spec does not load.
        UserInputError: ``last`` is below 1.
        SkewExpectationError: an expectation failed; the message names each offending
            checkpoint and value, ``summary`` holds the JSON document.
        StorageError: the checkpoint store cannot be read or written.
    """
    from barrierflow.ops.skew import skew

    outcome = skew(spec_path, last=last)
    outcome.raise_for_failures(str(spec_path))
    for name, report in outcome.stages.items():
        log.info("pipeline %r, stage %s: %s", outcome.pipeline, name, report.message)
    return outcome.as_dict()
