"""The errors the Airflow side raises of its own (each names the thing and the fix); the tasks
fail at once on them (:func:`barrierflow.airflow.task_body.task_body`)."""

from __future__ import annotations

from typing import Any

from barrierflow.errors import BarrierflowError, CheckpointError


class CheckpointStaleError(CheckpointError):
    """A pipeline has no completed checkpoint, or its latest one is older than allowed.

    Attributes:
        pipeline: the pipeline's name.
        age_seconds: age of the latest completed checkpoint; ``None`` when there is none.
        max_age_seconds: the limit it was checked against.
    """

    def __init__(self, pipeline: str, age_seconds: float | None, max_age_seconds: float, detail: str) -> None:
        self.pipeline = pipeline
        self.age_seconds = age_seconds
        self.max_age_seconds = max_age_seconds
        super().__init__(detail)


class CheckpointVerificationError(CheckpointError):
    """The scheduled verification found checkpoints that fail a check.

    Attributes:
        pipeline: the pipeline's name.
        failures: ``(checkpoint id, check name, message)`` of every failed check, in the
            order verified (oldest checkpoint first).
        summary: the JSON document ``barrierflow verify --json`` prints for the same run.
    """

    def __init__(self, pipeline: str, failures: list[tuple[int, str, str]], summary: dict[str, Any],
                 detail: str) -> None:
        self.pipeline = pipeline
        self.failures = failures
        self.summary = summary
        super().__init__(detail)


class BatchReportError(BarrierflowError):
    """The batch job of this DAG run left no report of its own (it did not run, or another run's
    report is stored)."""
