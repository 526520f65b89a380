"""`python -m bench.kafka_source`: both pipelines it compares are valid bounded specs of the same
job (the benchmark itself runs Spark and prints numbers; docs/benchmarks.md has a run), and
bad arguments are refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.spec import parse_spec

from bench.kafka_source import main, pipeline_spec


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
