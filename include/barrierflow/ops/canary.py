"""The canary of an upgrade: the new spec runs a few cuts, commits nothing, and each is verified.

:func:`run_canary` runs a pipeline (already restored from the upgrade's savepoint as a new
attempt), whatever its shape, through the one run driver
(:func:`~barrierflow.runtime.run_driver.open_driver` with ``hold_commits``) for ``checkpoints``
completed cuts (a stage's checkpoints for one stage, global checkpoints for several). Its final
sinks are wrapped in :class:`~barrierflow.transactions.committer.HeldCommits`: each epoch is
pre-committed at its cut (2PC phase one: durable, invisible, in the ledger as PRECOMMITTED, its
handle in the manifest) but never committed, so no output of the canary is visible while it
runs. The channels between stages are written and read as in any run: what the canary wrote
there is read by no other attempt (a later restore's attempt cutoffs skip it). Every stage's
checkpoint of every cut the canary completes is verified, structurally and deeply
(:func:`barrierflow.verification.runner.verify_checkpoints` with ``deep``: the state restored
into scratch, read with Spark's state reader and checked with the pipeline's expectation suite),
as soon as the cut completed, while the canary runs on; the first failed check stops the canary
(no later cut of a failed canary is worth running). Each result is stored beside its checkpoint
as ``barrierflow verify`` stores it.

What happens to the held epochs is the caller's decision (:mod:`barrierflow.ops.upgrade`): a
passed canary's are committed by reconciliation against its newest cut, which covers them all;
a failed canary's are aborted by the restore of the old spec's savepoint (they are newer than
it). A 2PC sink can hold several pre-committed epochs at once: a later epoch takes only
write-ahead batches no live transaction holds.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
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


class _Verifier:
    """Deep-verifies the canary's cuts while it runs: each cut once it completed, oldest first,
    in one background thread on the canary's SparkSession (the streaming queries keep running
    beside it), so the first verified cut does not wait for the last one to be run, and the
    first failed check stops the canary (:attr:`failed`) instead of letting it run on.

    Contract: :meth:`poll` (called every tick of the run, cheap: it lists the store only when
    the run completed a cut since the last call) submits the cuts that are new; :meth:`finish`
    submits what is left, waits for every verification and returns the reports (cut by cut,
    stage by stage) and the first failure ("" if none); :meth:`close` abandons what has not
    started (the run failed). A verification that raises (the store cannot be read) re-raises
    in :meth:`finish`.
    """

    def __init__(self, pipeline: OpenedPipeline, spark: SparkSession, before: set[int]) -> None:
        self._pipeline, self._spark = pipeline, spark
        self._seen = set(before)
        self._count = -1
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"canary-verify-{pipeline.name}")
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()
        self.reports: list[VerificationReport] = []
        self.failure = ""

    def failed(self) -> bool:
        with self._lock:
            return bool(self.failure)

    def poll(self, completed_count: int | None = None) -> None:
        if completed_count is not None and completed_count == self._count:
            return
        self._count = completed_count if completed_count is not None else self._count
        for cid in sorted(set(self._pipeline.cuts.completed_ids()) - self._seen):
            self._seen.add(cid)
            self._futures.append(self._pool.submit(self._verify, cid))

    def _verify(self, cid: int) -> None:
        if self.failed():
            return  # the canary already failed: a later cut's verification changes nothing
        for stage in self._pipeline.stages:
            for report in verify_checkpoints(stage.spec, stage.store, [cid], deep=True, spark=self._spark):
                with self._lock:
                    self.reports.append(report)
                    for check in report.failures:
                        self.failure = self.failure or (
                            f"checkpoint {report.checkpoint_id} of stage {stage.name} failed the "
                            f"{check.name} check: {check.message}")

    def finish(self) -> tuple[list[VerificationReport], str]:
        self.poll()
        try:
            for future in self._futures:
                future.result()
        finally:
            self._pool.shutdown(wait=True)
        return list(self.reports), self.failure

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def run_canary(pipeline: OpenedPipeline, spark: SparkSession, checkpoints: int) -> CanaryOutcome:
    """Run ``pipeline`` (restored for its spec, not running) until ``checkpoints`` cuts completed
    (or, for bounded sources, its input ended), commit nothing of its final sinks, and
    deep-verify every stage's checkpoint of every cut it completed (module docstring), each
    while the canary runs on (:class:`_Verifier`); the first failed check stops the canary
    early. A run that fails (a query died, its checkpoints kept failing, the embedded broker
    did not start) is a failed canary, not an error.

    Raises:
        StorageError: the checkpoint store cannot be read or written.
    """
    before = set(pipeline.cuts.completed_ids())
    spec_path = pipeline.spec_path
    verifier = _Verifier(pipeline, spark, before)
    try:
        with ExitStack() as stack:
            _, servers = stack.enter_context(channel_servers(pipeline))
            driver = open_driver(pipeline, channel_servers=servers, spark=spark, hold_commits=True)
            bounded = _bounded(driver)
            driver.hold(stack.enter_context(driver.lease()))
            driver.run(checkpoints=checkpoints, until_exhausted=bounded,
                       on_tick=lambda: verifier.poll(driver.keeper.completed_count), until=verifier.failed)
    except BarrierflowError as exc:
        verifier.close()
        done = sorted(set(pipeline.cuts.completed_ids()) - before)
        return CanaryOutcome(done, failure=f"the canary run of {spec_path} failed: {exc}")
    except BaseException:
        verifier.close()
        raise
    reports, failure = verifier.finish()
    done = sorted(set(pipeline.cuts.completed_ids()) - before)
    if not done:
        return CanaryOutcome(done, failure=f"the canary run of {spec_path} completed no {pipeline.cut_noun}")
    if failure:
        return CanaryOutcome(done, reports, failure)
    log.info("pipeline %s: canary %ss %s passed deep verification", pipeline.name, pipeline.cut_noun, done)
    return CanaryOutcome(done, reports)
