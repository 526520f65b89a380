"""`python -m bench.kafka_source`: both pipelines it compares are valid bounded specs of the same
job (the benchmark itself runs Spark and prints numbers; bench/results/ has its runs), bad
arguments are refused before anything starts, and the side by side's pure parts (plain Spark's
and Flink's rates, the Flink job on Kafka, the ratios) count as bench.rates does."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from barrierflow.errors import UserInputError
from barrierflow.spec import parse_spec

from bench.flink_compare import flink_rate, kafka_job_command
from bench.flink_sql_job import kafka_job_sql, specific_offsets
from bench.kafka_source import connector_rounds, kafka_source, main, pipeline_spec, progress_rate, side_by_side_lines


def test_the_kafka_and_generator_pipelines_differ_only_in_their_source(tmp_path: Path) -> None:
    kafka = parse_spec(pipeline_spec(tmp_path, {"name": "events", "type": "kafka", "bootstrap_servers": "h:9",
                                                "topics": ["t"], "format": "json", "max_records_per_batch": 500,
                                                "json_fields": {"key": "long", "value": "long"}}))
    generator = parse_spec(pipeline_spec(tmp_path, {"name": "events", "type": "generator", "partitions": 4,
                                                    "rows_per_second": 0, "keys": 1000, "max_records_per_batch": 500,
                                                    "records_per_partition": 10}))
    assert kafka.transformation == generator.transformation
    assert [s.type for s in kafka.sinks] == ["discard"] and kafka.checkpoint.interval == 1.0
    assert kafka.source.type == "kafka" and generator.source.type == "generator"


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--records", "2", "--partitions", "4"])
    assert exited.value.code == 2
    assert "--records must be at least --partitions" in capsys.readouterr().err


def test_the_spark_connector_pipeline_differs_from_the_python_readers_only_in_its_reader(tmp_path: Path) -> None:
    python = parse_spec(pipeline_spec(tmp_path, kafka_source("h:9", "t", 500)))
    spark = parse_spec(pipeline_spec(tmp_path, kafka_source("h:9", "t", 500, reader="spark")))
    assert (python.source.reader, spark.source.reader) == ("python", "spark")
    assert spark.source.model_copy(update={"reader": "python"}) == python.source
    assert spark.transformation == python.transformation and spark.checkpoint.interval == 1.0


def _progress(batch: int, at: str, ms: int, rows: int) -> dict[str, object]:
    return {"batchId": batch, "timestamp": at, "durationMs": {"triggerExecution": ms}, "numInputRows": rows}


def test_plain_sparks_rate_leaves_its_first_batch_out_and_skips_batches_without_records() -> None:
    """Batch 0 (400 records) ends at 00:00:02.000, batch 2 at 00:00:06.000 with 1,200 records in
    all: (1,200 - 400) / 4 s; the empty batch 3 and the order of the reports change nothing."""
    reports = [_progress(3, "2026-11-28T00:00:07.000Z", 50, 0),
               _progress(1, "2026-11-28T00:00:02.000Z", 1500, 400),
               _progress(0, "2026-11-28T00:00:00.500Z", 1500, 400),
               _progress(2, "2026-11-28T00:00:04.000Z", 2000, 400)]
    assert progress_rate(reports) == pytest.approx(200.0)
    assert math.isnan(progress_rate(reports[:1] + reports[2:3]))  # one batch with records: no rate after it


def test_the_flink_kafka_job_reads_the_topic_bounded_by_offsets_with_the_connector() -> None:
    assert specific_offsets(1000, 4) == ("partition:0,offset:250;partition:1,offset:250;"
                                         "partition:2,offset:250;partition:3,offset:250")
    with pytest.raises(ValueError, match="at least one record per partition"):
        specific_offsets(3, 4)
    source, sink, insert = kafka_job_sql("127.0.0.1:9092", "events", "first", "partition:0,offset:5")
    assert "'connector' = 'kafka'" in source and "'topic' = 'events'" in source
    assert "'scan.startup.mode' = 'earliest-offset'" in source
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:5'" in source and "'format' = 'json'" in source
    assert "'connector' = 'blackhole'" in sink
    assert insert == "INSERT INTO out_first SELECT `key`, COUNT(*), SUM(`value`) FROM src_first GROUP BY `key`"
    assert "'scan.bounded.mode' = 'latest-offset'" in kafka_job_sql("h:1", "events", "measured", None)[0]
    command = kafka_job_command(Path("/py"), bootstrap="h:1", topic="events", partitions=4, records=1000,
                                interval=1.0, tuned=True, jars=["/a.jar", "/b.jar"])
    assert command[command.index("--jars") + 1] == "/a.jar,/b.jar" and command[-1] == "--tuned"
    assert command[command.index("--kafka") + 1] == "h:1" and "--checkpoint-interval" in command
    with pytest.raises(UserInputError, match="flink-kafka"):
        kafka_job_command(Path("/py"), bootstrap="h:1", topic="events", partitions=4, records=1000, interval=1.0,
                          tuned=False, jars=[])
    # the short run takes the first batch's place: (1,000 - 100) records in (10 - 1) s
    assert flink_rate({"rows": 1000, "seconds": 10.0, "first_rows": 100, "first_seconds": 1.0}) == 100.0


def test_the_side_by_side_prints_each_system_and_the_ratios_it_aims_at() -> None:
    lines = side_by_side_lines({"python": 50.0, "spark": 90.0, "plain": 100.0, "flink tuned": 120.0},
                               {"spark": "ok, 5 batches, 4 checkpoints"})
    table = "\n".join(lines)
    assert "| b. barrierflow, Spark's connector (reader: spark), ABS checkpoints every 1 s (ok, 5 batches, " \
           "4 checkpoints) | 90 |" in table
    assert "untuned (Flink's defaults) |" not in table  # not measured: no row
    ratios = {line.split(" | ")[0]: line.split(" | ")[1].rstrip(" |") for line in lines if line.startswith("| ratio")}
    assert [v for k, v in ratios.items()] == ["0.90", "0.75", "n/a", "0.56", "n/a"]
    assert any("b / c" in k and "aim >= 0.9" in k for k in ratios)
    assert any("b / d tuned" in k and "aim >= 0.8" in k for k in ratios)
    assert side_by_side_lines({"spark": math.nan, "plain": 100.0})[-5].endswith("| n/a |")


def test_the_connector_systems_warm_up_once_then_alternate_and_report_their_median() -> None:
    ran: list[str] = []
    figures = {"spark": iter([1.0, 90.0, 70.0, 80.0]), "plain": iter([2.0, 100.0, 110.0, 90.0])}

    def run(system: str) -> dict[str, object]:
        ran.append(system)
        return {"outcome": "ok", "steady": next(figures[system])}

    out = connector_rounds(run, ["spark", "plain"], 3)
    assert ran == ["spark", "plain", "spark", "plain", "plain", "spark", "spark", "plain"]
    assert out["spark"]["rounds"] == [90.0, 70.0, 80.0] and out["spark"]["steady"] == 80.0  # warm-up dropped
    assert out["plain"]["rounds"] == [100.0, 110.0, 90.0] and out["plain"]["steady"] == 100.0


def test_flink_runs_in_the_same_alternating_rounds_without_a_warm_up() -> None:
    """Flink's runs start a JVM of their own: they take part in every round, in the alternating
    order, and only the Spark systems (one shared JVM) get a warm-up run."""
    ran: list[str] = []

    def run(system: str) -> dict[str, object]:
        ran.append(system)
        return {"outcome": "ok", "steady": float(len(ran))}

    out = connector_rounds(run, ["spark", "flink tuned"], 3, warm_up=["spark"])
    assert ran == ["spark", "spark", "flink tuned", "flink tuned", "spark", "spark", "flink tuned"]
    assert out["flink tuned"]["rounds"] == [3.0, 4.0, 7.0] and out["flink tuned"]["steady"] == 4.0
    assert out["spark"]["rounds"] == [2.0, 5.0, 6.0]


def test_a_failed_round_is_left_out_of_the_median_and_kept_in_the_rounds() -> None:
    figures = iter([math.nan, 300.0, 100.0])
    out = connector_rounds(lambda system: {"outcome": "ok", "steady": next(figures)}, ["flink tuned"], 3,
                           warm_up=[])
    assert out["flink tuned"]["steady"] == 200.0 and math.isnan(out["flink tuned"]["rounds"][0])


def test_side_by_side_options_are_checked_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--side-by-side", "python,storm"], ["--systems", "--side-by-side", "none"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert "--side-by-side takes python, spark, plain, plain-decoder, flink" in capsys.readouterr().err
    from bench.run import main as bench_main

    assert bench_main(["--scenario", "scale", "--systems"]) == 2
    assert "--systems applies to --scenario kafka only" in capsys.readouterr().err
