"""The scheduled verification: how often and how deeply a spec wants its cuts verified
(:func:`verification_schedule`), and one run (:func:`verify_latest_checkpoints`, ``barrierflow
verify SPEC --latest N [--deep] --json``), failing with :class:`CheckpointVerificationError`
naming every failed cut and check."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.airflow.errors import CheckpointVerificationError
from barrierflow.spec.models import VerificationSpec

if TYPE_CHECKING:
    from barrierflow.spec.stages import PipelineSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerificationSchedule:
    """How the scheduled verification DAG of one pipeline runs.

    Attributes:
        interval_seconds: time between runs (``verification.interval``, default 10 minutes).
        latest: how many of the newest checkpoints each run verifies (``verification.latest``,
            default ``checkpoint.retained``: the checkpoints retention keeps).
        deep: also restore each checkpoint and run the expectation suite on its state
            (``verification.deep``, default false; needs Spark where the task runs).
    """

    interval_seconds: float
    latest: int
    deep: bool


def verification_schedule(spec: PipelineSpec) -> VerificationSchedule:
    """The scheduled verification settings of ``spec`` (defaults when it has no
    ``verification`` section; see :class:`VerificationSchedule`). Reads nothing but the spec."""
    settings = spec.verification or VerificationSpec()
    return VerificationSchedule(
        interval_seconds=settings.interval,
        latest=settings.latest or spec.checkpoint.retained,
        deep=settings.deep,
    )


def verify_latest_checkpoints(spec_path: str | os.PathLike[str], latest: int, *, deep: bool = False
                              ) -> dict[str, Any]:
    """Verify the pipeline's newest ``latest`` checkpoints, as
    ``barrierflow verify SPEC --latest N [--deep] --json`` does.

    Every result is stored beside its checkpoint (``chk-<n>/_verification.json``), where
    ``restore --latest-valid`` and retention use it. With ``deep``, a local SparkSession is
    built from the spec for the state reads (it lives as long as the calling process).

    Args:
        spec_path: the pipeline spec file.
        latest: how many of the newest checkpoints to verify (>= 1).
        deep: also restore each structurally intact checkpoint and run its expectation suite.

    Returns:
        The JSON document of ``barrierflow verify --json`` (see
        :func:`barrierflow.verification.runner.verification_summary`), when every verified
        checkpoint passed; also when there is no checkpoint yet (``"verified": 0``: the
        supervision DAG reports a pipeline that never completes one).

    Raises:
        SpecError: the spec does not load.
        UserInputError: ``latest`` is below 1.
        CheckpointVerificationError: a checkpoint failed a check; the message names every
            failed checkpoint and check, ``summary`` holds the JSON document.
        StorageError: the checkpoint store cannot be read.
    """
    from barrierflow.ops.verify import verify

    outcome = verify(spec_path, latest=latest, deep=deep)
    summary = outcome.as_dict()
    failed = outcome.failures()
    if failed:
        raise CheckpointVerificationError(outcome.pipeline, [(cid, name, message) for cid, name, message, _ in failed],
                                          summary, outcome.failure_message(str(spec_path)))
    log.info("pipeline %r: %d %s(s) in %s passed verification%s", outcome.pipeline, len(outcome.reports),
             outcome.noun, outcome.storage, " (deep)" if deep else "")
    return summary
