"""The channel source (``format("barrierflow_channel")``): a Kafka source that aligns barriers.

A stage of a multi-stage pipeline reads the channels other stages write
(:mod:`barrierflow.sinks.channel`). It is the Kafka source of :mod:`barrierflow.sources.kafka`
(format ``json``, the same offsets, the same ``read`` of a range) plus:

* ``read`` never emits barrier records (:mod:`barrierflow.barriers.records`);
* ``latestOffset`` finds the barrier records in each partition's next range and feeds them to
  the stage's :class:`~barrierflow.barriers.alignment.BarrierAligner`. It never plans a
  partition across a barrier it has not delivered: the range ends just after the first new
  barrier record. Under unaligned checkpoints (and once an aligned one timed out) it looks for
  barriers up to the end of the log, beyond the next batch: a barrier there *overtakes* the
  backlog before it, which becomes channel state (an offset range), so the checkpoint does not
  wait for a slow partition to be processed; later batches pass such a delivered barrier.
  Aligned checkpoints with an ``alignment_timeout`` look ahead too, to see barriers early:
  the timeout counts from the checkpoint's trigger time, which its barrier records carry
  (``bf-triggered-ms``; as Flink's timer counts from the barrier's timestamp), or, for a
  barrier written without it, from the moment a barrier of the checkpoint is first seen in
  any input partition, whether or not the stage has read up to it. Once it passed, every
  barrier of that checkpoint seen so far is delivered where it stands and the checkpoint
  switches to unaligned: a backlog on a fast partition delays an aligned checkpoint by the
  timeout at most, not by the time to read the backlog. The barrier batch's offsets carry
  the trigger time on, for the barriers this stage writes. Aligned checkpoints
  cap a partition that delivered barrier ``n`` there until
  every forward partition did; the batch planned when the state machine decides to snapshot
  ends exactly at the decision's offsets and carries ``barrier = n`` in its offset JSON, so
  the stage's coordinator sees it as the barrier batch of ``n`` (like the source stages'
  barriers injected on request). There is no barrier request: channel stages only follow
  barriers that arrive in-band.
* when an alignment completes, its record (mode, alignment time, channel state) is written to
  the control directory (:mod:`barrierflow.barriers.alignment.record`) for the manifest.

Options (besides the Kafka source's ``spec``, ``control_dir``, ...): ``alignment``, a JSON
object ``{"mode": "aligned"|"unaligned", "alignment_timeout": seconds, "attempt": a,
"last_completed": n, "back_edge_topics": [...], "cutoffs": [{"attempt": a, "offsets": {...}}],
"rate_factors": {"topic:p": factor}}`` (a slow consumer for tests and benchmarks: the partition
reads on average ``max_records_per_batch`` times its factor rows per batch, a record only once
enough credit built up for all its rows);
``cutoffs`` (:mod:`barrierflow.barriers.cutoffs`) make ``read`` and the barrier scan skip what an
older attempt wrote after the restored barrier.

Rows: a channel's data records are row batches (:mod:`barrierflow.kafka_io.row_batches`, many
rows per record; older channels hold one JSON row per record), decoded by
:class:`~barrierflow.sources.channel_rows.ChannelDecoder`. ``max_records_per_batch`` counts
rows: a partition's batch takes the records holding at most that many rows, and at least one
record (a record above the cap is read alone). Channel state is counted in rows.

Cost: the driver reads each new range once more, headers only, to find barriers and row counts
(with its one long-lived consumer, building nothing for the records:
:meth:`~barrierflow.kafka_io.consumer.RangeReader.read_marked`); with row batches that is a
record per few thousand rows. A range's barrier positions are not cached across restarts.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from barrierflow.barriers.alignment import (
    AlignmentContext,
    BarrierAligner,
    CollectingBarriers,
    InputPartitions,
    RecordingChannelState,
)
from barrierflow.barriers.alignment.record import write_aborted, write_alignment
from barrierflow.barriers.cutoffs import AttemptCutoff, StaleRecords
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.records import BARRIER_HEADER, BarrierMarker, decode_barrier, record_attempt
from barrierflow.kafka_io.decoding import RecordDecoder, newest_event_time
from barrierflow.kafka_io.partition_ids import parse_partition_id
from barrierflow.kafka_io.range_reads import read_range, read_range_columns, read_range_marked
from barrierflow.kafka_io.row_batches import MAX_ROWS, ROWS_HEADER, rows_in
from barrierflow.sources.channel_rows import ChannelDecoder
from barrierflow.sources.kafka import KafkaStreamReader, schema_for
from barrierflow.sources.planning import RowMeasure
from barrierflow.spec.checkpoint_mode import CheckpointMode
from barrierflow.spec.kafka_params import KafkaSourceParams

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
#: Records of older attempts skipped per partition and planning call at most (bounds its time).
STALE_SCAN_LIMIT = 100_000
#: How far back (records) the driver looks for a partition's last data record behind barrier records.
BARRIER_LOOK_BACK = 256
#: The headers the driver's scan looks at: barrier records and row-batch records (row counts).
SCANNED_HEADERS = frozenset({BARRIER_HEADER, ROWS_HEADER})
#: Checkpoints whose first-seen time the driver keeps (aligned with a timeout; the newest).
FIRST_SEEN_KEPT = 64


class ChannelDataSource(DataSource):
    """Options: those of the Kafka source plus ``alignment`` (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_channel"

    def schema(self) -> str:
        return schema_for(KafkaSourceParams.from_json(self.options["spec"]))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return ChannelStreamReader(dict(self.options))


class ChannelStreamReader(KafkaStreamReader):
    """See the module docstring."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        settings = json.loads(options.get("alignment", "{}"))
        self.mode = CheckpointMode(settings.get("mode", "aligned"))
        self.alignment_timeout = float(settings.get("alignment_timeout", 0.0))
        self.attempt = int(settings.get("attempt", 0))
        self.last_completed = int(settings.get("last_completed", 0))
        self.back_edge_topics = frozenset(settings.get("back_edge_topics", []))
        self.stale = StaleRecords(AttemptCutoff.from_json(c) for c in settings.get("cutoffs", []))
        self.rate_factors = {str(p): float(f) for p, f in settings.get("rate_factors", {}).items()}
        self._aligner: BarrierAligner | None = None
        self._found: dict[str, list[tuple[int, BarrierMarker]]] = {}
        #: Per partition, (offset, rows) of the row-batch records scanned (the others hold one row).
        self._batched: dict[str, list[tuple[int, int]]] = {}
        self._scanned_to: dict[str, int] = {}
        #: Per partition, the offset from which every barrier record up to _scanned_to is in _found.
        self._found_from: dict[str, int] = {}
        self._delivered: set[tuple[str, int]] = set()
        self._current_from: dict[str, int] = {}
        #: Per slow partition (rate factor below 1), rows it may still read (see latestOffset).
        self._credit: dict[str, int] = {}
        #: (attempt, checkpoint id) -> when a barrier of it was first seen (monotonic seconds).
        self._first_seen: dict[tuple[int, int], float] = {}
        #: (attempt, checkpoint id) -> when it was triggered, on the monotonic clock (aligned
        #: with a timeout: the timeout counts from it), and in epoch ms as its barriers said.
        self._started: dict[tuple[int, int], float] = {}
        self._triggered_ms: dict[tuple[int, int], int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_aligner"] = None
        state["_found"], state["_scanned_to"], state["_delivered"] = {}, {}, set()
        state["_batched"] = {}
        state["_found_from"] = {}
        state["_current_from"] = {}
        state["_credit"] = {}
        state["_first_seen"], state["_started"], state["_triggered_ms"] = {}, {}, {}
        return state

    # -- driver side ---------------------------------------------------------------------

    def aligner(self, partitions: list[str]) -> BarrierAligner:
        if self._aligner is None:
            back = frozenset(p for p in partitions if parse_partition_id(p)[0] in self.back_edge_topics)
            context = AlignmentContext(
                InputPartitions(frozenset(partitions) - back, back), mode=self.mode,
                alignment_timeout=self.alignment_timeout, attempt=self.attempt,
                last_completed=self.last_completed, count_records=self._count_data_records)
            self._aligner = BarrierAligner(context)
        return self._aligner

    def _count_data_records(self, partition: str, start: int, end: int) -> int:
        """The data rows in ``[start, end)`` of ``partition`` (a range of channel state).

        Without a cutoff on the partition, and when the driver's scan already covered the range
        (an unaligned checkpoint's look-ahead scans to the log's end), it is counted from what
        the scan found: every offset holds one record (a channel is written without
        transactions; a compacted channel topic, which barrierflow never creates, would break
        this), a barrier record holds no row, a row-batch record its ``bf-rows``, any other
        record one row. Otherwise the range is read and its records judged one by one
        (barrier records and stale records left out)."""
        if self._covered(partition, start, end) and not any(partition in c.offsets for c in self.stale.cutoffs):
            return self._rows_between(partition, start, end)
        topic, number = parse_partition_id(partition)
        records = read_range(self.spec, topic, number, start, end, self._driver_reader())
        return sum(rows_in(r.headers, f"{partition} offset {r.offset}") for r in records
                   if decode_barrier(r.headers) is None
                   and not self.stale.is_stale(partition, r.offset, record_attempt(r.headers)))

    def _covered(self, partition: str, start: int, end: int) -> bool:
        """Whether the driver's scan saw every record of ``[start, end)`` (and remembers them)."""
        found_from = self._found_from.get(partition)
        return found_from is not None and found_from <= start and end <= self._scanned_to.get(partition, 0)

    def _rows_between(self, partition: str, start: int, end: int) -> int:
        """The rows in ``[start, end)``, a range the scan covered (:meth:`_covered`)."""
        barriers = sum(1 for o, _ in self._found.get(partition, []) if start <= o < end)
        extra = sum(rows - 1 for o, rows in self._batched.get(partition, []) if start <= o < end)
        return end - start - barriers + extra

    def _planned_rows(self, partition: str, start: int, end: int) -> int:
        """The rows of a planned range (its offsets when the scan did not cover it)."""
        return self._rows_between(partition, start, end) if self._covered(partition, start, end) else end - start

    def _rows_reach(self, partition: str, first: int, limit: int, rows: int, *, at_least_one: bool = True) -> int:
        """The end of the longest range from ``first`` holding at most ``rows`` data rows, up
        to ``limit`` (the partition's end, or ``first`` plus the cap when every record held
        one row). Ranges end on record boundaries: a row-batch record that would take the
        range past ``rows`` is left for the next batch, unless it is the range's first data
        record and ``at_least_one`` (a batch always moves on). The scan goes only as far as
        it needs."""
        if limit <= first:
            return first
        self._scan(partition, first, limit, rows_wanted=rows)
        scanned = min(limit, self._scanned_to.get(partition, first))
        special = sorted([(o, 0) for o, _ in self._found.get(partition, []) if first <= o < scanned]
                         + [(o, n) for o, n in self._batched.get(partition, []) if first <= o < scanned])
        have, position = 0, first
        for offset, held in special:
            if have + (offset - position) >= rows:
                return position + (rows - have)  # records of one row each up to the cap
            have += offset - position
            if (have > 0 or not at_least_one) and have + held > rows:
                return offset
            have += held
            position = offset + 1
            if have >= rows:
                return position
        return min(scanned, position + max(0, rows - have))

    def _past_stale(self, partition: str, first: int, available: int) -> int:
        """The offset of the first record at or after ``first`` that is not stale (``first``
        itself when there are no cutoffs), so that what dead attempts wrote after the restored
        barrier never counts against ``max_records_per_batch``: after many restores it can be
        far more than a checkpoint interval's worth of batches. Stale records sit before the
        current attempt's first record (their writers died before the restore), so once a
        record of this attempt was seen, the partition is not scanned again. Scans at most
        :data:`STALE_SCAN_LIMIT` records per call."""
        if not self.stale.cutoffs or first >= self._current_from.get(partition, available + 1) or first >= available:
            return first
        topic, number = parse_partition_id(partition)
        limit = min(available, first + STALE_SCAN_LIMIT)
        for record in read_range(self.spec, topic, number, first, limit, self._driver_reader()):
            attempt = record_attempt(record.headers)
            if attempt is not None and attempt >= self.attempt:
                self._current_from[partition] = record.offset
            if not self.stale.is_stale(partition, record.offset, attempt):
                return record.offset
        return limit

    def _look_ahead(self, aligner: BarrierAligner) -> bool:
        """Whether barriers are looked for beyond the next batch, up to the end of the log:
        unaligned checkpoints (and one switched to unaligned) let a barrier overtake the
        records before it, which become channel state; aligned ones must process up to it."""
        return (self.mode is CheckpointMode.UNALIGNED or isinstance(aligner.state, RecordingChannelState)
                or self.alignment_timeout > 0)

    def _sighted(self, markers: Iterable[BarrierMarker], now: float) -> None:
        """Remember, per checkpoint of ``markers`` (barriers seen this round), when it was first
        seen and when it started: its trigger time if a barrier carries one (converted to the
        monotonic clock; a trigger time ahead of this host's clock counts as now), else the
        first sighting."""
        wall = time.time()
        for marker in markers:
            key = (marker.attempt, marker.checkpoint_id)
            self._first_seen.setdefault(key, now)
            started = now
            if marker.triggered_ms is not None:
                self._triggered_ms.setdefault(key, marker.triggered_ms)
                started = now - max(0.0, wall - marker.triggered_ms / 1000.0)
            self._started[key] = min(self._started.get(key, started), started)
        for seen in (self._first_seen, self._started, self._triggered_ms):
            for key in sorted(seen)[:-FIRST_SEEN_KEPT]:
                del seen[key]  # long past checkpoints

    def _overdue(self, aligner: BarrierAligner, ahead: list[tuple[str, BarrierMarker, int]], now: float
                 ) -> tuple[int, int] | None:
        """Aligned with a timeout: ``(attempt, checkpoint id)`` of the oldest checkpoint that
        started (:meth:`_sighted`) at least ``alignment_timeout`` ago and is still to be
        snapshotted: one with a barrier in ``ahead`` (this round's barriers, those beyond the
        next batch included) or the one the aligner is collecting; None when none is. Barriers
        of older checkpoints and attempts do not count."""
        if self.mode is not CheckpointMode.ALIGNED or self.alignment_timeout <= 0:
            return None
        candidates = {(m.attempt, m.checkpoint_id) for _p, m, _o in ahead if not aligner.is_older(m)}
        state = aligner.state
        if isinstance(state, CollectingBarriers):
            candidates.add((state.attempt, state.checkpoint_id))
        due = [key for key in candidates if key in self._started and now - self._started[key] >= self.alignment_timeout]
        return min(due) if due else None

    def _scan(self, partition: str, first: int, until: int, rows_wanted: int | None = None) -> None:
        """Scan ``partition`` from where the last scan ended (at least ``first``) towards
        ``until``, remembering its barrier records and row-batch sizes; with ``rows_wanted``,
        stop once ``[first, scanned)`` holds that many rows. Each offset is scanned once; what
        lies before ``first`` is forgotten. The driver reads headers only
        (:meth:`~barrierflow.kafka_io.consumer.RangeReader.read_marked`)."""
        previous = self._scanned_to.get(partition, first)
        scanned = max(first, previous)
        found = [(o, m) for o, m in self._found.get(partition, []) if o >= first]
        batched = [(o, n) for o, n in self._batched.get(partition, []) if o >= first]
        # Every barrier and row-batch record of [_found_from, _scanned_to) is remembered.
        self._found_from[partition] = first if previous < first else max(self._found_from.get(partition, first), first)
        self._found[partition], self._batched[partition] = found, batched
        if until <= scanned:
            return
        have = self._rows_between(partition, first, scanned) if rows_wanted is not None else 0
        position = scanned
        topic, number = parse_partition_id(partition)
        records = read_range_marked(self.spec, topic, number, scanned, until, SCANNED_HEADERS, self._driver_reader())
        try:
            for offset, headers in records:
                have += offset - position  # records with neither header: one JSON row each
                marker = decode_barrier(headers, where=f"{partition} offset {offset}")
                if marker is not None:
                    found.append((offset, marker))
                else:
                    held = rows_in(headers, f"{partition} offset {offset}")
                    batched.append((offset, held))
                    have += held
                position = offset + 1
                if rows_wanted is not None and have >= rows_wanted:
                    break
            else:
                position = until
        finally:
            records.close()
        self._scanned_to[partition] = position

    def _known_barriers(self, partition: str, first: int, until: int) -> list[tuple[int, BarrierMarker]]:
        """The barrier records of ``partition`` in ``[first, until)`` (:meth:`_scan`)."""
        self._scan(partition, first, until)
        return [(o, m) for o, m in self._found.get(partition, []) if first <= o < until]

    def latestOffset(self, start: dict, limit: Any) -> dict:
        """Plan the next batch: advance, stop just after new barriers, align; see the module
        docstring."""
        begin = SourceOffset.from_json(start)
        available = self._available_riding_out_outages()
        if available is None:
            return start  # the channel's brokers do not answer (yet): no new data
        aligner = self.aligner(sorted(available))
        now = time.monotonic()
        # Step 1. How far each partition could go, never past its cap.
        caps = aligner.caps
        planned: dict[str, int] = {}
        reach: dict[str, int] = {}
        credits: dict[str, int] = {}
        for partition in sorted(set(begin.partitions) | set(available)):
            first = begin.partitions.get(partition, 0)
            fresh = self._past_stale(partition, first, available.get(partition, first))
            factor = self.rate_factors.get(partition, 1.0)
            cap = max(1, int(self.spec.max_records_per_batch * factor))
            whole = True  # a batch takes at least one record, however many rows it holds
            if factor < 1.0:
                # A slow consumer (tests, benchmarks): on average ``cap`` rows per batch, whatever
                # the records' sizes, so a record larger than the cap waits for enough credit.
                cap = credits[partition] = min(self._credit.get(partition, 0) + cap, cap + MAX_ROWS)
                whole = False
            limit = min(available.get(partition, first), fresh + cap)
            reach[partition] = end = max(first, self._rows_reach(partition, fresh, limit, cap, at_least_one=whole))
            planned[partition] = min(end, max(first, caps.get(partition, end)))
        # Step 1b. Flow control, as in every source (event_time: idleness, watermark alignment;
        # trigger.target_batch_duration: adaptive batch sizing), never past the caps above. The
        # planner is told how far each partition can reach in this batch (its rate cap and stale
        # records applied), so alignment caps the others at what the slowest one will read; it
        # measures and records the batch as Steps 2-4 cut it.
        if self.planner.options.tracks_watermarks or self.planner.options.target_batch_duration is not None:
            def cut(flow: SourceOffset) -> SourceOffset:
                for partition in planned:
                    first = begin.partitions.get(partition, 0)
                    planned[partition] = min(planned[partition], max(first, flow.partitions.get(partition, first)))
                return self._cut_at_barriers(begin, available, planned, aligner, now)

            measure = RowMeasure(advance=lambda p, s, rows: self._rows_reach(p, s, reach.get(p, s), rows),
                                 rows=self._planned_rows)
            end = self.flow_plan(SourceOffset(dict(begin.partitions), begin.barrier), reach, amend=cut,
                                 measure=measure, offered=available)
        else:
            end = self._cut_at_barriers(begin, available, planned, aligner, now)
        for partition, credit in credits.items():
            first = begin.partitions.get(partition, 0)
            used = self._planned_rows(partition, first, end.partitions.get(partition, first))
            self._credit[partition] = max(0, credit - used)
        return end.to_json()

    def _cut_at_barriers(self, begin: SourceOffset, available: dict[str, int], planned: dict[str, int],
                         aligner: BarrierAligner, now: float) -> SourceOffset:
        """Steps 2-4 of :meth:`latestOffset`: the batch from ``begin`` to ``planned`` (each
        partition's end so far) cut just after new barriers, fed to the alignment state
        machine, and capped or ended as it decides."""
        # Step 2. Find the barriers (in the batch, or up to the log's end when looking ahead);
        # a partition's batch stops just after the first one that counts and was not delivered.
        # Aligned with a timeout: barriers beyond the batch are only looked at (for when each
        # checkpoint's first barrier arrived) until the timeout of their checkpoint passed.
        ahead = self._look_ahead(aligner)
        overtaking = self.mode is CheckpointMode.UNALIGNED or isinstance(aligner.state, RecordingChannelState)
        found: list[tuple[str, BarrierMarker, int]] = []
        beyond: list[tuple[str, BarrierMarker, int]] = []
        sighted: list[BarrierMarker] = []
        for partition, end in planned.items():
            first = begin.partitions.get(partition, 0)
            until = max(end, available.get(partition, end)) if ahead else end
            for offset, marker in self._known_barriers(partition, first, until):
                sighted.append(marker)
                if (partition, offset) in self._delivered:
                    continue  # seen ahead earlier; its snapshot is taken, the batch may pass it
                if offset >= end and not overtaking:
                    beyond.append((partition, marker, offset))
                    break
                found.append((partition, marker, offset))
                if not aligner.is_older(marker):
                    self._delivered.add((partition, offset))
                    if offset < end:
                        planned[partition] = offset + 1
                    break
        self._sighted(sighted, now)
        timed_out = self._overdue(aligner, beyond + found, now)
        if timed_out is not None:
            for partition, marker, offset in beyond:
                if (marker.attempt, marker.checkpoint_id) == timed_out:
                    found.append((partition, marker, offset))
                    self._delivered.add((partition, offset))
        # Step 3. Feed the state machine.
        aligner.observe(planned)
        if timed_out is None:
            for partition, marker, offset in found:
                aligner.barrier_received(partition, marker, offset, now)
        else:
            since = self._first_seen.get(timed_out, now)
            log.info("channel source %s: checkpoint %d started %.1fs ago (its first barrier seen %.1fs ago), past "
                     "the alignment timeout: switching to unaligned", self.spec.name, timed_out[1],
                     now - self._started.get(timed_out, now), now - since)
            aligner.barriers_overdue(found, now, since)
        aligner.tick(now)
        out = aligner.drain()
        # Step 4. Apply its decisions.
        for partition, cap in aligner.caps.items():
            planned[partition] = min(planned[partition], max(begin.partitions.get(partition, 0), cap))
        barrier = begin.barrier
        triggered_ms = begin.barrier_triggered_ms
        if out.snapshots:
            decision = out.snapshots[-1]
            planned = dict(decision.offsets)
            barrier = decision.checkpoint_id
            triggered_ms = self._triggered_ms.get((decision.attempt, barrier))
            log.info("channel source %s: batch ending at %s is the snapshot of checkpoint %d (%s)", self.spec.name,
                     planned, barrier, decision.mode.value)
        for done in out.completed:
            write_alignment(self.control.directory, done)
        for aborted in out.aborted:
            write_aborted(self.control.directory, aborted)
            log.warning("channel source %s: alignment of checkpoint %d ended: %s: %s", self.spec.name,
                        aborted.checkpoint_id, aborted.reason.explanation, aborted.message)
        end = SourceOffset(planned, begin.barrier, dict(begin.extra), begin.attempt)
        return end.with_barrier(barrier, triggered_ms)

    # -- event times the driver peeks at (watermark alignment) -----------------------------

    def _peekable(self, topic: str, number: int, start: int, end: int) -> Iterator[Any]:
        """Data records only: a barrier record has no event time."""
        partition = f"{topic}:{number}"
        return (r for r in super()._peekable(topic, number, start, end)
                if decode_barrier(r.headers, where=f"{partition} offset {r.offset}") is None)

    def _event_time_of(self, partition: str, offset: int, *, newest_row: bool = False) -> datetime | None:
        """As the Kafka source's; for the alignment cap's search (``newest_row``), a stretch
        holding barrier records only (an upstream stage checkpointing while it wrote no data)
        has the event time of the last data record before it. Unknown there, the search
        would step over it and past data records newer than the ceiling (measured: a fast
        partition 20 s ahead with a 2 s ``max_drift``)."""
        found = super()._event_time_of(partition, offset, newest_row=newest_row)
        if found is None and newest_row and offset > 0:
            found = self._last_event_time_before(partition, offset)
        return found

    def _event_times_at(self, offsets: Mapping[str, int]) -> dict[str, datetime | None]:
        """As the Kafka source's, but a channel partition often has only barrier records after
        an offset (at its end, and in any stretch where the upstream stage wrote no data): its
        place there is the event time of its last data record before the offset, so watermark
        alignment keeps a ceiling instead of seeing an unknown watermark."""
        out = super()._event_times_at(offsets)
        for partition, offset in offsets.items():
            if out.get(partition) is None and offset > 0:
                out[partition] = self._last_event_time_before(partition, offset)
        return out

    def _last_event_time_before(self, partition: str, offset: int) -> datetime | None:
        """The event time of the last data record in the :data:`BARRIER_LOOK_BACK` records
        before ``offset`` (None: only barrier records there); cached like single peeks."""
        key = (partition, -offset, True)  # negative: apart from the forward peeks' keys
        if key in self._event_time_cache:
            return self._event_time_cache[key]
        topic, number = parse_partition_id(partition)
        records = list(self._peekable(topic, number, max(0, offset - BARRIER_LOOK_BACK), offset))
        found: datetime | None = None
        if records:
            for batch in self._decoder().batches(records[-1:]):
                found = newest_event_time(batch, self.event_time_column, found)
        self._event_time_cache[key] = found
        return found

    def _decoder(self, *, peek: bool = False) -> RecordDecoder:
        """Row batches and JSON rows (:class:`~barrierflow.sources.channel_rows.ChannelDecoder`);
        a peeked row batch's event time is its first row's."""
        return ChannelDecoder(self.spec, first_rows=peek)

    # -- executor side -------------------------------------------------------------------

    def _batches(self, decoder: RecordDecoder, topic: str, number: int, start: int, end: int
                 ) -> Iterator[pa.RecordBatch]:
        """The range's data records as columns, as the Kafka source reads ``json``; each
        record's headers decide whether it is data (:meth:`_not_data`: barrier records and
        stale records of older attempts are left out)."""
        if self.spec.format != "json":  # pragma: no cover - a stage reads its channels as json
            return decoder.batches(self._records(topic, number, start, end))
        partition = f"{topic}:{number}"

        def drop(offset: int, headers: Any) -> bool:
            return self._not_data(partition, offset, headers)

        columns = read_range_columns(self.spec, topic, number, start, end, drop=drop)
        return decoder.column_batches(topic, number, columns)

    def _not_data(self, partition: str, offset: int, headers: Any) -> bool:
        """Whether the record at ``offset`` is left out of the stage's rows: a barrier record
        (a malformed one raises SourceError, naming it), or a record an older attempt wrote
        after the restored barrier (re-produced since)."""
        if not headers:
            return False
        if any(name == BARRIER_HEADER for name, _ in headers):
            return decode_barrier(headers, where=f"{partition} offset {offset}") is not None
        return bool(self.stale.cutoffs) and self.stale.is_stale(partition, offset, record_attempt(headers))

    def _records(self, topic: str, number: int, start: int, end: int) -> Iterator[Any]:
        """The range's data records: barrier records and stale records of older attempts are
        never handed to the transformation."""
        partition = f"{topic}:{number}"
        for record in read_range(self.spec, topic, number, start, end):
            if decode_barrier(record.headers, where=f"{partition} offset {record.offset}") is not None:
                continue
            if self.stale.is_stale(partition, record.offset, record_attempt(record.headers)):
                continue  # an older attempt wrote it after the restored barrier; re-produced since
            yield record
