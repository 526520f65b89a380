"""``barrierflow.testing``'s pipeline runner refuses what it cannot bound or read back, naming the
field and the fix, before it starts anything; its throwaway PostgreSQL is a server a sink can use.
(The runs themselves: the generated projects' tests in test_init.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from barrierflow.errors import UserInputError
from barrierflow.testing import run_bounded, throwaway_postgres

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
    (GENERATOR, PARQUET, None, "generator source 'events' is unbounded: give run_bounded records_per_partition"),
    (KAFKA, PARQUET, 10, "read to its topics' end offsets as of the start; drop records_per_partition"),
    ({**KAFKA, "starting_offsets": "latest"}, PARQUET, None, "set sources[0].starting_offsets to 'earliest'"),
    (GENERATOR, {"name": "out", "type": "discard"}, 10, "parquet, postgres or kafka sink (sinks[0] type)"),
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
