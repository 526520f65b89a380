"""The one stage runner: one stage's Structured Streaming query and checkpoint coordinator,
driven a tick at a time, whatever the pipeline's shape.

The one run loop (:meth:`~barrierflow.runtime.pipeline_runner.PipelineRunner.run`, every stage
of a run in one driver, one stage included) and a stage in a process of its own (``run
--processes``, :func:`~barrierflow.runtime.stage_processes.run_stage`) each drive a
:class:`StageRunner` on a :class:`~barrierflow.pipeline.model.Stage`, so what a stage does at
run time is written once:

* its coordinator (:meth:`StageRunner.start_coordinator`): the stage's checkpoint settings,
  per-partition event times and the event-time summary in its manifests (with
  ``event_time``), the alignment records of a source kind that aligns (channel inputs);
* its query (:meth:`StageRunner.start_query`), built by the one query builder
  (:func:`~barrierflow.runtime.stage_query.start_stage_query`) with the source kind's run-time
  options and the stage's micro-batch writer (:func:`~barrierflow.sinks.factory.micro_batch_writer`:
  a channel writer, a two-phase-commit stager, or none); started again, at most
  :data:`START_RETRIES` times, when it died before planning a batch because Spark's Python
  worker did not connect back (:meth:`StageRunner.restart_failed_start`); refused before it
  starts when the spec changed what the stage's saved state was built with
  (:func:`~barrierflow.runtime.state_compat.check_state_compatible`);
* each tick (:meth:`StageRunner.tick`): the coordinator's tick and, for each newly committed
  micro-batch, the late-row counts of the event-time tracker;
* its end (:meth:`StageRunner.stop`): the query stopped, in-flight uploads given a timeout, the
  sinks' queued commits and aborts run, a failure among them that no tick reported raised (the
  commit of the run's last checkpoint), the channel writer's producer closed.

What differs between shapes is the run's cut keeper
(:class:`~barrierflow.runtime.pipeline_runner.CutKeeper`): a single-stage run's coordinator
triggers barriers and commits its sinks on completion; a stage of several never triggers
(barriers come from the pipeline coordinator or in-band) and commits when the global checkpoint
completes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from barrierflow.barriers.alignment.record import read_alignment
from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.errors import SinkCommitFailedError
from barrierflow.checkpointing.manifest import EventTimeSummary
from barrierflow.errors import JobFailedError
from barrierflow.keyed_state.figures import KeyCounters, KeyFigures
from barrierflow.lease import FencedOffError
from barrierflow.runtime.event_time import EventTimeTracker
from barrierflow.runtime.freshness import FreshnessTracker
from barrierflow.runtime.stage_query import build_stage_frame, start_stage_query
from barrierflow.runtime.state_compat import check_state_compatible
from barrierflow.sources.registry import SourceKind, StageRun, kind_named
from barrierflow.spark import commit_log, offset_log
from barrierflow.spark.cluster import check_work_dir_shared
from barrierflow.spark.query_tasks import wait_for_tasks
from barrierflow.spark.session import shuffle_partitions
from barrierflow.state.live_keys import keys_in_state
from barrierflow.storage.object_dir import PollThrottle

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.lease import FenceToken
    from barrierflow.pipeline.model import Stage
    from barrierflow.spec.models import StageSpec
    from barrierflow.transactions.committer import SinkCommitter
    from barrierflow.workdir.layout import JobLayout

log = logging.getLogger(__name__)

#: How often a query that died before its first batch (its Python worker did not connect
#: back in time) is started again within one run.
START_RETRIES = 2
#: How long :meth:`StageRunner.start_query` waits for the query to initialise its source.
START_WAIT_SECONDS = 120.0
#: How long a stop waits for the micro-batch in flight to end before interrupting it
#: (:meth:`StageRunner.stop_query`).
STOP_BETWEEN_BATCHES_SECONDS = 10.0
#: How long a stop waits for the tasks of a micro-batch it interrupted to end
#: (:meth:`StageRunner.stop_query`; a RocksDB commit runs on for seconds after its kill).
STOP_TASKS_SECONDS = 60.0
#: How often :meth:`StageRunner.check` asks the JVM whether the query still runs (one py4j
#: round trip; the run loop ticks every few milliseconds).
CHECK_SECONDS = 0.2
#: How often the stop's wait looks at the query's status.
STOP_POLL_SECONDS = 0.02
#: How often a sink commit waiting for its epoch's arrivals asks the query's progress (one py4j
#: round trip) between two committed batches.
FRESHNESS_POLL_SECONDS = 0.2


class StageRunner:
    """One stage of a run (module docstring). ``label`` names the stage in messages (``pipeline
    demo``, ``stage b of pipeline shop``)."""

    def __init__(self, stage: Stage, *, label: str, pipeline: str | None = None) -> None:
        self.stage = stage
        self.label = label
        #: The pipeline's name (messages name it with the stage's; default: the stage's spec's name).
        self.pipeline = pipeline if pipeline is not None else stage.spec.name
        self.kind: SourceKind = kind_named(stage.source_type)
        self.coordinator: CheckpointCoordinator | None = None
        self.query: StreamingQuery | None = None
        #: The micro-batch writer of the running query (a channel writer is closed by :meth:`stop`).
        self.writer: Callable[[Any, int], None] | None = None
        self.event_time = (EventTimeTracker(stage.spec, str(stage.layout.control))
                           if stage.spec.event_time is not None else None)
        #: The freshness of the stage's committed output in this run (:mod:`barrierflow.runtime.freshness`).
        self.freshness = FreshnessTracker()
        #: The keys the stage's keyed functions started and expired in this run (made with the
        #: query's DataFrame; :mod:`barrierflow.keyed_state.figures`).
        self.key_counters: KeyCounters | None = None
        self._fresh_poll = 0.0
        #: Query starts repeated in this run because a Python worker did not connect back.
        self.start_retries = 0
        self.planned_at_start = 0
        #: The newest micro-batch whose commit this runner has seen (None: none yet).
        self.latest_batch: int | None = None
        self._commit_poll: PollThrottle | None = None
        self._next_check = 0.0
        self._start: Callable[[], StreamingQuery] | None = None
        #: The query DataFrame :meth:`check_state` checked, for the next :meth:`start_query`.
        self._checked: DataFrame | None = None

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def spec(self) -> StageSpec:
        """The stage's derived single-stage spec."""
        return self.stage.spec

    @property
    def layout(self) -> JobLayout:
        return self.stage.layout

    @property
    def store(self) -> CheckpointStore:
        return self.stage.store

    # -- the coordinator -------------------------------------------------------------------
    def start_coordinator(self, *, sinks: list[SinkCommitter], attempt: int, spark_version: str,
                          commit_on_completion: bool = True) -> CheckpointCoordinator:
        """Build and start the stage's checkpoint coordinator over ``sinks`` (see the module
        docstring; ``commit_on_completion`` False: sinks commit when the caller says so, for
        a stage of several when the global checkpoint completes)."""
        spec, layout = self.stage.spec, self.stage.layout
        self.stage.layout.work_dir.mkdir(parents=True, exist_ok=True)
        control_dir = layout.control
        alignment = (lambda n: read_alignment(control_dir, n)) if self.kind.aligned else None
        coordinator = CheckpointCoordinator(
            pipeline=spec.name, options=spec.checkpoint, store=self.stage.store,
            spark_checkpoint_dir=layout.spark_checkpoint, snapshot_dir=layout.snapshots,
            control=ControlChannel(control_dir), source_names=[spec.source.name], sinks=sinks,
            attempt=attempt, spark_version=spark_version, alignment=alignment,
            commit_on_completion=commit_on_completion, label=self.label, event_times=self._event_times,
            event_time_summary=self._event_time_summary if self.event_time is not None else None)
        self.coordinator = coordinator
        coordinator.start()
        return coordinator

    def _event_times(self, _source_name: str, partitions: dict[str, int]) -> dict[str, datetime | None]:
        spec = self.stage.spec
        return self.kind.event_times(spec.source, self.stage.layout.event_time_uri(spec), partitions)

    def _event_time_summary(self, first_batch: int, batch: int, offsets: dict[str, dict[str, int]],
                            times: dict[str, dict[str, datetime | None]]) -> EventTimeSummary:
        assert self.event_time is not None
        return self.event_time.summary(first_batch, batch, offsets, times, query=self.query)

    # -- the query -------------------------------------------------------------------------
    def check_state(self, spark: SparkSession, *, spec_path: str, run: StageRun) -> None:
        """Build the stage's query DataFrame without starting it and refuse it over saved state
        it cannot honour (:func:`~barrierflow.runtime.state_compat.check_state_compatible`); the
        next :meth:`start_query` starts that DataFrame. A run with several stages in this
        driver checks every stage before it starts any.

        Raises:
            IncompatibleStateError: the spec changed what the stage's state was built with.
            SpecError: the transformation cannot be loaded.
        """
        from barrierflow.runtime.session import register_data_sources

        register_data_sources(spark)
        stage = self.stage
        frame = build_stage_frame(spark, stage.spec, stage.layout, spec_path=spec_path, source_format=self.kind.format,
                                  extra_options=self.kind.run_options(stage.spec, run), read_input=self.kind.read,
                                  observe_arrival=True, arrival_column=self.kind.arrival_column,
                                  key_counters=self._key_counters(spark))
        self._refuse_incompatible(frame)
        self._checked = frame

    def _key_counters(self, spark: SparkSession) -> KeyCounters:
        """The run's counters of the keys the stage's keyed functions start and expire (made once)."""
        if self.key_counters is None:
            self.key_counters = KeyCounters.on(spark)
        return self.key_counters

    def key_figures(self) -> KeyFigures | None:
        """Keys the stage's keyed functions started and expired in this run (None: it has none)."""
        return self.key_counters.figures() if self.key_counters is not None else None

    def _refuse_incompatible(self, frame: DataFrame) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        from barrierflow.sinks.factory import check_table_sink

        stage = self.stage
        check_state_compatible(frame, stage.layout.spark_checkpoint, pipeline=self.pipeline, stage=stage.name,
                               shuffle_partitions=shuffle_partitions(stage.spec.spark),
                               state_store=stage.spec.spark.state_store)
        check_table_sink(stage.spec, stage.layout, to_arrow_schema(frame.schema, timezone="UTC"))

    def start_query(self, spark: SparkSession, *, spec_path: str, run: StageRun, fence: FenceToken | None,
                    check_work_dir: bool = True, wait: bool = True) -> StreamingQuery:
        """Start the stage's query (module docstring): the reader gets the source kind's
        options for ``run``, each micro-batch goes to the stage's writer (two-phase-commit
        stagers check ``fence``). The DataFrame :meth:`check_state` checked, else one built and
        checked now, before anything starts. With ``check_work_dir``, first check that a
        cluster's executors see the work dir; with ``wait``, return once the query initialised
        its source (:meth:`wait_started`).

        Raises:
            IncompatibleStateError: the spec changed what the stage's state was built with.
        """
        from barrierflow.runtime.session import register_data_sources
        from barrierflow.sinks.factory import micro_batch_writer

        register_data_sources(spark)
        stage, extra = self.stage, self.kind.run_options(self.stage.spec, run)
        checked, self._checked = self._checked, None
        if checked is None:
            frame = build_stage_frame(spark, stage.spec, stage.layout, spec_path=spec_path,
                                      source_format=self.kind.format, extra_options=extra, read_input=self.kind.read,
                                      observe_arrival=True, arrival_column=self.kind.arrival_column,
                                      key_counters=self._key_counters(spark))
            self._refuse_incompatible(frame)
        else:
            frame = checked
        if check_work_dir and not stage.layout.on_object_storage:  # on object storage every node reaches it
            check_work_dir_shared(spark, self.stage.layout.work_dir)

        def start(first: DataFrame | None = None) -> StreamingQuery:
            self.close_writer()  # a restart: the dead query's producer is no longer needed
            if self.key_counters is not None and self.key_counters.attached:
                self.key_counters.restarted(keys_in_state(spark, stage.layout.spark_checkpoint))
            self.writer = micro_batch_writer(stage.spec, stage.layout, fence=fence, channel=stage.output,
                                             attempt=run.attempt)
            return start_stage_query(spark, stage.spec, stage.layout, spec_path=spec_path,
                                     source_format=self.kind.format, batch_writer=self.writer, extra_options=extra,
                                     frame=first, read_input=self.kind.read, observe_arrival=True,
                                     arrival_column=self.kind.arrival_column)

        self._start = start
        self.planned_at_start = len(offset_log.planned_batches(stage.layout.spark_checkpoint))
        self.start_retries = 0
        self.query = start(frame)
        if wait:
            self.wait_started()
        return self.query

    def wait_started(self, timeout: float = START_WAIT_SECONDS) -> None:
        """Wait until the query initialised its source (its planner's Python worker is up), so
        stages do not start their Python workers all at once: on a loaded machine Spark gives a
        worker only a few seconds to connect back. Returns early if the query died (the next
        :meth:`check` reports it) and after ``timeout`` seconds in any case."""
        assert self.query is not None
        deadline = time.monotonic() + timeout
        while self.query.isActive and time.monotonic() < deadline:
            if not str(self.query.status.get("message", "")).startswith("Initializing"):
                return
            time.sleep(0.02)

    def restart_failed_start(self, exc: BaseException | None) -> bool:
        """Start the query again when it died before planning any batch because Spark's Python
        planner worker did not connect back in time (Spark gives it a fixed few seconds; seen
        on overloaded machines). Safe only then: this run planned no batch, so nothing is
        replayed, written ahead or written twice. At most :data:`START_RETRIES` times per run; False
        otherwise."""
        planned = len(offset_log.planned_batches(self.stage.layout.spark_checkpoint))
        if exc is None or "connect back" not in str(exc) or planned != self.planned_at_start \
                or self.start_retries >= START_RETRIES or self._start is None:
            return False
        self.start_retries += 1
        log.warning("%s: the query's Python worker did not connect back before its first batch; starting the "
                    "query again (%d/%d)", self.label, self.start_retries, START_RETRIES)
        self.query = self._start()
        return True

    def check(self, fence: FenceToken | None = None) -> None:
        """Return while the query runs (or was started again, :meth:`restart_failed_start`):
        the query is asked at most every :data:`CHECK_SECONDS`, so a query that stopped is
        reported within that long of the first check after.

        Raises:
            FencedOffError: ``fence`` was taken over (a fenced-off write-ahead write stopped the query).
            JobFailedError: the query stopped, naming its first error line.
        """
        assert self.query is not None
        now = time.monotonic()
        if now < self._next_check:  # a tick is milliseconds: the JVM is asked every CHECK_SECONDS
            return
        if self.query.isActive:
            self._next_check = now + CHECK_SECONDS
            return
        exc = self.query.exception()
        if self.restart_failed_start(exc):
            return
        if fence is not None:
            fence.check("doing anything more")
        first = str(exc).splitlines()[0] if exc is not None and str(exc) else (repr(exc) if exc else "")
        raise JobFailedError(f"the streaming query of {self.label} stopped" + (f": {first}" if first else ""))

    # -- each tick -------------------------------------------------------------------------
    def tick(self) -> bool:
        """The coordinator's tick; then, when a new micro-batch committed, the event-time
        tracker folds in its late-row count. Returns whether a new micro-batch committed
        (:attr:`latest_batch`)."""
        assert self.coordinator is not None
        self.coordinator.tick()
        self.collect_freshness()
        if self._commit_poll is None:
            self._commit_poll = PollThrottle(self.stage.layout.spark_checkpoint)
        if not self._commit_poll.due():  # on object storage: a LIST at most every LOG_POLL_SECONDS
            return False
        committed = commit_log.latest_committed(self.stage.layout.spark_checkpoint)
        if committed is None or committed == self.latest_batch:
            return False
        self.latest_batch = committed
        if self.query is not None:
            self.freshness.poll(self.query)
            if self.event_time is not None:
                self.event_time.poll(self.query)
        return True

    def collect_freshness(self, *, final: bool = False) -> None:
        """Fold the sink commits the coordinator's notifier recorded into :attr:`freshness`
        (``final``: after the query stopped and the sinks drained, every batch's progress read
        first)."""
        if self.coordinator is None:
            return
        if self.query is not None and (final or (self.freshness.waiting and time.monotonic() >= self._fresh_poll)):
            # A commit waiting for its barrier batch's progress event (posted after the batch's
            # commit; the tick polls after the next one): asked at most every FRESHNESS_POLL_SECONDS.
            self._fresh_poll = time.monotonic() + FRESHNESS_POLL_SECONDS
            self.freshness.poll(self.query, full=final)
        new = self.freshness.collect(self.coordinator.notifier.commits, self.coordinator.completed)
        for checkpoint_id in sorted({f.checkpoint_id for f in new}):  # beside the checkpoint, for the page
            sinks = {f.sink: f.as_dict() for figures in self.freshness.figures.values() for f in figures
                     if f.checkpoint_id == checkpoint_id}
            try:
                self.stage.store.put_freshness(checkpoint_id, sinks)
            except Exception as exc:  # report data: never stops the job
                log.warning("%s: storing the freshness of checkpoint %d failed: %s", self.label, checkpoint_id, exc)

    # -- the end ---------------------------------------------------------------------------
    def stop_query(self) -> None:
        """Stop the query (its last late-row counts folded in first) between two micro-batches,
        with no batch planned and not committed, when it can (:meth:`_quiesce`; a source
        whose batches Spark's connector plans: :meth:`_wait_between_batches`); a failure to
        stop is logged. Returns once the tasks of a micro-batch the stop interrupted ended too
        (at most :data:`STOP_TASKS_SECONDS`; :mod:`barrierflow.spark.query_tasks`), so the
        driver's next query does not wait behind them; tasks still running then are logged."""
        if self.query is None:
            return
        if self.event_time is not None:
            self.event_time.poll(self.query)
        try:
            if self.kind.plans_batches:
                self._quiesce(STOP_BETWEEN_BATCHES_SECONDS)
            else:
                self._wait_between_batches(STOP_BETWEEN_BATCHES_SECONDS)
        except Exception as exc:  # the wait is a courtesy: the query is stopped whatever it raised
            log.warning("%s: waiting for the micro-batch in flight raised %s; stopping it now", self.label, exc)
        try:
            self.query.stop()
        except Exception as exc:
            log.warning("%s: stopping the query raised %s", self.label, exc)
        self._wait_for_interrupted_tasks()

    def _wait_for_interrupted_tasks(self) -> None:
        """Wait for the stopped query's tasks to end (:meth:`stop_query`)."""
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is None or self.query is None:
            return
        try:
            left = wait_for_tasks(context, str(self.query.runId), limit=STOP_TASKS_SECONDS)
        except Exception as exc:  # the wait is a courtesy to the next query: never fail a stop on it
            log.warning("%s: looking for the stopped query's running tasks raised %s", self.label, exc)
            return
        if left:
            log.warning("%s: %d task(s) of the stopped query still run %.0f s after the stop (a call that does not "
                        "look at Spark's kill request); the driver's next query shares the cores with them",
                        self.label, left, STOP_TASKS_SECONDS)

    def _quiesce(self, limit: float) -> None:
        """Hold the stage's input (:meth:`ControlChannel.set_hold`: from the next trigger on,
        the planner admits no new data), then wait at most ``limit`` seconds until no trigger
        is active and every batch in Spark's offset log is in its commit log, on two looks in
        a row :data:`STOP_POLL_SECONDS` apart.

        ``query.stop()`` interrupts the stream thread wherever it is. Inside a micro-batch it
        loses nothing but the batch's work (the batch is not committed; the next run replays
        it), but inside the planning step it can interrupt the atomic write of the batch's
        offset-log entry, and Spark then neither renames nor deletes the entry's temp file
        (``offsets/.<V>.<uuid>.tmp``) and leaves its descriptor open in the JVM. With the input
        held, the trigger in flight when the hold was set is the last to plan new data: once
        it ended and its batch committed, a trigger plans at most a batch of no data (a
        watermark's eviction), which the second look catches. The hold is the run's last act
        on the control channel: the next run's coordinator resets it
        (:meth:`ControlChannel.reset`). Past ``limit`` (a batch longer than that), the query
        is stopped mid-batch."""
        assert self.query is not None
        ControlChannel(self.layout.control).set_hold(True)
        deadline = time.monotonic() + limit
        calm = 0
        while self.query.isActive:
            if not self.query.status.get("isTriggerActive") and self._planned_all_committed():
                calm += 1
                if calm == 2:
                    return
            else:
                calm = 0
            if time.monotonic() >= deadline:
                log.warning("%s: the micro-batch in flight did not end within %.0f s of the stop; stopping it now",
                            self.label, limit)
                return
            time.sleep(STOP_POLL_SECONDS)

    def _planned_all_committed(self) -> bool:
        """Whether Spark's commit log holds every batch its offset log planned."""
        checkpoint = self.stage.layout.spark_checkpoint
        planned = offset_log.planned_batches(checkpoint)
        return not planned or commit_log.latest_committed(checkpoint) == planned[-1]

    def _wait_between_batches(self, limit: float) -> None:
        """For a source whose batches Spark's connector plans (nothing barrierflow can hold):
        wait at most ``limit`` seconds for the micro-batch in flight now (Spark's
        ``isTriggerActive``) to end: until the query's progress names a newer batch, or no
        trigger is active. The next batch may start at once (trigger ``0s`` with data waiting)
        and is stopped as it starts (see :meth:`_quiesce` for what that can leave); a batch
        longer than ``limit`` is stopped mid-batch."""
        assert self.query is not None
        if not (self.query.isActive and self.query.status.get("isTriggerActive")):
            return
        before = _batch_id(self.query.lastProgress)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            time.sleep(STOP_POLL_SECONDS)
            if not (self.query.isActive and self.query.status.get("isTriggerActive")):
                return
            if _batch_id(self.query.lastProgress) > before:
                return

    def close_writer(self) -> None:
        close = getattr(self.writer, "close", None)
        if close is not None:
            close()

    def stop(self, timeout: float, *, failing: bool = False) -> None:
        """Stop the query, drain the coordinator (:meth:`drain`, which raises what it raises),
        close the writer (in every case)."""
        self.stop_query()
        try:
            self.drain(timeout, failing=failing)
        finally:
            self.close_writer()

    def drain(self, timeout: float, *, failing: bool = False) -> None:
        """After the query stopped: give in-flight uploads ``timeout`` seconds to complete their
        checkpoints, then let the sinks finish every commit and abort queued
        (:meth:`CheckpointCoordinator.drain`). The same in every pipeline shape.

        Raises:
            SinkCommitFailedError: a sink's commit or abort failed and no tick reported it (the
                commit of the run's last checkpoint: the tick that queued it ended the run
                loop), naming the sink, the epoch and the fix. Not when ``failing``: the run is
                already ending on another error, which the caller raises; this one is logged.
            FencedOffError: likewise, a sink call found the lease taken over.
        """
        if self.coordinator is None:
            return
        try:
            self.coordinator.drain(timeout=timeout)
        except (SinkCommitFailedError, FencedOffError) as exc:
            if not failing:
                raise
            log.error("%s (not raised: the run stops on an earlier error)", exc)


def _batch_id(progress: dict[str, Any] | None) -> int:
    """The micro-batch a query progress (``query.lastProgress``) reports, -1 for none."""
    return int(progress["batchId"]) if progress else -1
