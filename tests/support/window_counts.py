"""The expected rows of per-key tumbling event-time window counts over a generator's input."""

from __future__ import annotations

from datetime import datetime

from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec.models import GeneratorSourceSpec


def window_recount(source: GeneratorSourceSpec, records: int, width_s: int
                   ) -> dict[tuple[int, datetime], tuple[int, int]]:
    """(key, window start) -> (count, value sum) over every valid record of the first ``records``
    of each partition of ``source`` (malformed ones skipped, as the pipeline skips them), in
    windows of ``width_s`` seconds."""
    model = GeneratorModel(source)
    out: dict[tuple[int, datetime], list[int]] = {}
    for p in range(source.partitions):
        for _, _, key, value, event_time in model.rows(p, 0, records):
            start = datetime.fromtimestamp(int(event_time.timestamp()) // width_s * width_s, tz=event_time.tzinfo)
            cell = out.setdefault((key, start), [0, 0])
            cell[0] += 1
            cell[1] += value
    return {k: (v[0], v[1]) for k, v in out.items()}
