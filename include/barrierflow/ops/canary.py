"""The canary of an upgrade: the new spec runs a few checkpoints, commits nothing, and each is verified.

:func:`run_canary` runs a single-stage pipeline (already restored from the upgrade's savepoint
as a new attempt) for ``checkpoints`` completed checkpoints, with every sink wrapped in
:class:`HeldCommits`: each epoch is pre-committed at its checkpoint (2PC phase one: durable,
invisible, in the ledger as PRECOMMITTED, its handle in the manifest) but never committed, so
no output of the canary is visible while it runs. Then every checkpoint the canary completed
is verified, structurally and deeply (:func:`barrierflow.verification.runner.verify_checkpoints`
with ``deep``: the state restored into scratch, read with Spark's state reader and checked with
the pipeline's expectation suite); each result is stored beside its checkpoint as
``barrierflow verify`` stores it.

What happens to the held epochs is the caller's decision (:mod:`barrierflow.ops.upgrade`): a
passed canary's are committed by reconciliation against its newest checkpoint, which covers
them all; a failed canary's are aborted by the restore of the old spec's savepoint (they are
newer than it). A 2PC sink can hold several pre-committed epochs at once: a later epoch takes
only write-ahead batches no live transaction holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from barrierflow.errors import BarrierflowError
from barrierflow.runtime.job import StreamingJob
from barrierflow.sources.registry import source_kind
from barrierflow.transactions.committer import SinkCommitter
from barrierflow.verification.runner import verify_checkpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.pipeline.model import Stage
    from barrierflow.verification.report import VerificationReport

log = logging.getLogger(__name__)

__all__ = ["CanaryOutcome", "HeldCommits", "run_canary"]


class HeldCommits(SinkCommitter):
    """A sink whose epochs are pre-committed but not committed (module docstring): a completed
    checkpoint is only remembered (:attr:`held`); a failed one is aborted as usual."""

    def __init__(self, inner: SinkCommitter) -> None:
        self.inner = inner
        self.name = inner.name
        self.held: list[int] = []

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]:
        return self.inner.pre_commit_epoch(checkpoint_id, barrier_batch)

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        self.held.append(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.inner.notify_checkpoint_aborted(checkpoint_id)


class _CanaryJob(StreamingJob):
    """The stage's job with its sinks' commits held back."""

    def sink_committers(self, attempt: int | None = None) -> list[SinkCommitter]:
        return [HeldCommits(sink) for sink in super().sink_committers(attempt)]


@dataclass(frozen=True)
class CanaryOutcome:
    """What the canary did.

    Attributes:
        checkpoints: the ids of the checkpoints it completed, ascending.
        reports: their verification reports (in that order).
        failure: the first failed check (``checkpoint N failed the <check> check: <message>``),
            or why the run itself failed; "" when it passed.
    """

    checkpoints: list[int]
    reports: list[VerificationReport] = field(default_factory=list)
    failure: str = ""

    @property
    def passed(self) -> bool:
        return not self.failure

    @property
    def verified(self) -> list[int]:
        return [r.checkpoint_id for r in self.reports if r.passed]


def run_canary(stage: Stage, spec_path: str, spark: SparkSession, checkpoints: int) -> CanaryOutcome:
    """Run ``stage`` (a single-stage pipeline restored for its spec, not running) until
    ``checkpoints`` checkpoints completed (or, for a bounded source, its input ended), commit
    nothing, and deep-verify every checkpoint it completed (module docstring). A run that fails
    (its query died, its checkpoints kept failing) is a failed canary, not an error.

    Raises:
        StorageError: the checkpoint store cannot be read or written.
    """
    before = set(stage.store.checkpoint_ids())
    bounded = source_kind(stage.spec.source).bounded_end(stage.spec.source) is not None
    job = _CanaryJob(stage.spec, spec_path=spec_path, spark=spark, layout=stage.layout)
    try:
        job.run(checkpoints=checkpoints, until_exhausted=bounded)
    except BarrierflowError as exc:
        done = sorted(set(stage.store.checkpoint_ids()) - before)
        return CanaryOutcome(done, failure=f"the canary run of {spec_path} failed: {exc}")
    done = sorted(set(stage.store.checkpoint_ids()) - before)
    if not done:
        return CanaryOutcome(done, failure=f"the canary run of {spec_path} completed no checkpoint")
    reports = verify_checkpoints(stage.spec, stage.store, done, deep=True, spark=spark)
    for report in reports:
        for check in report.failures:
            return CanaryOutcome(done, reports, f"checkpoint {report.checkpoint_id} failed the {check.name} check: "
                                                f"{check.message}")
    log.info("pipeline %s: canary checkpoints %s passed deep verification", stage.spec.name, done)
    return CanaryOutcome(done, reports)
