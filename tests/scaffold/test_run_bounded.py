"""``barrierflow.testing``'s pipeline runner refuses what it cannot bound or read back, naming the
field and the fix, before it starts anything, and runs a pipeline of several stages as one of
one; its throwaway PostgreSQL is a server a sink can use. (Single-stage runs of every source and
sink: the generated projects' tests in test_init.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from barrierflow.errors import UserInputError
from barrierflow.testing import run_bounded, throwaway_postgres

from tests.support.kafka_broker import KafkaEndpoint
from tests.support.postgres_server import PostgresEndpoint


def _spec(tmp_path: Path, source: dict[str, object], sink: dict[str, object]) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "version": 1, "name": "p", "sources": [source], "sinks": [sink],
        "transformation": {"function": "barrierflow.transforms.projection:project"},
        "checkpoint": {"storage": "file://var/p/checkpoints"}}))
    return path


GENERATOR = {"name": "events", "type": "generator"}
KAFKA = {"name": "events", "type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topics": ["t"]}
PARQUET = {"name": "out", "type": "parquet", "path": "file://var/p/out"}


@pytest.mark.parametrize(("source", "sink", "records", "message"), [
    (GENERATOR, PARQUET, None, "generator source 'events' (sources[0]) is unbounded: give run_bounded records_per_"),
    (KAFKA, PARQUET, 10, "read to its topics' end offsets as of the start; drop records_per_partition"),
    ({**KAFKA, "starting_offsets": "latest"}, PARQUET, None, "set sources[0].starting_offsets to 'earliest'"),
    (GENERATOR, {"name": "out", "type": "discard"}, 10,
     "parquet, postgres, kafka, iceberg or delta sink (sinks[0] type)"),
    (GENERATOR, {"name": "out", "type": "postgres", "table": "t", "dsn_env": "NO_SUCH_DSN_FOR_THIS_TEST"}, 10,
     "from $NO_SUCH_DSN_FOR_THIS_TEST, which is unset"),
])
def test_run_bounded_refuses_what_it_cannot_bound_or_read_back(
        tmp_path: Path, source: dict[str, object], sink: dict[str, object], records: int | None, message: str) -> None:
    with pytest.raises(UserInputError) as refused:
        run_bounded(_spec(tmp_path, source, sink), tmp_path / "run", records_per_partition=records, home=tmp_path)
    assert message in str(refused.value)
    assert not (tmp_path / "run").exists()  # nothing ran


@pytest.mark.postgres
def test_run_bounded_refuses_a_postgres_sink_whose_table_does_not_exist(
        tmp_path: Path, postgres_endpoint: PostgresEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUN_BOUNDED_TEST_DSN", postgres_endpoint.dsn)
    sink = {"name": "out", "type": "postgres", "table": "no_such_table_of_run_bounded",
            "dsn_env": "RUN_BOUNDED_TEST_DSN"}
    with pytest.raises(UserInputError) as refused:
        run_bounded(_spec(tmp_path, GENERATOR, sink), tmp_path / "run", records_per_partition=10, home=tmp_path)
    assert "table 'no_such_table_of_run_bounded', which does not exist" in str(refused.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.postgres
def test_the_throwaway_postgres_allows_prepared_transactions_and_is_removed() -> None:
    import psycopg

    with throwaway_postgres() as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert int(conn.execute("SHOW max_prepared_transactions").fetchone()[0]) > 0  # type: ignore[index]
            assert conn.execute("SELECT current_database()").fetchone() == ("pipeline_test",)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)


TWO_STAGES = """
version: 1
name: two
channels:
  - name: tagged
    partitions: 2
    bootstrap: embedded
stages:
  - name: tag
    sources:
      - name: events
        type: generator
        partitions: 2
        max_records_per_batch: 40
        keys: 10
    transformation:
      function: barrierflow.transforms.projection:project
      options:
        columns: {src_partition: partition, src_offset: offset, key: key, value: value}
    sinks:
      - type: channel
        channel: tagged
  - name: out
    sources:
      - type: channel
        channel: tagged
        json_fields: {src_partition: long, src_offset: long, key: long, value: long}
    transformation:
      function: barrierflow.transforms.projection:project
      options:
        columns: {src_partition: src_partition, src_offset: src_offset, key: key, value: value}
    sinks:
      - name: results
        type: parquet
        path: file://var/two/output
checkpoint:
  storage: file://var/two/checkpoints
spark:
  shuffle_partitions: 2
"""


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow(20)
def test_run_bounded_runs_a_pipeline_of_several_stages(spark: object, tmp_path: Path) -> None:
    spec = tmp_path / "two.yaml"
    spec.write_text(TWO_STAGES)
    run = run_bounded(spec, tmp_path / "run", records_per_partition=60, home=tmp_path)
    assert list(run.outputs) == ["out"]  # the final stage's sink; the channel is not an output
    expected = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in run.source_records)
    assert len(expected) == 120 and {r["stage"] for r in run.source_records} == {"tag"}
    assert sorted((r["src_partition"], r["src_offset"], r["key"], r["value"]) for r in run.output) == expected


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow(20)
def test_the_final_stage_of_two_writes_a_kafka_sink_its_executors_encode(
        spark: object, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """The same two stages with a Kafka sink at the end (its micro-batches written ahead as its
    records by the executors): every source record committed once."""
    suffix = uuid.uuid4().hex[:8]
    kafka_sink = ("      - name: results\n        type: kafka\n"
                  f"        bootstrap_servers: {kafka_endpoint.bootstrap_servers}\n"
                  f"        topic: two-out-{suffix}\n        commit_marker_topic: two-commits-{suffix}\n"
                  "        key_column: key\n")
    parquet_sink = "      - name: results\n        type: parquet\n        path: file://var/two/output\n"
    assert parquet_sink in TWO_STAGES
    spec = tmp_path / "two.yaml"
    spec.write_text(TWO_STAGES.replace(parquet_sink, kafka_sink))
    run = run_bounded(spec, tmp_path / "run", records_per_partition=60, home=tmp_path)
    expected = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in run.source_records)
    assert len(expected) == 120
    assert sorted((r["src_partition"], r["src_offset"], r["key"], r["value"]) for r in run.output) == expected



@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow(20)
def test_the_final_stage_of_two_writes_a_postgres_sink_from_copy_input(
        spark: object, postgres_endpoint: PostgresEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same two stages with a PostgreSQL sink at the end (its micro-batches written ahead as
    COPY input by the executors, COPYed at the pre-commit): every source record committed once."""
    import psycopg

    table = f"two_out_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RUN_BOUNDED_TWO_DSN", postgres_endpoint.dsn)
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (src_partition bigint, src_offset bigint, key bigint, value bigint)")
    postgres_sink = ("      - name: results\n        type: postgres\n"
                     f"        table: {table}\n        dsn_env: RUN_BOUNDED_TWO_DSN\n")
    parquet_sink = "      - name: results\n        type: parquet\n        path: file://var/two/output\n"
    spec = tmp_path / "two.yaml"
    spec.write_text(TWO_STAGES.replace(parquet_sink, postgres_sink))
    run = run_bounded(spec, tmp_path / "run", records_per_partition=60, home=tmp_path)
    expected = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in run.source_records)
    assert len(expected) == 120
    assert sorted((r["src_partition"], r["src_offset"], r["key"], r["value"]) for r in run.output) == expected
