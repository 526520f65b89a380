"""The canary of an upgrade: the new spec runs a few cuts, commits nothing, and each is verified.

:func:`run_canary` runs a pipeline (already restored from the upgrade's savepoint as a new
attempt), whatever its shape, through the one run driver
(:func:`~barrierflow.runtime.run_driver.open_driver` with ``hold_commits``) for ``checkpoints``
completed cuts (a stage's checkpoints for one stage, global checkpoints for several). Its final
sinks are wrapped in :class:`~barrierflow.transactions.committer.HeldCommits`: each epoch is
pre-committed at its cut (2PC phase one: durable, invisible, in the ledger as PRECOMMITTED, its
handle in the manifest) but never committed, so no output of the canary is visible while it
runs. The channels between stages are written and read as in any run: what the canary wrote
there is read by no other attempt (a later restore's attempt cutoffs skip it). Then every stage's
checkpoint of every cut the canary completed is verified, structurally and deeply
(:func:`barrierflow.verification.runner.verify_checkpoints` with ``deep``: the state restored
into scratch, read with Spark's state reader and checked with the pipeline's expectation suite);
each result is stored beside its checkpoint as ``barrierflow verify`` stores it.

What happens to the held epochs is the caller's decision (:mod:`barrierflow.ops.upgrade`): a
passed canary's are committed by reconciliation against its newest cut, which covers them all;
a failed canary's are aborted by the restore of the old spec's savepoint (they are newer than
it). A 2PC sink can hold several pre-committed epochs at once: a later epoch takes only
write-ahead batches no live transaction holds.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.runtime.run_driver import channel_servers, open_driver
from barrierflow.verification.runner import verify_checkpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.pipeline.model import OpenedPipeline
    from barrierflow.runtime.pipeline_runner import PipelineRunner
    from barrierflow.verification.report import VerificationReport

log = logging.getLogger(__name__)

__all__ = ["CanaryOutcome", "run_canary"]


@dataclass(frozen=True)
class CanaryOutcome:
    """What the canary did.

    Attributes:
        checkpoints: the ids of the cuts it completed, ascending.
        reports: the verification reports of every stage's checkpoint of them (cut by cut).
        failure: the first failed check (``checkpoint N of stage S failed the <check> check:
            <message>``), or why the run itself failed; "" when it passed.
    """

    checkpoints: list[int]
    reports: list[VerificationReport] = field(default_factory=list)
    failure: str = ""

    @property
    def passed(self) -> bool:
        return not self.failure

    @property
    def verified(self) -> list[int]:
        """The cuts every stage's checkpoint of which passed."""
        return [c for c in self.checkpoints
                if all(r.passed for r in self.reports if r.checkpoint_id == c)]


def _bounded(driver: PipelineRunner) -> bool:
    """Whether every source stage reads a bounded source (the canary then also stops at its end)."""
    try:
        driver.check_bounded()
    except UserInputError:
        return False
    return True


def run_canary(pipeline: OpenedPipeline, spark: SparkSession, checkpoints: int) -> CanaryOutcome:
    """Run ``pipeline`` (restored for its spec, not running) until ``checkpoints`` cuts completed
    (or, for bounded sources, its input ended), commit nothing of its final sinks, and
    deep-verify every stage's checkpoint of every cut it completed (module docstring). A run
    that fails (a query died, its checkpoints kept failing, the embedded broker did not start)
    is a failed canary, not an error.

    Raises:
        StorageError: the checkpoint store cannot be read or written.
    """
    before = set(pipeline.cuts.completed_ids())
    spec_path = pipeline.spec_path
    try:
        with ExitStack() as stack:
            _, servers = stack.enter_context(channel_servers(pipeline))
            driver = open_driver(pipeline, channel_servers=servers, spark=spark, hold_commits=True)
            bounded = _bounded(driver)
            driver.hold(stack.enter_context(driver.lease()))
            driver.run(checkpoints=checkpoints, until_exhausted=bounded)
    except BarrierflowError as exc:
        done = sorted(set(pipeline.cuts.completed_ids()) - before)
        return CanaryOutcome(done, failure=f"the canary run of {spec_path} failed: {exc}")
    done = sorted(set(pipeline.cuts.completed_ids()) - before)
    if not done:
        return CanaryOutcome(done, failure=f"the canary run of {spec_path} completed no {pipeline.cut_noun}")
    reports: list[VerificationReport] = []
    failure = ""
    for stage in pipeline.stages:
        for report in verify_checkpoints(stage.spec, stage.store, done, deep=True, spark=spark):
            reports.append(report)
            for check in report.failures:
                failure = failure or (f"checkpoint {report.checkpoint_id} of stage {stage.name} failed the "
                                      f"{check.name} check: {check.message}")
    if failure:
        return CanaryOutcome(done, reports, failure)
    log.info("pipeline %s: canary %ss %s passed deep verification", pipeline.name, pipeline.cut_noun, done)
    return CanaryOutcome(done, reports)
