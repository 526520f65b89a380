"""Event-time benchmarks (docs/benchmarks.md): adaptive batch sizing and watermark alignment.

``batch-sizing``: the reference job (``bench.yaml``) over a backlog of 20 M records (4
partitions x 5 M, unthrottled generator, ``max_records_per_batch`` 2.5 M per partition, i.e.
10 M-record batches when nothing bounds them), checkpoints every 2 s, run with and without
``trigger.target_batch_duration: 1s``. Reports per mode the checkpoint completion time
(trigger -> manifest, ``total_ms``: how long a barrier waits behind the batch in flight plus
the barrier batch itself) of the checkpoints taken while the backlog lasted, and the throughput.

``alignment``: keyed 10 s event-time windows (5 s watermark delay) over a 4-partition generator
whose partition 3 is ten minutes behind in event time, with alignment off and on
(``max_drift: 2s``). Reports throughput and Spark's numRowsDroppedByWatermark (it counts
partially aggregated (window, key) groups, not records; the acceptance test counts records).

Each mode runs on fresh directories under ``var/bench``, one SparkSession, alternating order
per round. It prints what it ran (command, commit, date, cores, load average, rounds) above the
table and writes the record, ``YYYY-MM-DD-HHMM-<scenario>.md`` and ``.json`` with every round's
and every checkpoint's figures per mode (:mod:`bench.record`), to bench/results/event-time/ (the
runs before it are in bench/results/event-time.md), or to ``--markdown FILE`` and ``FILE`` with
``.json``.
"""

from __future__ import annotations

import shutil
import statistics
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.runtime.job import RunResult, StreamingJob
from barrierflow.spark import offset_log
from barrierflow.spec import load_spec, project_home
from barrierflow.spec.models import (
    AlignmentSpec,
    CheckpointSpec,
    EventTimeSpec,
    GeneratorSourceSpec,
    StageSpec,
    TransformationSpec,
    TriggerSpec,
)

from bench.rates import job_rate
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report
from bench.spread import median_spread, rounds_note

BACKLOG_PER_PARTITION = 5_000_000
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "event-time"


@dataclass
class ModeSample:
    throughput: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    barrier_batch_ms: list[float] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    late_rows: list[int] = field(default_factory=list)


def _checkpoints(base: StageSpec, work: Path, interval: float) -> CheckpointSpec:
    return base.checkpoint.model_copy(update={"storage": f"file://{work / 'checkpoints'}", "interval": interval,
                                              "timeout": 600.0})


def sizing_spec(base: StageSpec, work: Path, target: float | None) -> StageSpec:
    source = base.source
    assert isinstance(source, GeneratorSourceSpec), "the bench spec needs a generator source"
    source = source.model_copy(update={"rows_per_second": 0.0, "max_records_per_batch": 2_500_000,
                                       "records_per_partition": BACKLOG_PER_PARTITION})
    trigger = TriggerSpec(interval=base.trigger.interval, target_batch_duration=target)
    return base.model_copy(update={"work_dir": str(work / "work"), "sources": [source], "trigger": trigger,
                                   "checkpoint": _checkpoints(base, work, 2.0)})


def alignment_spec(base: StageSpec, work: Path, aligned: bool) -> StageSpec:
    source = GeneratorSourceSpec(type="generator", name="events", partitions=4, rows_per_second=0.0,
                                 max_records_per_batch=100_000, keys=1000, event_time_skew_ms=[0, 0, 0, -600_000])
    event_time = EventTimeSpec(watermark_delay=5.0,
                               alignment=AlignmentSpec(max_drift=2.0, update_interval=0.0) if aligned else None)
    transformation = TransformationSpec(function="barrierflow.transforms.aggregations:keyed_window_counts",
                                        output_mode="append", options={"window": "10 seconds"})
    return base.model_copy(update={"work_dir": str(work / "work"), "sources": [source], "event_time": event_time,
                                   "transformation": transformation, "checkpoint": _checkpoints(base, work, 2.0)})


MODES: dict[str, tuple[tuple[str, Any], ...]] = {
    "batch-sizing": (("without target_batch_duration", None), ("target_batch_duration 1 s", 1.0)),
    "alignment": (("alignment off", False), ("alignment on (max_drift 2 s)", True)),
}


def run_event_time_benchmark(spec_path: str, scenario: str, *, seconds: float, rounds: int,
                             markdown: str | None = None, results: Path | None = RESULTS,
                             command: str | None = None) -> dict[str, ModeSample]:
    """Run ``scenario`` (``batch-sizing`` or ``alignment``) and print its table. The run's record
    goes to ``markdown`` if given, else into ``results`` (None: no record); ``command``: the
    command line it names."""
    base = load_spec(spec_path)
    record = RunRecord.start(scenario, command)
    root = project_home() / "var" / "bench"
    shutil.rmtree(root, ignore_errors=True)
    modes = MODES[scenario]
    build = sizing_spec if scenario == "batch-sizing" else alignment_spec
    samples = {name: ModeSample() for name, _ in modes}
    spark = StreamingJob(base).spark
    for r in range(rounds):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        for name, setting in order:
            work = root / f"r{r}-{scenario}-{'on' if setting else 'off'}"
            job = StreamingJob(build(base, work, setting), spark=spark)
            result = job.run(duration=seconds)
            _record(samples[name], result, BACKLOG_PER_PARTITION * 4 if scenario == "batch-sizing" else None)
            print(f"round {r + 1} {name}: records per batch {_batch_sizes(job.layout.spark_checkpoint)}",
                  file=sys.stderr)
            print(f"round {r + 1} {name:32} {job_rate(result):>12,.0f} rec/s  {len(result.completed)} checkpoints  "
                  f"completion ms {[round(m.total_ms) for m in result.completed]}", file=sys.stderr)
            shutil.rmtree(work, ignore_errors=True)
    record_run(record, scenario, samples, base, seconds=seconds, rounds=rounds, markdown=markdown, results=results)
    return samples


def record_run(record: RunRecord, scenario: str, samples: dict[str, ModeSample], spec: StageSpec, *,
               seconds: float, rounds: int, markdown: str | None, results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`),
    named after ``scenario``, with every round's figures per mode; returns the paths written."""
    figures = {"seconds": seconds, "modes": {name: asdict(s) for name, s in samples.items()}}
    return report(record, f"Event time, {scenario}, {seconds:g} s per mode", rounds,
                  render(scenario, samples, spec, seconds, rounds).splitlines(), figures, results_dir=results,
                  suffix=scenario, markdown=markdown)


def _record(sample: ModeSample, result: RunResult, backlog: int | None) -> None:
    """Throughput of the run; checkpoint times only of checkpoints taken while records of the
    backlog remained (``backlog``: total records; None = every checkpoint)."""
    sample.throughput.append(job_rate(result))
    during = [m for m in result.completed
              if backlog is None or sum(sum(p.values()) for p in m.barrier_offsets.values()) < backlog]
    sample.checkpoints.append(len(during))
    sample.total_ms += [m.total_ms for m in during]
    sample.barrier_batch_ms += [m.barrier_batch_ms for m in during]
    last = result.completed[-1].event_time if result.completed else None
    sample.late_rows.append(last.rows_dropped_total if last is not None else 0)


def _batch_sizes(spark_checkpoint: Path) -> list[int]:
    """Records per planned batch (all partitions), from Spark's offset log."""
    sizes, previous = [], 0
    for batch in offset_log.planned_batches(spark_checkpoint):
        offsets = offset_log.first_source_partitions(spark_checkpoint, batch) or {}
        total = sum(offsets.values())
        sizes.append(total - previous)
        previous = total
    return sizes


def _stat(values: list[float], fn: Any) -> str:
    return f"{fn(values):,.0f}" if values else "-"


def render(scenario: str, samples: dict[str, ModeSample], spec: StageSpec, seconds: float, rounds: int) -> str:
    lines = [f"Benchmark {scenario} {datetime.now(UTC).isoformat(timespec='seconds')}: {spec.spark.master}, "
             f"{seconds:.0f} s per mode, {rounds} round(s){rounds_note(rounds)}", ""]
    if scenario == "batch-sizing":
        lines += ["| mode | records/s: median (lowest-highest) | checkpoints | completion ms median "
                  "| completion ms max | barrier batch ms median |", "|---|---|---|---|---|---|"]
        for name, s in samples.items():
            lines.append(f"| {name} | {median_spread(s.throughput)} | {sum(s.checkpoints)} "
                         f"| {_stat(s.total_ms, statistics.median)} | {_stat(s.total_ms, max)} "
                         f"| {_stat(s.barrier_batch_ms, statistics.median)} |")
    else:
        lines += ["| mode | records/s: median (lowest-highest) | checkpoints | Spark numRowsDroppedByWatermark (sum) |",
                  "|---|---|---|---|"]
        for name, s in samples.items():
            lines.append(f"| {name} | {median_spread(s.throughput)} | {sum(s.checkpoints)} "
                         f"| {sum(s.late_rows):,} |")
    return "\n".join(lines)
