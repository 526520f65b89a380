"""Where the source still holds the records a checkpoint would replay from.

A checkpoint is only restorable if every barrier offset is still inside the source's
retained range: restoring resumes reading at the barrier offsets, and Kafka deletes old
segments. :func:`retained_starts` answers, per source and partition, the oldest offset
the source can still deliver; ``None`` for a source that re-creates any offset (the
generator: record ``i`` is a pure function of ``(partition, i)``).
"""

from __future__ import annotations

import logging

from barrierflow.spec.models import GeneratorSourceSpec, KafkaSourceSpec, StageSpec

log = logging.getLogger(__name__)

#: source name -> partition id -> oldest retained offset; None: the source keeps everything.
RetainedStarts = dict[str, dict[str, int] | None]


def kafka_beginning_offsets(spec: KafkaSourceSpec) -> dict[str, int]:
    """The beginning (oldest retained) offset of every partition of the spec's topics.

    Raises:
        SourceError: the brokers cannot be reached or a topic does not exist.
    """
    from barrierflow.kafka_io.admin import beginning_offsets

    return beginning_offsets(spec)


def retained_starts(spec: StageSpec) -> RetainedStarts:
    """Per source: its oldest retained offsets, or None if it retains everything.

    Raises:
        SourceError: a Kafka source cannot be asked (the caller reports the check skipped).
    """
    out: RetainedStarts = {}
    for source in spec.sources:
        if isinstance(source, GeneratorSourceSpec):
            out[source.name] = None
        elif isinstance(source, KafkaSourceSpec):
            out[source.name] = kafka_beginning_offsets(source)
    return out
