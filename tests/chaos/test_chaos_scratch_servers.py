"""A spec opts into the chaos DAG (``chaos: {dag: true}``) only with scratch servers for what the
copies create on servers (PostgreSQL tables, Kafka topics), and the copies are pointed at them
while the sources stay where they are (a copy only reads them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.chaos.scratch import scratch_copy
from barrierflow.errors import SpecError
from barrierflow.spec import parse_spec, parse_staged_spec


def staged(**chaos: Any) -> dict[str, Any]:
    """Two stages over a channel on a real cluster: Kafka in, PostgreSQL and Kafka out."""
    data: dict[str, Any] = {
        "version": 1, "name": "two", "work_dir": "/data/two/work",
        "channels": [{"name": "ab", "topic": "orders.ab", "bootstrap": "prod-kafka:9092"}],
        "stages": [
            {"name": "a", "sources": [{"name": "in", "type": "kafka", "bootstrap_servers": "prod-kafka:9092",
                                       "topics": ["orders"]}],
             "transformation": {"function": "barrierflow.transforms.projection:project"},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}],
             "transformation": {"function": "barrierflow.transforms.projection:project"},
             "sinks": [{"name": "pg", "type": "postgres", "table": "public.totals"},
                       {"name": "out", "type": "kafka", "bootstrap_servers": "prod-kafka:9092", "topic": "totals"}]}],
        "checkpoint": {"storage": "file:///data/two/chk"}}
    if chaos:
        data["chaos"] = chaos
    return data


def single_postgres(**chaos: Any) -> dict[str, Any]:
    return {"version": 1, "name": "orders",
            "sources": [{"name": "events", "type": "generator", "records_per_partition": 100}],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"name": "pg", "type": "postgres", "table": "totals", "dsn_env": "ORDERS_DSN"}],
            "checkpoint": {"storage": "file:///data/orders/chk"}, "chaos": chaos}


def test_the_chaos_dag_without_scratch_servers_is_refused_naming_each_sink_and_the_field() -> None:
    with pytest.raises(SpecError) as refused:
        parse_staged_spec(staged(dag=True))
    message = str(refused.value)
    assert "chaos.postgres_dsn_env" in message and "stage 'b' sink 'pg'" in message
    assert "chaos.kafka_bootstrap_servers" in message and "stage 'b' sink 'out'" in message
    assert "channel 'ab'" in message and "remove chaos.dag" in message
    with pytest.raises(SpecError, match=r"chaos\.postgres_dsn_env"):
        parse_spec(single_postgres(dag=True))


def test_a_scratch_server_that_is_the_pipelines_own_is_refused() -> None:
    with pytest.raises(SpecError, match="the sink's own dsn_env ORDERS_DSN"):
        parse_spec(single_postgres(dag=True, postgres_dsn_env="ORDERS_DSN"))
    with pytest.raises(SpecError, match=r"chaos\.kafka_bootstrap_servers is the sink's own cluster"):
        parse_staged_spec(staged(dag=True, postgres_dsn_env="CHAOS_DSN", kafka_bootstrap_servers="prod-kafka:9092"))


def test_scratch_servers_let_the_spec_opt_in_and_without_the_dag_nothing_is_required() -> None:
    spec = parse_staged_spec(staged(dag=True, postgres_dsn_env="CHAOS_DSN", kafka_bootstrap_servers="scratch:9092"))
    assert spec.chaos is not None and spec.chaos.dag
    assert parse_spec(single_postgres(dag=True, postgres_dsn_env="CHAOS_DSN")).chaos.dag  # type: ignore[union-attr]
    assert parse_staged_spec(staged()).chaos is None  # `barrierflow chaos` by hand: no DAG, nothing required
    assert parse_spec(single_postgres()).chaos.dag is False  # type: ignore[union-attr]


def test_the_copies_write_on_the_scratch_servers_and_read_the_sources_where_they_are(tmp_path: Path) -> None:
    raw = staged(dag=True, postgres_dsn_env="CHAOS_DSN", kafka_bootstrap_servers="scratch:9092")
    data, outputs = scratch_copy(raw, copy_name="ref", root=tmp_path / "ref", stamp="20261125194501")
    spec = parse_staged_spec(data)
    pg, out = spec.stage("b").sinks
    assert pg.dsn_env == "CHAOS_DSN" and pg.table == "public.totals_chaos_194501_ref"  # type: ignore[union-attr]
    assert out.bootstrap_servers == "scratch:9092"  # type: ignore[union-attr]
    assert out.topic == "totals.chaos-20261125194501-ref"  # type: ignore[union-attr]
    assert spec.channel("ab").bootstrap == "scratch:9092"
    assert spec.stage("a").sources[0].bootstrap_servers == "prod-kafka:9092"  # type: ignore[union-attr]
    assert spec.chaos is None  # the copy is no pipeline of a chaos DAG
    assert [(o.kind, o.target) for o in outputs] == [
        ("postgres", "public.totals_chaos_194501_ref"), ("kafka", "totals.chaos-20261125194501-ref")]
    assert raw["stages"][1]["sinks"][0].get("dsn_env") is None and raw["chaos"]["dag"]  # the input is not changed


def test_without_scratch_servers_the_copies_keep_the_specs_servers(tmp_path: Path) -> None:
    data, _ = scratch_copy(staged(), copy_name="ref", root=tmp_path / "ref", stamp="20261125194501")
    spec = parse_staged_spec(data)
    assert spec.stage("b").sinks[0].dsn_env == "BARRIERFLOW_POSTGRES_DSN"  # type: ignore[union-attr]
    assert spec.channel("ab").bootstrap == "prod-kafka:9092"
