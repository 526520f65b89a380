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
as ``barrierflow verify`` stores it. Without an expectation suite the state is restored and read
but not checked: the outcome says "no expectation suite: deep verification skipped"
(:attr:`CanaryOutcome.deep_verification`), never that the cuts passed it.

Once every cut passed, the canary's output is compared with a batch recomputation
(:func:`compare_canary_output`, unless ``compare`` is off): for every Parquet output of the
pipeline (its sink, or each final stage's), what the lake will show once the held epochs are
committed (the committed ``part-*`` files and the held epochs' write-ahead files the ledger's
PRECOMMITTED transactions name, read by Spark where they lie) against the spec's
transformation run in batch over the source's records (a final stage's upstream stages
replayed), for every window that ends before the watermark of the canary's last cut: the rules
of ``barrierflow recompute`` (:mod:`barrierflow.batch.recompute`), with that cut trusted. The
source's records are the generator's of that event-time range, or a Kafka source's in exactly
the offset ranges the canary's checkpoints cover (from the barrier offsets of the cut it was
restored from to those of its last cut, read with Spark's Kafka batch source and decoded as the
stream decodes them). A difference fails the canary. An output the comparison cannot be made for
(no Parquet output, an output mode other than append, no event time, a final stage behind a
cycle or a non-append stage, the ``batch`` columns missing from the output, a Kafka range no
longer retained) is reported as ``not compared``, with why in one line.

What happens to the held epochs is the caller's decision (:mod:`barrierflow.upgrade.steps`): a
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
from typing import TYPE_CHECKING, Any

from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.pipeline.words import words
from barrierflow.runtime.run_driver import channel_servers, open_driver
from barrierflow.verification.report import NO_SUITE, CheckStatus
from barrierflow.verification.runner import verify_checkpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.pipeline.model import OpenedPipeline, Stage
    from barrierflow.runtime.pipeline_runner import PipelineRunner
    from barrierflow.verification.report import VerificationReport

log = logging.getLogger(__name__)

__all__ = ["CanaryOutcome", "OutputComparison", "compare_canary_output", "run_canary"]


@dataclass(frozen=True)
class CanaryOutcome:
    """What the canary did.

    Attributes:
        checkpoints: the ids of the cuts it completed, ascending.
        reports: the verification reports of every stage's checkpoint of them (cut by cut).
        failure: the first failed check (``checkpoint N of stage S failed the <check> check:
            <message>``, or ``the stream-vs-batch comparison of ... failed: <differences>``),
            or why the run itself failed; "" when it passed.
        comparisons: the stream-vs-batch comparison of each output (:func:`compare_canary_output`;
            empty when it was not run: verification failed first, or ``compare`` was off).
    """

    checkpoints: list[int]
    reports: list[VerificationReport] = field(default_factory=list)
    failure: str = ""
    comparisons: list[OutputComparison] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failure

    @property
    def verified(self) -> list[int]:
        """The cuts every stage's checkpoint of which passed."""
        return [c for c in self.checkpoints
                if all(r.passed for r in self.reports if r.checkpoint_id == c)]

    @property
    def deep_verification(self) -> str:
        """One line: what the deep verification of the verified cuts checked. ``passed deep
        verification`` only when an expectation suite checked every stage's state; else ``no
        expectation suite: deep verification skipped`` and where the suite was looked for (the
        structural checks and the state read ran and passed), or which stages hold no state."""
        skipped = [c for r in self.reports for c in r.checks
                   if c.name == "expectation" and c.status is CheckStatus.SKIPPED]
        if not self.reports:
            return "no checkpoint was verified"
        missing = sorted({c.file or c.message for c in skipped if c.message.startswith(NO_SUITE)})
        if missing:
            return (f"{NO_SUITE}: deep verification skipped (looked for {', '.join(missing)}; the structural checks "
                    "and the state read passed)")
        if skipped:
            return ("deep verification: the expectation suite checked the state of the stages that hold state ("
                    "others hold none)")
        return "passed deep verification"


@dataclass(frozen=True)
class OutputComparison:
    """The stream-vs-batch comparison of one Parquet output of a canary (or why none was made).

    Attributes:
        output: what was compared: ``sink <name>`` (one stage) or ``stage <name> (sink <name>)``,
            or ``no Parquet output``.
        ran: whether the comparison was made; when not, ``reason`` says why.
        passed: no differing row (True when it did not run: nothing failed).
        checkpoint_id: the cut whose watermark closes the range (the canary's last).
        held_epochs: the held epochs (checkpoint ids) whose write-ahead files were read.
        start, end: the range of windows compared (``start`` None: from the first record).
        stream_rows, batch_rows: rows compared on each side.
        differences: how many rows differ (``first``: the first ones, described).
        seconds: how long it took.
    """

    output: str
    ran: bool
    reason: str = ""
    passed: bool = True
    checkpoint_id: int | None = None
    held_epochs: list[int] = field(default_factory=list)
    start: str | None = None
    end: str | None = None
    stream_rows: int = 0
    batch_rows: int = 0
    differences: int = 0
    first: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"output": self.output, "ran": self.ran, "reason": self.reason or None,
                "verdict": ("not compared" if not self.ran else "matched" if self.passed else "differed"),
                "checkpoint_id": self.checkpoint_id, "held_epochs": self.held_epochs,
                "range": {"start": self.start, "end": self.end} if self.ran else None,
                "stream_rows": self.stream_rows, "batch_rows": self.batch_rows,
                "differences": self.differences, "first_differences": self.first,
                "seconds": round(self.seconds, 3)}


def comparison_summary(comparisons: list[OutputComparison], *, skipped: bool = False) -> dict[str, Any]:
    """The comparison as the upgrade's result and record show it: ``ran`` (for some output),
    ``verdict`` (``matched``, ``differed``, ``not compared`` or ``skipped``), ``reason`` (why
    not compared, one line per output, else None), the rows compared and differing over every
    output (``stream_rows``, ``batch_rows``, ``differences``) and ``outputs``
    (:meth:`OutputComparison.as_dict` each)."""
    if skipped:
        return {"ran": False, "verdict": "skipped", "reason": "--no-canary-compare", "outputs": []}
    ran = [c for c in comparisons if c.ran]
    verdict = ("not compared" if not ran else "matched" if all(c.passed for c in ran) else "differed")
    reason = "; ".join(f"{c.output}: {c.reason}" for c in comparisons if not c.ran) or None
    return {"ran": bool(ran), "verdict": verdict, "reason": reason,
            "stream_rows": sum(c.stream_rows for c in ran), "batch_rows": sum(c.batch_rows for c in ran),
            "differences": sum(c.differences for c in ran), "outputs": [c.as_dict() for c in comparisons]}


def _not_applicable(pipeline: OpenedPipeline, stage: Stage) -> str:
    """Why the comparison cannot be made for ``stage``'s Parquet output ("" when it can)."""
    from barrierflow.batch.recompute import comparison_obstacle
    from barrierflow.batch.source_records import not_rereadable

    spec = stage.spec
    if spec.transformation.output_mode != "append":
        return comparison_obstacle(spec)
    if obstacle := pipeline.replay_obstacle(stage.name):
        return obstacle
    if why := comparison_obstacle(spec):
        return why
    for each in pipeline.upstream(stage.name):
        if each.source_type != "channel" and (why := not_rereadable(each.spec)):
            return why
    return ""


def compare_canary_output(pipeline: OpenedPipeline, spark: SparkSession, checkpoint_id: int,
                          since: int | None, rebuilt: frozenset[str] = frozenset()) -> list[OutputComparison]:
    """The stream-vs-batch comparison of the canary's output up to its cut ``checkpoint_id``
    (module docstring), over the windows the canary computed entirely: those that start after
    the newest event time read up to the cut ``since`` it was restored from (None: from the first
    record; a cut that records no event time: not compared) and end before the watermark
    of ``checkpoint_id`` (the old spec's windows are not compared: a new spec may mean to compute
    them differently, and the range stays the canary's, however long the pipeline ran). The
    output of a stage in ``rebuilt`` (its state rebuilt from its input by the upgrade,
    :mod:`barrierflow.upgrade.rebuild`) is compared over every window that ends after the
    watermark of ``since`` instead, from the first record: each holds all its records. One
    entry per Parquet output of ``pipeline`` (a single stage's sink, or each final stage's); a
    pipeline without one gets one entry saying so (``ran`` False), and so does an output with no
    window in the range (a canary of more checkpoints covers more event time). Each
    report is stored in the output's checkpoint store at
    :data:`~barrierflow.batch.recompute.CANARY_RECOMPUTE_REPORT_KEY`. Only the differing rows
    (at most :data:`~barrierflow.batch.recompute.MAX_LISTED`) reach the driver.

    Raises:
        BarrierflowError: the comparison could not be made (a source that cannot be re-read,
            a store that cannot be read): the canary fails with it.
    """
    import time
    from functools import partial

    from barrierflow.batch.recompute import (
        MAX_IN_MESSAGE,
        OutputColumnsError,
        Recomputation,
        compare_held_output,
        kafka_sources,
    )
    from barrierflow.batch.source_records import NoEventTimeError, NotComparableError
    from barrierflow.batch.stage_replay import kafka_source_stages, replay_final_stage
    from barrierflow.pipeline.final_stages import batch_side, parquet_outputs

    outputs = parquet_outputs(pipeline.spec)
    if not outputs:
        sinks = ", ".join(f"{k.name} ({k.type})" for s in pipeline.stages if s.output is None for k in s.spec.sinks)
        return [OutputComparison("no Parquet output", ran=False, reason=(
            f"pipeline {pipeline.name} writes no Parquet output ({sinks}): the batch side compares a Parquet lake"))]
    stages = {s.name: s for s in pipeline.stages}
    results = []
    for out in outputs:
        stage = stages[out.stage] if out.stage is not None else pipeline.stages[0]
        label = f"sink {out.sink.name}" if out.stage is None else f"stage {out.stage} (sink {out.sink.name})"
        why = _not_applicable(pipeline, stage)
        if why:
            results.append(OutputComparison(label, ran=False, reason=why))
            continue
        side = batch_side(pipeline.spec, out.stage, pipeline.spec_path)
        replay: Recomputation | None = None
        kafka = kafka_sources(side.spec, stage.store)
        if side.pipeline is not None and side.stage is not None:
            replay = partial(replay_final_stage, spark, side.pipeline, side.stage_specs, side.stage,
                             spec_path=pipeline.spec_path)
            kafka = kafka_source_stages(side.pipeline, side.stage_specs, side.stage)
        began = time.perf_counter()
        try:
            whole = stage.name in rebuilt and since is not None
            report, held = compare_held_output(spark, side.spec, stage.store, checkpoint_id,
                                               since=None if whole else since, ends_after=since if whole else None,
                                               tag="upgrade-canary", spec_path=pipeline.spec_path, recompute=replay,
                                               kafka=kafka)
        except (OutputColumnsError, NoEventTimeError, NotComparableError) as exc:
            results.append(OutputComparison(label, ran=False, reason=" ".join(str(exc).split())))
            continue
        if report.batch_rows == 0 and report.stream_rows == 0:
            span = (f"ending after {report.ends_after}, before {report.end}" if report.ends_after is not None
                    else f"both started and closed within the canary's event time [{report.start}, {report.end})")
            results.append(OutputComparison(label, ran=False, reason=(
                f"no window {span}: nothing to compare; a canary of more checkpoints (--canary-checkpoints) covers "
                "more")))
            continue
        results.append(OutputComparison(
            label, ran=True, passed=report.passed, checkpoint_id=checkpoint_id, held_epochs=held.epochs,
            start=report.start, end=report.end, stream_rows=report.stream_rows, batch_rows=report.batch_rows,
            differences=report.difference_count, first=[d.describe() for d in report.differences[:MAX_IN_MESSAGE]],
            seconds=time.perf_counter() - began))
    return results


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

    def waiting(self) -> bool:
        """Whether a submitted cut's verification has not ended yet."""
        return any(not f.done() for f in self._futures)

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


class _VerifiedInput:
    """The canary reads no input beyond a cut not yet verified: every tick, once the verifier
    has a cut to verify, the source stages admit no new input (barriers only) and no new cut is
    triggered, until its verification ended (the next cut then comes a full checkpoint interval
    of input later, as in any run: the canary's cuts cover as much input as without the wait);
    so the first verdict comes as soon as the
    verification alone takes (it does not share the cores with the canary's next batches), and
    a failing canary has read nothing beyond its first failed cut."""

    _UNSET = -1

    def __init__(self, driver: PipelineRunner, verifier: _Verifier) -> None:
        self._driver, self._verifier = driver, verifier
        self._limit: int | None = self._UNSET
        self._holding = False

    def tick(self) -> None:
        keeper = self._driver.keeper
        self._verifier.poll(keeper.completed_count)
        cutter = keeper.cutter
        if cutter is None:
            return
        if self._limit == self._UNSET:
            self._limit = cutter.trigger_limit
        waiting = self._verifier.waiting()
        # at most one cut beyond the verified ones: set before a cut completes, so that the tick
        # in which it completes triggers no next one before its verification was submitted
        allowed = keeper.completed_count + (0 if waiting else 1)
        cutter.trigger_limit = allowed if self._limit is None else min(self._limit, allowed)
        if waiting and not self._holding:
            self._holding = True
            self._driver.barriers_only(True)
        elif not waiting and self._holding:
            self._holding = False
            self._driver.barriers_only(False)
            cutter.trigger_rule.started(cutter.monotonic())  # the next cut after a full interval of input


def run_canary(pipeline: OpenedPipeline, spark: SparkSession, checkpoints: int, *,
               compare: bool = True, rebuilt: frozenset[str] = frozenset()) -> CanaryOutcome:
    """Run ``pipeline`` (restored for its spec, not running) until ``checkpoints`` cuts completed
    (or, for bounded sources, its input ended), commit nothing of its final sinks, and
    deep-verify every stage's checkpoint of every cut it completed (module docstring), each
    before the canary reads more input (:class:`_Verifier`, :class:`_VerifiedInput`); the first
    failed check stops the canary early. Once all passed, and with ``compare``, the canary's
    output up to its last cut is compared with the batch recomputation
    (:func:`compare_canary_output`; ``rebuilt``: the stages whose state the upgrade rebuilt from
    their input); a difference, or a comparison that cannot be made, fails the canary. A run
    that fails (a query died, its checkpoints kept failing, the embedded broker did not start)
    is a failed canary, not an error.

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
            gate = _VerifiedInput(driver, verifier)
            driver.run(checkpoints=checkpoints, until_exhausted=bounded, on_tick=gate.tick, until=verifier.failed)
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
        return CanaryOutcome(done, failure=f"the canary run of {spec_path} completed no {words(pipeline).cut_noun}")
    if failure:
        return CanaryOutcome(done, reports, failure)
    log.info("pipeline %s: canary %ss %s: %s", pipeline.name, words(pipeline).cut_noun, done,
             CanaryOutcome(done, reports).deep_verification)
    if not compare:
        return CanaryOutcome(done, reports)
    try:
        comparisons = compare_canary_output(pipeline, spark, done[-1], max(before, default=None), rebuilt)
    except BarrierflowError as exc:
        return CanaryOutcome(done, reports, f"the stream-vs-batch comparison of the canary's output up to "
                                            f"{words(pipeline).cut_noun} {done[-1]} could not be made: {exc}")
    for c in comparisons:
        if c.ran and not c.passed:
            listed = "\n  ".join(c.first)
            more = f"\n  ... and {c.differences - len(c.first)} more" if c.differences > len(c.first) else ""
            return CanaryOutcome(done, reports, (
                f"the stream-vs-batch comparison of {c.output} failed: {c.differences} output rows of the canary's "
                f"output (committed, and held in epochs {c.held_epochs}) differ from the batch recomputation for "
                f"windows in [{c.start or 'first record'}, {c.end}) (stream {c.stream_rows} rows, batch "
                f"{c.batch_rows}; {words(pipeline).cut_noun} {c.checkpoint_id}):\n  {listed}{more}"), comparisons)
        log.info("pipeline %s: canary output of %s: %s", pipeline.name, c.output,
                 f"{c.stream_rows} rows equal the batch recomputation for windows before {c.end}" if c.ran
                 else f"not compared: {c.reason}")
    return CanaryOutcome(done, reports, comparisons=comparisons)
