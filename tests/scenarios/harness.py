"""Crash/restore harness for exactly-once tests.

A *crashed run* is a separate driver process (``python -m barrierflow.cli.main run``) with
``BARRIERFLOW_CRASH_AT`` set: it SIGKILLs itself at the named protocol point. Recovery then
goes through ``barrierflow restore --latest`` when a checkpoint completed (the job rebuilt
from the checkpoint store) or, when none did, through the plain restart path (local Spark
checkpoint plus sink recovery). The final run to the end of the bounded source happens in
the test process on the shared SparkSession, which saves a JVM start per test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import StageSpec, load_spec

from tests.drivers import short_lived_driver_env

FAST_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def windowed_spec(tmp_path: Path, sink: dict[str, Any], *, records: int, per_batch: int = 400,
                  event_time_step_ms: float | None = None, keys: int = 10) -> Path:
    """The demo-style pipeline: generator -> 1 s event-time windows per key (append) -> sink.
    The pipeline name is unique per test, so shared external systems never see a reused
    transaction id. Records are 1 ms of event time apart unless ``event_time_step_ms`` says
    otherwise: with 1 ms a window closes (and an epoch has output to commit) every 1,000
    records of a partition. Each closed window has a row per key (``keys``)."""
    data = {
        "version": 1,
        "name": f"eo{uuid.uuid4().hex[:8]}",
        "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                     "max_records_per_batch": per_batch, "records_per_partition": records, "keys": keys,
                     "malformed_every": 101,
                     **({"event_time_step_ms": event_time_step_ms} if event_time_step_ms is not None else {})}],
        "transformation": {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                           "output_mode": "append", "options": {"window": "1 second"}},
        "event_time": {"column": "event_time", "watermark_delay": "200ms"},
        "sinks": [sink],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "300ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def crashed_run(spec_path: Path, crash_at: str, *, timeout: float = 300, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    """Run the pipeline in a new driver process that crashes at ``crash_at``."""
    return crashed_runs([(spec_path, crash_at)], timeout=timeout, env=env)[0]


def crashed_runs(runs: list[tuple[Path, str]], *, timeout: float = 300, env: dict[str, str] | None = None
                 ) -> list[subprocess.CompletedProcess[str]]:
    """Run several pipelines at once, each in a new driver process that crashes at its
    ``crash_at`` (drivers of different pipelines on one host, as in production); returns
    when all ended, in the order given."""
    import tempfile

    # C1-only JIT, serial GC and the suite's class archive: a faster driver start; workers that
    # import pyspark from site-packages, not from Spark's zip (see tests/drivers.py).
    environment = {**os.environ, **(env or {}), **short_lived_driver_env()}
    started = []
    for spec_path, crash_at in runs:
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        command = [sys.executable, "-m", "barrierflow.cli.main", "run", str(spec_path), "--until-exhausted", "--quiet"]
        process = subprocess.Popen(command, env={**environment, "BARRIERFLOW_CRASH_AT": crash_at}, stdout=out,
                                   stderr=err, text=True)
        started.append((command, process, out, err))
    results = []
    for command, process, out, err in started:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for _, other, _, _ in started:
                other.kill()
            raise
        out.seek(0)
        err.seek(0)
        results.append(subprocess.CompletedProcess(command, process.returncode, out.read(), err.read()))
        out.close()
        err.close()
    return results


def recover(spec_path: Path) -> str:
    """Restore the latest completed checkpoint if there is one; returns how it recovered."""
    spec = load_spec(spec_path)
    if CheckpointStore.for_spec(spec).latest() is None:
        return "restart"  # nothing completed: the plain restart path (local state + sink recovery)
    code = main(["restore", str(spec_path), "--latest"])
    assert code == 0, f"restore exited {code}"
    return "restore"


def finish(spark: Any, spec_path: Path) -> StageSpec:
    """Run to the end of the bounded source in this process."""
    from barrierflow.runtime.job import StreamingJob

    spec = load_spec(spec_path)
    result = StreamingJob(spec, spark=spark, spec_path=str(spec_path)).run(until_exhausted=True, duration=600)
    assert result.completed, "the final run completed no checkpoint"
    return spec


def window_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Output rows as sorted comparable tuples (duplicates kept, so they show)."""
    return sorted((str(r["window_start"]), str(r["window_end"]), int(r["key"]), int(r["count"]),
                   int(r["value_sum"])) for r in rows)


def lost_and_duplicated(rows: list[Any], reference: list[Any]) -> tuple[int, int]:
    """Rows of ``reference`` missing from ``rows``, and rows in ``rows`` beyond ``reference``."""
    from collections import Counter

    got, want = Counter(rows), Counter(reference)
    return sum((want - got).values()), sum((got - want).values())


def assert_sub_multiset(rows: list[tuple[Any, ...]], reference: list[tuple[Any, ...]], when: str) -> None:
    """Committed rows so far must all be reference rows, none twice (duplicates show here,
    at the crash point that caused them; missing rows show at the end)."""
    from collections import Counter

    extra = Counter(rows) - Counter(reference)
    assert not extra, f"after {when}: rows not in the failure-free output or duplicated: {list(extra)[:5]}"


def crash_at_every_point(spec_path: Path, read_rows: Any, reference: list[tuple[Any, ...]],
                         points: tuple[str, ...] | None = None) -> list[str]:
    """Crash a driver at each named protocol point in turn (``points``, default every stage
    point), recovering after each, and check the committed output after every recovery.
    Returns how each recovery went."""
    from barrierflow.faults import STAGE_POINTS

    ways = []
    for point in points or STAGE_POINTS:
        crashed = crashed_run(spec_path, CRASH_AT[point])
        assert crashed.returncode == -9, f"{point}: exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
        assert f"injected crash at {point}" in crashed.stderr
        ways.append(recover(spec_path))
        assert_sub_multiset(read_rows(), reference, f"a crash at {point} and {ways[-1]}")
    return ways


#: The stage points at which a sink holds an epoch of its own (pre-committed, or half committed):
#: what a sink does on recovery differs there. The other two (``mid_epoch``, ``during_upload``)
#: come before any sink call (the write-ahead and the checkpoint's upload are the same for every
#: sink); the crash tests run them against the Parquet sink and name only these for the others.
SINK_HELD_POINTS = ("after_precommit", "after_manifest", "mid_sink_commit")

#: Which hit of each point to crash at, counted in the crashed process: the first, so a crashed
#: driver runs only the micro-batches and checkpoints it needs to get there (every batch of a new
#: driver costs several core-seconds of JIT warm-up). The driver of every crash after the first
#: starts from the previous crashes' restored state, so the crashes still fall mid-stream.
CRASH_AT = {point: f"{point}@1" for point in ("mid_epoch", "during_upload", "after_precommit", "after_manifest",
                                             "mid_sink_commit", "kafka_before_marker", "kafka_after_marker")}


def closed_second_windows(spec_path: Path, records: int, delay: float, *, naive: bool = False,
                          partitions: int = 2) -> list[tuple[Any, ...]]:
    """The 1 s windows (count and sum of ``value`` per key) of the first ``records`` records of
    each of the spec's generator partitions that the final watermark (the newest event time less
    ``delay`` seconds) closed, computed from the generator's own records, as
    :func:`window_rows`; ``naive``: window bounds without their time zone (as Parquet reads them)."""
    model = GeneratorModel(load_spec(spec_path).source)
    groups: dict[tuple[datetime, int], list[int]] = defaultdict(lambda: [0, 0])
    newest = max(model.max_event_time(p, records) for p in range(partitions))
    for p in range(partitions):
        for _p, _o, key, value, t in model.rows(p, 0, records):
            start = datetime.fromtimestamp(t.timestamp() // 1, UTC)
            groups[(start, key)][0] += 1
            groups[(start, key)][1] += value
    closed = newest - timedelta(seconds=delay)

    def bound(moment: datetime) -> datetime:
        return moment.replace(tzinfo=None) if naive else moment

    return window_rows([{"window_start": bound(s), "window_end": bound(s + timedelta(seconds=1)), "key": k,
                         "count": c, "value_sum": v}
                        for (s, k), (c, v) in groups.items() if s + timedelta(seconds=1) <= closed])
