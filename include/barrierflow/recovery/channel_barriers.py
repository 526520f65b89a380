"""Before a cut is restored: are its barrier records still where its stages read them?

A stage fed by channels records, in its manifest of checkpoint ``n``, the offset of the
barrier ``n`` record in each input partition (``AlignmentSummary.barrier_offsets``). Restoring
``n`` resumes the stage just after those offsets and cuts off what older attempts wrote
after them (:mod:`barrierflow.barriers.cutoffs`). That is only right while the records are
still there: a broker that lost acknowledged records (the embedded broker killed with SIGKILL
before it saved them, a topic deleted and recreated, unclean leader election on a real
cluster) hands their offsets to new records, and a restore would take those for the lost
ones, silently dropping or repeating output.

:func:`check_barrier_records` reads the one record at each barrier offset (``read_committed``,
as the channel source does) and refuses the restore, naming the stage, channel, partition and
offset, unless it is barrier ``n``. It reads nothing else, so it costs one short fetch per
input partition per restore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from barrierflow.barriers.records import BarrierMarker, BarrierRecordError, decode_barrier, record_attempt
from barrierflow.errors import CheckpointCorruptError
from barrierflow.spec.models import KafkaSourceSpec

if TYPE_CHECKING:
    from barrierflow.kafka_io.consumer import RangeReader


class ChannelRecordsLostError(CheckpointCorruptError):
    """A checkpoint's barrier record is no longer at the offset its stage recorded: the
    channel's broker lost records, and restoring the checkpoint would lose or repeat output."""


def _record_at(spec: KafkaSourceSpec, partition: str, offset: int, end: int | None,
               reader: RangeReader) -> BarrierMarker | str:
    """The barrier at ``offset`` of ``partition`` (whose log ends at ``end``), or what stands
    there instead, in words."""
    from barrierflow.kafka_io.partition_ids import parse_partition_id
    from barrierflow.kafka_io.range_reads import read_range

    if end is None:
        return "nothing: the partition does not exist"
    if offset >= end:
        return f"nothing: the partition's log ends at offset {end}"
    topic, number = parse_partition_id(partition)
    records = list(read_range(spec, topic, number, offset, offset + 1, reader))
    if not records:
        return "no committed record (an aborted record or a transaction marker)"
    headers = records[0].headers
    try:
        marker = decode_barrier(headers, where=f"{partition} offset {offset}")
    except BarrierRecordError as exc:
        return f"a malformed barrier record ({exc})"
    return marker if marker is not None else f"a data record written by attempt {record_attempt(headers)}"


def check_barrier_records(spec: KafkaSourceSpec, *, stage: str, checkpoint_id: int,
                          barrier_offsets: Mapping[str, int], channels: Mapping[str, str]) -> None:
    """Check that each ``barrier_offsets`` entry (``topic:partition`` -> offset) of ``stage``'s
    manifest of ``checkpoint_id`` holds barrier ``checkpoint_id``, reading ``spec``'s topics.
    ``channels`` maps a topic to its channel's name, for the message. Negative offsets (the
    attempt cutoff of a restore to the beginning) are not barriers and are skipped.

    Raises:
        ChannelRecordsLostError: some partition holds something else there (every such
            partition is named, with what it holds and what to do).
        SourceError: the broker cannot be reached or refuses the read.
    """
    from barrierflow.kafka_io.admin import end_offsets
    from barrierflow.kafka_io.consumer import RangeReader
    from barrierflow.kafka_io.partition_ids import parse_partition_id
    from barrierflow.kafka_io.range_reads import reader_settings

    wanted = {p: o for p, o in barrier_offsets.items() if o >= 0}
    if not wanted:
        return
    ends = end_offsets(spec)
    reader = RangeReader(reader_settings(spec))
    problems: list[str] = []
    try:
        for partition, offset in sorted(wanted.items()):
            found = _record_at(spec, partition, offset, ends.get(partition), reader)
            if isinstance(found, BarrierMarker):
                if found.checkpoint_id == checkpoint_id:
                    continue
                found = f"barrier {found.checkpoint_id} of attempt {found.attempt} from stage {found.stage!r}"
            topic, number = parse_partition_id(partition)
            problems.append(f"channel {channels.get(topic, topic)!r} (topic {topic}) partition {number} offset "
                            f"{offset} should hold barrier {checkpoint_id} but holds {found}")
    finally:
        reader.close()
    if problems:
        raise ChannelRecordsLostError(
            f"cannot restore checkpoint {checkpoint_id}: stage {stage!r} read its input up to barrier records that are "
            f"no longer there: {'; '.join(problems)}. The channel's broker lost acknowledged records (an embedded "
            "broker killed by SIGKILL before it saved them, a topic deleted and recreated, an unclean leader "
            "election); restoring this checkpoint would take newer records for the lost ones and lose or repeat "
            "output. Restore an older global checkpoint whose barriers are still there ('barrierflow checkpoints "
            "list SPEC', then 'barrierflow restore SPEC --checkpoint N'), or rebuild the pipeline's output from an "
            "empty work dir and checkpoint store.")
