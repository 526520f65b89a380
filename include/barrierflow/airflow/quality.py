"""The scheduled data-quality run: ``barrierflow quality SPEC --json`` once, failing with
:class:`barrierflow.reports.quality.QualityExpectationError` naming each expectation."""

from __future__ import annotations

import os
from typing import Any


def check_output_quality(spec_path: str | os.PathLike[str], *, epochs: int | None = None,
                         stage: str | None = None) -> dict[str, Any]:
    """One data-quality run, as ``barrierflow quality SPEC [--epochs N] [--stage NAME] --json``
    (``stage``: for a pipeline of several stages, the final stage whose output to validate).

    Returns:
        The JSON document (also stored as ``reports/quality-latest.json``; Data Docs under
        ``reports/quality/``), when every expectation passed or was skipped.

    Raises:
        SpecError, UserInputError, StorageError.
        QualityExpectationError: an expectation failed; the message names each expectation, its
            column(s) and a sample of the bad rows; ``report`` holds the document.
    """
    from barrierflow.ops.quality import quality
    from barrierflow.reports.quality import raise_for_failures

    report = quality(spec_path, epochs=epochs, stage=stage)
    raise_for_failures(report, str(spec_path))
    return report.as_dict()
