"""The batch side of a pipeline of two stages, on its final stage's committed output.

One real run, shared by the module: stage ``a`` reads a bounded generator (2 partitions, 1000
records each, 1 ms of event time apart, starting 300 ms before midnight) and writes
channel ``ab`` on the test broker; stage ``b`` reads it, counts per key and 100 ms event-time
window (append) and commits Parquet through the two-phase-commit sink. Then, through the
operations (on the shared SparkSession) and through Airflow's test runner (``dag.test()``; the
rollup and recompute DAGs spark-submit ``jobs/batch_job.py --stage b``):

* the rollups of stage ``b``'s committed output, per UTC day (two days), equal the sums of the
  committed rows, and the report is stored in the stage's own store;
* the recomputation replays stage ``a`` and stage ``b`` in batch from the generator and finds
  the committed output equal; a committed file altered afterwards is reported, naming the row;
* the data-quality DAG validates the stage's newest epochs and rollups, Data Docs in its store.

The channel has one partition, so stage ``b`` reads the rows in the order ``a`` wrote them and
no row is late (the stream would drop it; the batch would count it).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from barrierflow.batch.stage_replay import StageReplayError, replay_final_stage
from barrierflow.ops.batch import recompute, rollup
from barrierflow.pipeline.stage_options import derive_stage_spec
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.spec import parse_staged_spec

from tests.dags.conftest import run_dag
from tests.scenarios.harness import FAST_JVM

# One mark for the module (about 85 s in all alone under load) keeps its tests in file order: the
# in-process rollup test expects no earlier rollup report (the rollup DAG test comes after it).
pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.usefixtures("airflow_db"),
              pytest.mark.timeout(900), pytest.mark.xdist_group("staged-lake"), pytest.mark.slow(20)]

ROOT = Path(__file__).resolve().parents[2]
NAME = "slake"
DAYS = ("2026-01-01", "2026-01-02")
ROLLUP, RECOMPUTE, QUALITY = (f"barrierflow_{kind}__{NAME}__b" for kind in ("rollup", "recompute", "quality"))
FIELDS = {"key": "long", "value": "long", "event_time": "timestamp"}


@dataclass(frozen=True)
class StagedLake:
    root: Path
    pipelines: Path  # BARRIERFLOW_PIPELINES_DIR: holds this spec only
    spec_path: Path
    output: Path  # stage b's sink folder
    stage_store: Path  # stage b's checkpoint store

    def parts(self) -> list[Path]:
        return sorted(self.output.glob("part-*.parquet"))

    def rows(self) -> list[dict[str, Any]]:
        return [r for p in self.parts() for r in pq.read_table(p).to_pylist()]


def staged_spec(root: Path, bootstrap: str) -> dict[str, Any]:
    return {
        "name": NAME, "work_dir": str(root / "work"),
        "channels": [{"name": "ab", "topic": f"ab-{uuid.uuid4().hex[:8]}", "partitions": 1, "bootstrap": bootstrap}],
        "stages": [
            {"name": "a",
             "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0, "keys": 10,
                          "max_records_per_batch": 100, "records_per_partition": 1000,
                          "event_time_start": "2026-01-01T23:59:59.700000+00:00"}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"key": "key", "value": "value", "event_time": "event_time"}}},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "b",
             "sources": [{"type": "channel", "channel": "ab", "max_records_per_batch": 1000, "json_fields": FIELDS}],
             "transformation": {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                                "output_mode": "append", "options": {"window": "100 milliseconds"}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{root / 'out'}"}],
             "batch": {"output_event_interval": "0s"}},
        ],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{root / 'chk'}", "interval": "300ms", "timeout": "120s"},
        "event_time": {"column": "event_time", "watermark_delay": "200ms"},
        "spark": {"master": "local[1]", "shuffle_partitions": 2, "conf": FAST_JVM},  # the batch jobs' spark-submit
        "verification": {
            "output_expectations": str(ROOT / "include" / "expectations" / "demo-output.json"),
            "rollup_expectations": str(ROOT / "include" / "expectations" / "demo-rollups.json"),
        },
    }


@pytest.fixture(scope="module")
def lake(spark: Any, kafka_endpoint: Any, tmp_path_factory: pytest.TempPathFactory) -> StagedLake:
    root = tmp_path_factory.mktemp("staged-lake")
    data = staged_spec(root, kafka_endpoint.bootstrap_servers)
    pipelines = root / "pipelines"
    pipelines.mkdir()
    spec_path = pipelines / f"{NAME}.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = StagedPipelineJob(parse_staged_spec(data), spec_path=str(spec_path), spark=spark).run(
        until_exhausted=True, duration=300)
    assert result.completed and result.elapsed_seconds < 300, "the run did not reach the end of its source"
    made = StagedLake(root, pipelines, spec_path, root / "out", root / "chk" / "stages" / "b")
    assert made.parts(), "stage b committed no output"
    return made


@pytest.fixture
def submit_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """spark-submit of this venv on PATH, no Spark connection (the spec's master is used)."""
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield


def expected_rollups(lake: StagedLake) -> dict[str, dict[int, tuple[int, int, int]]]:
    """day -> key -> (count, value_sum, windows), summed here from the committed rows."""
    sums: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    for r in lake.rows():
        acc = sums[r["window_start"].date().isoformat()][int(r["key"])]
        acc[0] += int(r["count"])
        acc[1] += int(r["value_sum"])
        acc[2] += 1
    return {day: {key: tuple(v) for key, v in keys.items()} for day, keys in sums.items()}  # type: ignore[misc]


def aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def rollup_rows(folder: Path) -> dict[str, dict[int, tuple[int, int, int]]]:
    out: dict[str, dict[int, tuple[int, int, int]]] = {}
    for day in sorted(folder.glob("day=*")):
        rows = [r for f in sorted(day.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        out[day.name.removeprefix("day=")] = {int(r["key"]): (r["count"], r["value_sum"], r["windows"]) for r in rows}
    return out


def test_recompute_refuses_a_stage_that_reads_the_channels_broker_columns(spark: Any, tmp_path: Path) -> None:
    """A Kafka record's timestamp (when the broker appended it) is not in the rows a replay
    recomputes: a transformation that reads it is refused, naming the stage and the column."""
    data = staged_spec(tmp_path, "127.0.0.1:9")
    data["stages"][1]["transformation"] = {"function": "barrierflow.transforms.projection:project",
                                           "options": {"columns": {"key": "key", "appended": "`timestamp`"}}}
    spec = parse_staged_spec(data)
    specs = {s.name: derive_stage_spec(spec, s, work_dir=str(tmp_path), servers={"ab": "127.0.0.1:9"})
             for s in spec.stages}

    with pytest.raises(StageReplayError, match=r"stage 'b' reads the channel's broker column\(s\) \['timestamp'\]"):
        replay_final_stage(spark, spec, specs, "b", None, datetime(2026, 1, 3, tzinfo=UTC))


def test_rollups_of_the_final_stage_sum_its_committed_output_per_day(spark: Any, lake: StagedLake) -> None:
    report = rollup(lake.spec_path, stage="b", spark=spark)

    expected = expected_rollups(lake)
    assert sorted(expected) == list(DAYS)  # the output spans two UTC days
    assert report.pipeline == f"{NAME}-b" and report.days == {d: len(keys) for d, keys in expected.items()}
    assert report.rollups == f"file://{lake.root / 'rollups' / 'b'}"  # rollups/<stage> beside the sink's folder
    assert rollup_rows(lake.root / "rollups" / "b") == expected
    assert (lake.stage_store / "reports" / "rollups-latest.json").is_file()  # in the stage's own store


def test_recompute_replays_both_stages_and_finds_the_committed_output_equal_then_names_an_altered_row(
        spark: Any, lake: StagedLake) -> None:
    report = recompute(lake.spec_path, stage="b", spark=spark)

    assert report.passed and report.difference_count == 0, report.message()
    assert report.stream_rows == report.batch_rows > 40
    assert (lake.stage_store / "reports" / "recompute-latest.json").is_file()

    saved = lake.root / "saved-output"
    shutil.copytree(lake.output, saved)
    try:
        end = datetime.fromisoformat(report.end)
        part = next(p for p in lake.parts() if pq.read_table(p).num_rows
                    and aware(pq.read_table(p).to_pylist()[0]["window_end"]) < end)
        rows = pq.read_table(part).to_pylist()
        changed = {**rows[0], "count": rows[0]["count"] + 1}
        pq.write_table(pa.Table.from_pylist([changed, *rows[1:]], schema=pq.read_schema(part)), part)

        altered = recompute(lake.spec_path, stage="b", spark=spark)
    finally:
        for p in lake.parts():
            p.unlink()
        for p in saved.glob("part-*.parquet"):
            shutil.copy2(p, lake.output / p.name)
        shutil.rmtree(saved)

    assert not altered.passed and altered.difference_count == 1
    (difference,) = altered.differences
    assert (difference.kind, difference.key) == ("changed", {"key": changed["key"]})
    assert difference.stream[0]["count"] == changed["count"] and difference.batch["count"] == changed["count"] - 1  # type: ignore[index]


def test_batch_dags_of_the_final_stage_run_on_its_output(monkeypatch: pytest.MonkeyPatch, lake: StagedLake,
                                                         submit_env: None) -> None:
    run = run_dag(monkeypatch, lake.pipelines, ROLLUP, day=DAYS[1])

    assert run.state == "success", run.log[-6000:]
    assert "batch_job.py rollup" in run.log and "--stage b" in run.log
    report = run.xcom("rollup_report")
    assert report["days"] == {DAYS[1]: len(expected_rollups(lake)[DAYS[1]])} and report["tag"] == run.run_id

    run = run_dag(monkeypatch, lake.pipelines, RECOMPUTE)

    assert run.state == "success", run.log[-6000:]
    assert run.task_states == {"recompute": "success", "compare": "success"}
    summary = run.xcom("compare")
    assert summary["passed"] is True and summary["differences"] == [] and summary["stream_rows"] > 40

    run = run_dag(monkeypatch, lake.pipelines, QUALITY, epochs=100)  # every committed epoch

    assert run.state == "success", run.log[-6000:]
    summary = run.xcom("validate")
    assert summary["passed"] is True and summary["pipeline"] == f"{NAME}-b"
    assert summary["data_docs"] == "reports/quality/index.html"
    outcomes = {o["target"]: o for o in summary["outcomes"]}
    assert outcomes["output"]["expectations"] == 9 and outcomes["output"]["rows"] > 0
    assert outcomes["rollups"]["rows"] == len(expected_rollups(lake)[DAYS[1]]) and not outcomes["rollups"]["skipped"]
    site = lake.stage_store / "reports" / "quality"
    assert (site / "index.html").is_file() and any("validations" in p.parts for p in site.rglob("*.html"))
    assert re.search(r"data quality passed", run.log), run.log[-3000:]
