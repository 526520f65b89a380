"""The stages scenario (bench/results/stages/): aligned against unaligned checkpoints
of a three-stage pipeline with one slow input partition.

Stages ``x`` and ``y`` read throttled generators (``rate`` records/s per partition, two
partitions each) and write channels ``c1`` and ``c2`` (two partitions each, on the embedded
Kafka-protocol broker); stage ``z`` reads both channels and writes Parquet through the
two-phase-commit sink. ``z`` reads partition 1 of ``c1`` ten times slower than the others
(``partition_rate_factors: [1, 0.1]``), so a backlog builds up there and each barrier on that
partition sits behind it: what backpressure does to a Flink task's input channel.

Per mode (aligned; aligned with a 1 s ``alignment_timeout``; unaligned), a fresh pipeline runs
for ``seconds`` with a checkpoint every ``interval`` seconds. Reported per mode, over the
completed global checkpoints after the first: checkpoint duration (trigger to global
manifest; the output of an epoch becomes visible then, so it is also the output latency of the
epoch's last record), stage ``z``'s alignment time, its channel-state records, and the failed
checkpoints; the ratio of unaligned to aligned median durations is printed. Every mode runs in
one SparkSession, one after the other.

It prints what it ran (command, commit, date, cores, load average) above the table and writes
the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every checkpoint's figures per mode
(:mod:`bench.record`), to bench/results/stages/, or to ``--markdown FILE`` and ``FILE`` with
``.json``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.checkpointing.global_store import GlobalCheckpointStore
from barrierflow.spec import parse_staged_spec, project_home

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report

MODES = (("aligned", "aligned", 0.0), ("aligned, 1 s timeout", "aligned", 1.0), ("unaligned", "unaligned", 0.0))
TIMED_OUT = MODES[1][0]
SLOW_FACTOR = 0.1
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "stages"


@dataclass(frozen=True)
class ModeFigures:
    mode: str
    completed: int
    failed: int
    duration_ms: list[float]
    alignment_ms: list[float]
    channel_state_records: list[int]
    #: Age in ms, when the run ended, of the global checkpoint still in flight (0: none).
    in_flight_ms: float = 0.0
    #: Stage z's barrier batch (planned to committed; its manifest's ``barrier_batch_ms``).
    batch_ms: tuple[float, ...] = ()

    @staticmethod
    def _median(values: list[float] | list[int]) -> float:
        return float(statistics.median(values)) if values else float("nan")

    @property
    def median_duration_ms(self) -> float:
        return self._median(self.duration_ms)

    def row(self) -> str:
        worst = max(self.duration_ms) if self.duration_ms else float("nan")
        return (f"| {self.mode} | {self.completed} | {self.failed} | {self.median_duration_ms:.0f} | {worst:.0f} "
                f"| {self.in_flight_ms:.0f} | {self._median(self.alignment_ms):.0f} "
                f"| {self._median(self.channel_state_records):.0f} | {self._median(list(self.batch_ms)):.0f} |")


def stages_spec(work: Path, servers: str, *, mode: str, alignment_timeout: float, interval: float,
                rate: float) -> dict[str, Any]:
    """The benchmark's three-stage spec (a plain dict, as a YAML file would hold it)."""
    suffix = uuid.uuid4().hex[:8]
    columns = {"src_partition": "partition", "src_offset": "offset", "key": "key", "value": "value"}
    fields = {"src_partition": "long", "src_offset": "long", "key": "long", "value": "long"}

    def upstream(name: str, channel: str) -> dict[str, Any]:
        return {"name": name,
                "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": rate,
                             "max_records_per_batch": int(rate), "keys": 100}],
                "transformation": {"function": "barrierflow.transforms.projection:project",
                                   "options": {"columns": columns}},
                "sinks": [{"type": "channel", "channel": channel}]}

    checkpoint: dict[str, Any] = {"storage": f"file://{work / 'checkpoints'}", "interval": interval,
                                  "timeout": 60.0, "mode": mode, "tolerable_failed_checkpoints": 1000}
    if alignment_timeout:
        checkpoint["alignment_timeout"] = alignment_timeout
    return {
        "version": 1, "name": f"bench-stages-{suffix}", "work_dir": str(work / "work"),
        "channels": [{"name": c, "topic": f"{c}-{suffix}", "partitions": 2, "bootstrap": servers}
                     for c in ("c1", "c2")],
        "stages": [
            upstream("x", "c1"), upstream("y", "c2"),
            {"name": "z",
             "sources": [{"type": "channel", "channel": "c1", "max_records_per_batch": int(rate),
                          "json_fields": fields, "partition_rate_factors": [1.0, SLOW_FACTOR]},
                         {"type": "channel", "channel": "c2", "max_records_per_batch": int(rate),
                          "json_fields": fields}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"topic": "topic", "src_partition": "src_partition",
                                                        "src_offset": "src_offset"}}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{work / 'out'}"}]},
        ],
        "trigger": {"interval": 0.25},
        "checkpoint": checkpoint,
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }


def run_mode(label: str, mode: str, alignment_timeout: float, *, servers: str, work: Path, seconds: float,
             interval: float, rate: float, spark: Any = None, processes: bool = False) -> ModeFigures:
    """Run one mode on a fresh pipeline and collect its figures (``processes``: every stage in
    a process and Spark application of its own, as ``run --processes``)."""
    import yaml
    from barrierflow.runtime.pipeline import StagedPipelineJob

    shutil.rmtree(work, ignore_errors=True)
    data = stages_spec(work, servers, mode=mode, alignment_timeout=alignment_timeout, interval=interval, rate=rate)
    spec = parse_staged_spec(data)
    if processes:
        from barrierflow.runtime.stage_processes import process_driver

        work.mkdir(parents=True, exist_ok=True)
        path = work / "stages.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        job = StagedPipelineJob(spec, spec_path=str(path))
        result = process_driver(job.pipeline).run(duration=seconds)
    else:
        job = StagedPipelineJob(spec, spark=spark)
        result = job.run(duration=seconds)
    ended = datetime.now(UTC)
    measured = result.completed[1:]  # the first one includes the queries' start
    batches = tuple(float(json.loads(job.objects.get_bytes(m.stages["z"].manifest)).get("barrier_batch_ms", 0.0))
                    for m in measured)
    return ModeFigures(label, len(result.completed), len(result.failed), [m.total_ms for m in measured],
                       [m.stages["z"].alignment_ms for m in measured],
                       [m.stages["z"].channel_state_records for m in measured], _in_flight_ms(job.global_store, ended),
                       batches)


def _in_flight_ms(store: GlobalCheckpointStore, ended: datetime) -> float:
    """Age at ``ended`` of the newest global checkpoint triggered but neither completed nor failed
    (0: none)."""
    open_ids = store.unfinished_ids()
    trigger = store.trigger(open_ids[-1]) if open_ids else None
    if trigger is None:
        return 0.0
    return (ended - trigger.trigger_time).total_seconds() * 1000


def render(figures: list[ModeFigures], *, seconds: float, interval: float, rate: float,
           processes: bool = False) -> str:
    shape = "a process per stage (--processes)" if processes else "every stage in one driver"
    lines = [
        f"Stages: x, y -> z, {rate:g} records/s per source partition, z reads c1 partition 1 at "
        f"{SLOW_FACTOR:g}x; checkpoint every {interval:g} s, {seconds:g} s per mode; {shape}.",
        "",
        "| mode | completed | failed | median duration ms | max duration ms | in flight at the end, ms "
        "| median z alignment ms | median z channel-state records | median z barrier batch ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(f.row() for f in figures),
    ]
    by_mode = {f.mode: f for f in figures}
    aligned, unaligned = by_mode.get("aligned"), by_mode.get("unaligned")
    if aligned and unaligned and aligned.duration_ms and unaligned.duration_ms:
        ratio = unaligned.median_duration_ms / aligned.median_duration_ms
        lines += ["", f"Unaligned / aligned median duration: {ratio:.2f}; unaligned median "
                      f"{unaligned.median_duration_ms / 1000 / interval:.2f}x the interval (target: within 2x)."]
    elif aligned and unaligned and unaligned.duration_ms:
        lines += ["", f"No aligned checkpoint completed after the first within the run (the one in flight at the end "
                      f"was {aligned.in_flight_ms / 1000:.1f} s old: its barrier sat behind the slow partition's "
                      f"backlog); unaligned median {unaligned.median_duration_ms / 1000:.1f} s, "
                      f"{unaligned.median_duration_ms / 1000 / interval:.2f}x the interval (target: within 2x)."]
    timed = by_mode.get(TIMED_OUT)
    if timed and timed.duration_ms and timed.batch_ms:
        timeout = MODES[1][2]
        bound = interval + timeout + statistics.median(timed.batch_ms) / 1000
        lines += ["", f"Aligned with a {timeout:g} s timeout: median {timed.median_duration_ms / 1000:.2f} s against "
                      f"interval + timeout + z's median barrier batch = {bound:.2f} s (target: within it)."]
    return "\n".join(lines)


def run_stages_benchmark(*, seconds: float = 60.0, interval: float = 1.0, rate: float = 20_000.0,
                         markdown: str | None = None, processes: bool = False, results: Path | None = RESULTS,
                         command: str | None = None) -> list[ModeFigures]:
    """``python -m bench --scenario stages``: every mode in turn, then the table (``rate``:
    records/s per source partition; default 20,000). The run's record goes to ``markdown`` if
    given, else into ``results`` (None: no record); ``command``: the command line it names."""
    from barrierflow.kafka_io.embedded_broker import embedded_broker

    record = RunRecord.start("stages", command)

    work_root = project_home() / "var" / "bench" / "stages"
    figures = []
    for label, mode, timeout in MODES:
        # A fresh broker per mode: the embedded broker's CPU grows with what its data dir holds,
        # so a mode run after the others on one broker would pay for their records.
        with embedded_broker() as servers:
            figures.append(run_mode(label, mode, timeout, servers=servers, work=work_root / mode.replace(" ", "-")
                                    / str(int(timeout)), seconds=seconds, interval=interval, rate=rate,
                                    processes=processes))
    record_run(record, figures, seconds=seconds, interval=interval, rate=rate, processes=processes,
               markdown=markdown, results=results)
    return figures


def record_run(record: RunRecord, figures: list[ModeFigures], *, seconds: float, interval: float, rate: float,
               processes: bool, markdown: str | None, results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    with every measured checkpoint's figures per mode; returns the paths written."""
    document = {"seconds": seconds, "interval": interval, "rate": rate, "processes": processes,
                "slow_factor": SLOW_FACTOR, "modes": [asdict(f) for f in figures]}
    table = render(figures, seconds=seconds, interval=interval, rate=rate, processes=processes)
    return report(record, f"Stages, aligned against unaligned, {seconds:g} s per mode", 1, table.splitlines(),
                  document, results_dir=results, markdown=markdown)
