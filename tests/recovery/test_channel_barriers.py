"""Restoring a cut checks that its barrier records are still where its stages read them
(:mod:`barrierflow.recovery.channel_barriers`), on a real Kafka-protocol broker.

The pipeline-level refusal (a channel topic deleted and recreated under a finished two-stage
pipeline, then ``barrierflow restore``) is in tests/runtime/test_staged_pipeline.py.
"""

from __future__ import annotations

import uuid

import pytest
from barrierflow.barriers.records import BarrierMarker, data_headers
from barrierflow.recovery.channel_barriers import ChannelRecordsLostError, check_barrier_records
from barrierflow.spec.models import KafkaSourceSpec

from tests.support.kafka_broker import KafkaEndpoint, create_topic, produce

pytestmark = pytest.mark.kafka


def _data(partition: int, attempt: int) -> tuple[int, bytes, bytes, list[tuple[str, bytes]]]:
    return (partition, b"k", b'{"value": 1}', data_headers(attempt))


def _barrier(partition: int, checkpoint_id: int, attempt: int = 0) -> tuple[int, bytes, bytes, list[tuple[str, bytes]]]:
    marker = BarrierMarker(checkpoint_id, attempt, "a")
    return (partition, b"", marker.value(), marker.headers())


@pytest.fixture
def channel(kafka_endpoint: KafkaEndpoint) -> tuple[KafkaSourceSpec, dict[str, int]]:
    """A two-partition channel topic: partition 0 = data, barrier 1, data, barrier 2;
    partition 1 = barrier 1, data, data, barrier 2. Returns the source spec and the offsets of
    barrier 2 in each partition."""
    topic = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 2)
    offsets = produce(kafka_endpoint, topic, [
        _data(0, 0), _barrier(0, 1), _data(0, 0), _barrier(0, 2),
        _barrier(1, 1), _data(1, 0), _data(1, 0), _barrier(1, 2),
    ])
    spec = KafkaSourceSpec.model_validate({
        "name": "ab", "type": "kafka", "topics": [topic], "bootstrap_servers": kafka_endpoint.bootstrap_servers,
        "json_fields": {"value": "long"}, "poll_timeout": 5.0})
    return spec, {f"{topic}:0": offsets[3], f"{topic}:1": offsets[7]}


def test_barriers_still_in_place_pass(channel: tuple[KafkaSourceSpec, dict[str, int]]) -> None:
    spec, barrier_2 = channel
    check_barrier_records(spec, stage="b", checkpoint_id=2, barrier_offsets=barrier_2, channels={})
    # A fence at -1 (a restore to the beginning) is not a barrier and is not read.
    check_barrier_records(spec, stage="b", checkpoint_id=2, barrier_offsets=dict.fromkeys(barrier_2, -1),
                          channels={})


def test_a_data_record_or_another_barrier_at_the_offset_is_refused_naming_the_partition(
        channel: tuple[KafkaSourceSpec, dict[str, int]]) -> None:
    spec, barrier_2 = channel
    topic = spec.topics[0]
    moved = {f"{topic}:0": barrier_2[f"{topic}:0"] - 1, f"{topic}:1": barrier_2[f"{topic}:1"]}
    with pytest.raises(ChannelRecordsLostError) as caught:
        check_barrier_records(spec, stage="b", checkpoint_id=2, barrier_offsets=moved, channels={topic: "ab"})
    message = str(caught.value)
    assert (f"channel 'ab' (topic {topic}) partition 0 offset {moved[f'{topic}:0']} should hold barrier 2 but holds "
            "a data record written by attempt 0") in message
    assert "partition 1" not in message  # that one is in place
    assert "stage 'b'" in message and "barrierflow restore SPEC --checkpoint N" in message
    # Barrier 1 where barrier 2 was recorded is refused too (an older checkpoint's barrier).
    with pytest.raises(ChannelRecordsLostError, match="should hold barrier 1 but holds barrier 2 of attempt 0"):
        check_barrier_records(spec, stage="b", checkpoint_id=1, barrier_offsets=barrier_2, channels={})


def test_an_offset_beyond_the_log_is_refused(channel: tuple[KafkaSourceSpec, dict[str, int]]) -> None:
    """What a broker that lost its last writes looks like before anything is written again."""
    spec, barrier_2 = channel
    topic = spec.topics[0]
    beyond = {**barrier_2, f"{topic}:1": barrier_2[f"{topic}:1"] + 100}
    with pytest.raises(ChannelRecordsLostError, match=rf"partition 1 offset {beyond[f'{topic}:1']} should hold "
                                                      rf"barrier 2 but holds nothing: the partition's log ends at "
                                                      rf"offset {barrier_2[f'{topic}:1'] + 1}"):
        check_barrier_records(spec, stage="b", checkpoint_id=2, barrier_offsets=beyond, channels={})
