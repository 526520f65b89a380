"""Restore time for a large state (shared/design/BENCHMARKS.md: "restore plus first completed
batch in under 10 s for 100 MB of state").

Per round, on the reference job with ``keys`` distinct keys:

1. build the state: run with 1M-record batches until two checkpoints completed (the first
   batch touches every key), then stop;
2. lose the machine: delete the job's work directory (local Spark checkpoint included);
3. ``restore_pipeline`` from the latest checkpoint (materialize every file from the store,
   sha256 checked) — timed;
4. restart on the same SparkSession with small batches and time until the first batch after
   the restored one is committed (it loads the whole restored state) — timed, and split into
   Spark's own execution of that batch (its progress event's ``triggerExecution``) and the rest
   (the run's start-up and any wait before the batch's trigger);
5. baseline: stop and restart once more without a restore (Spark's own restart from its
   local checkpoint, which loads the same state) — timed the same way. The difference
   between 3+4 and 5 is what barrierflow's restore adds to what Spark costs anyway.

Reported: the checkpoint's full size (bytes of every file it references), both times and
their sum. The SparkSession start (JVM, cold) is measured once and reported separately:
a restarted driver pays it on top.

``state_stores`` (``bench --state-store hdfs rocksdb``): the providers to measure
(``spark.state_store``); each round runs every one of them in turn, on the same
SparkSession, so that the figures of different providers come from the same moments.

It prints what it ran (command, commit, date, cores, load average, rounds) above the table and
writes the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every round's figures
(:mod:`bench.record`), to bench/results/restore-time/, or to ``--markdown FILE`` and ``FILE``
with ``.json``.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.recovery.restore import restore_pipeline
from barrierflow.runtime.job import StreamingJob
from barrierflow.spark import commit_log
from barrierflow.spec import load_spec, project_home
from barrierflow.spec.models import GeneratorSourceSpec, StageSpec
from barrierflow.workdir.layout import JobLayout

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report

#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "restore-time"


@dataclass(frozen=True)
class RestoreSample:
    state_store: str
    state_bytes: int
    files: int
    restore_seconds: float
    first_batch_seconds: float
    plain_restart_seconds: float
    #: Spark's ``triggerExecution`` of the first batch after the restore / after the plain restart
    #: (NaN: its progress event was not seen).
    first_trigger_seconds: float = float("nan")
    plain_trigger_seconds: float = float("nan")

    @property
    def total_seconds(self) -> float:
        return self.restore_seconds + self.first_batch_seconds


def state_spec(base: StageSpec, work: Path, keys: int, per_partition_batch: int, state_store: str) -> StageSpec:
    """``base`` (a generator source) with ``keys`` distinct keys, ``per_partition_batch`` records
    per partition and batch, ``state_store`` (``spark.state_store``), its work dir under
    ``work/work`` and its checkpoint store ``work/checkpoints`` (1 s interval, 600 s timeout).
    The restore and upgrade scenarios build their large state with it. Raises ValueError for a
    ``base`` without a generator source."""
    source = base.source
    if not isinstance(source, GeneratorSourceSpec):
        raise ValueError("the restore benchmark needs a generator source")
    source = source.model_copy(update={"keys": keys, "max_records_per_batch": per_partition_batch})
    checkpoint = base.checkpoint.model_copy(update={"storage": f"file://{work / 'checkpoints'}", "interval": 1.0,
                                                    "timeout": 600.0})
    spark = base.spark.model_copy(update={"state_store": state_store})
    return base.model_copy(update={"work_dir": str(work / "work"), "checkpoint": checkpoint, "sources": [source],
                                   "spark": spark})


def run_restore_benchmark(spec_path: str, *, keys: int, rounds: int, markdown: str | None = None,
                          state_stores: tuple[str, ...] = ("hdfs",), results: Path | None = RESULTS,
                          command: str | None = None) -> list[RestoreSample]:
    """Measure (module docstring) ``rounds`` times for each of ``state_stores``; print the table
    and write the record to ``markdown`` if given, else into ``results`` (None: no record);
    ``command``: the command line the record names."""
    base = load_spec(spec_path)
    if not isinstance(base.source, GeneratorSourceSpec):
        raise ValueError("the restore benchmark needs a generator source")
    record = RunRecord.start("restore", command)
    # The HDFS-backed state store keeps the loaded map (and recent versions) on the driver's heap.
    conf = {"spark.driver.memory": "4g", **base.spark.conf}
    base = base.model_copy(update={"spark": base.spark.model_copy(update={"conf": conf})})
    partitions = base.source.partitions
    root = project_home() / "var" / "bench-restore"
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    spark = StreamingJob(base).spark
    session_seconds = time.monotonic() - started
    samples = []
    for r in range(rounds):
        for state_store in state_stores:
            work = root / f"r{r}-{state_store}"
            build = state_spec(base, work, keys, max(250_000, -(-keys // partitions)), state_store)
            print(f"round {r + 1}, {state_store}: building the state of {keys:,} keys ...", file=sys.stderr)
            StreamingJob(build, spark=spark).run(checkpoints=2, duration=600)
            shutil.rmtree(JobLayout.for_spec(build).work_dir)  # the machine is gone
            small = state_spec(base, work, keys, 2_500, state_store)
            t0 = time.monotonic()
            report = restore_pipeline(small, None)
            restore_seconds = time.monotonic() - t0
            first_batch, first_trigger = _time_to_first_batch(small, spark, report.spark_batch_id)
            local = commit_log.latest_committed(JobLayout.for_spec(small).spark_checkpoint)
            plain, plain_trigger = _time_to_first_batch(small, spark, local if local is not None else -1)
            sample = RestoreSample(state_store, report.bytes, report.files, restore_seconds, first_batch, plain,
                                   first_trigger, plain_trigger)
            samples.append(sample)
            print(f"round {r + 1}, {state_store}: {sample.state_bytes / 1e6:.1f} MB in {sample.files} files: restore "
                  f"{sample.restore_seconds:.2f} s + first batch {sample.first_batch_seconds:.2f} s (its trigger "
                  f"{sample.first_trigger_seconds:.2f} s); plain restart {sample.plain_restart_seconds:.2f} s (its "
                  f"trigger {sample.plain_trigger_seconds:.2f} s)", file=sys.stderr)
            shutil.rmtree(work, ignore_errors=True)
    record_run(record, samples, base, keys=keys, rounds=rounds, session_seconds=session_seconds, markdown=markdown,
               results=results)
    return samples


def record_run(record: RunRecord, samples: list[RestoreSample], spec: StageSpec, *, keys: int, rounds: int,
               session_seconds: float, markdown: str | None, results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    with every round's sample; returns the paths written."""
    figures = {"pipeline": spec.name, "keys": keys, "session_seconds": session_seconds,
               "samples": [{**asdict(s), "total_seconds": s.total_seconds} for s in samples]}
    return report(record, f"Restore of {keys:,} keys, pipeline {spec.name}", rounds,
                  render(samples, spec, keys, session_seconds).splitlines(), figures, results_dir=results,
                  markdown=markdown)


def _time_to_first_batch(spec: StageSpec, spark: Any, after_batch: int) -> tuple[float, float]:
    """Run ``spec`` until one checkpoint completed. Returns the seconds from the start of the run
    until a batch newer than ``after_batch`` was committed, and that batch's ``triggerExecution``
    in seconds from its progress event (NaN for what was not seen)."""
    started = time.monotonic()
    first: list[float] = []
    trigger: list[float] = []

    def on_tick(job: StreamingJob) -> None:
        committed = commit_log.latest_committed(job.layout.spark_checkpoint)
        if not first and committed is not None and committed > after_batch:
            first.append(time.monotonic() - started)
        if first and not trigger and job.query is not None:
            trigger.extend(first_trigger_seconds(job.query.recentProgress, after_batch))

    StreamingJob(spec, spark=spark).run(checkpoints=1, duration=600, on_tick=on_tick)
    return (first[0] if first else float("nan")), (trigger[0] if trigger else float("nan"))


def first_trigger_seconds(progress: list[Any], after_batch: int) -> list[float]:
    """``[seconds]``: the ``triggerExecution`` of the first progress event in ``progress``
    (Spark's ``recentProgress``: dicts) for a batch newer than ``after_batch``; ``[]`` if none is
    there yet."""
    for event in progress:
        if event.get("batchId", -1) > after_batch and "triggerExecution" in event.get("durationMs", {}):
            return [event["durationMs"]["triggerExecution"] / 1000.0]
    return []


def render(samples: list[RestoreSample], spec: StageSpec, keys: int, session_seconds: float) -> str:
    lines = [
        f"Restore benchmark {datetime.now(UTC).isoformat(timespec='seconds')}: pipeline {spec.name}, {keys:,} keys, "
        f"{spec.spark.master}, {spec.spark.shuffle_partitions} shuffle partitions, local checkpoint store; "
        f"SparkSession start (cold JVM, once): {session_seconds:.1f} s",
        "",
        "| state store | round | checkpoint size MB | files | restore s (materialize + sha256) "
        "| first batch after restart s (its trigger) | restore + first batch s "
        "| plain Spark restart, first batch s (its trigger) (baseline) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    stores = list(dict.fromkeys(s.state_store for s in samples))
    for store in stores:
        mine = [s for s in samples if s.state_store == store]
        for i, s in enumerate(mine, 1):
            lines.append(f"| {store} | {i} | {s.state_bytes / 1e6:.1f} | {s.files} | {s.restore_seconds:.2f} "
                         f"| {s.first_batch_seconds:.2f} ({s.first_trigger_seconds:.2f}) | {s.total_seconds:.2f} "
                         f"| {s.plain_restart_seconds:.2f} ({s.plain_trigger_seconds:.2f}) |")
        if len(mine) > 1:
            lines.append(f"| {store} | median | {statistics.median(s.state_bytes for s in mine) / 1e6:.1f} | - "
                         f"| {statistics.median(s.restore_seconds for s in mine):.2f} "
                         f"| {statistics.median(s.first_batch_seconds for s in mine):.2f} "
                         f"({statistics.median(s.first_trigger_seconds for s in mine):.2f}) "
                         f"| {statistics.median(s.total_seconds for s in mine):.2f} "
                         f"| {statistics.median(s.plain_restart_seconds for s in mine):.2f} "
                         f"({statistics.median(s.plain_trigger_seconds for s in mine):.2f}) |")
    return "\n".join(lines)
