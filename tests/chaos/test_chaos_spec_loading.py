"""``barrierflow chaos`` reads the spec as ``run`` does: ``${VAR}`` and ``${VAR:-default}`` are
expanded before the copies are made, so the table chaos copies is the one the pipeline writes.
Without Spark: each run is a stand-in process that inserts one row into its copy's PostgreSQL
table (the Spark run of chaos is in tests/scenarios/test_chaos.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from barrierflow.chaos import runner
from barrierflow.cli.main import main
from barrierflow.spec.loader import load_spec_data

from tests.support.postgres_server import PostgresEndpoint

DSN_ENV = "CHAOS_LOADING_DSN"

#: Stands in for ``barrierflow run COPY``: one row into the copy's table, named as the copy's
#: spec names it (so an unexpanded ``${...}`` there would fail the insert).
INSERT_ONE_ROW = f"""
import os, sys, yaml, psycopg
from psycopg import sql
spec = yaml.safe_load(open(sys.argv[1]))
sink = spec["sinks"][0]
with psycopg.connect(os.environ["{DSN_ENV}"], autocommit=True) as conn:
    conn.execute(sql.SQL("INSERT INTO {{}} VALUES ('u1', 42.5)").format(sql.Identifier(sink["table"])))
"""


def _spec(tmp_path: Path) -> Path:
    data = {"version": 1, "name": "totals-env", "work_dir": "${CHAOS_LOADING_HOME:-var}/work",
            "sources": [{"name": "events", "type": "generator", "partitions": 1, "records_per_partition": 3}],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"name": "totals", "type": "postgres", "dsn_env": DSN_ENV,
                       "table": "${CHAOS_LOADING_TABLE:-user_minute_totals_unused}"}],
            "checkpoint": {"storage": "file://${CHAOS_LOADING_HOME:-var}/checkpoints"}}
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return spec


def test_chaos_reads_the_expanded_spec_run_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_LOADING_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CHAOS_LOADING_TABLE", "totals_from_env")
    monkeypatch.setenv("KAFKA_PASSWORD_FOR_TEST", "not-in-any-file")
    data = load_spec_data(_spec(tmp_path))
    assert data["sinks"][0]["table"] == "totals_from_env"
    assert data["work_dir"] == str(tmp_path / "home" / "work")
    assert data["checkpoint"]["storage"] == f"file://{tmp_path / 'home' / 'checkpoints'}"
    # A secret stays as written: chaos writes this mapping into its copies' spec files.
    secret = tmp_path / "secret.yaml"
    secret.write_text(yaml.safe_dump({"name": "p", "sources": [{"client": {
        "password": "${KAFKA_PASSWORD_FOR_TEST}", "username": "${CHAOS_LOADING_TABLE}"}}]}), encoding="utf-8")
    client = load_spec_data(secret)["sources"][0]["client"]
    assert client == {"password": "${KAFKA_PASSWORD_FOR_TEST}", "username": "totals_from_env"}


@pytest.mark.slow(10)
def test_chaos_copies_the_table_an_env_expanded_spec_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        postgres_endpoint: PostgresEndpoint) -> None:
    table = f"totals_{tmp_path.name[-12:].replace('-', '_').lower()}"
    monkeypatch.setenv(DSN_ENV, postgres_endpoint.dsn)
    monkeypatch.setenv("CHAOS_LOADING_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CHAOS_LOADING_TABLE", table)
    monkeypatch.setattr(runner, "_run_command",
                        lambda spec_path, processes: [sys.executable, "-c", INSERT_ONE_ROW, str(spec_path)])
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (user_id text, amount double precision)")

    code = main(["chaos", str(_spec(tmp_path)), "--kills", "1", "--min-gap", "60", "--max-gap", "60",
                 "--scratch", str(tmp_path / "scratch"), "--json"])
    report = json.loads(capsys.readouterr().out)

    # Both copies' tables were made like the user's (the expanded name) and each got its row;
    # the stand-in ends before its kill, so the verdict says that, not a missing table.
    assert code == 1 and report["problem"].startswith("the pipeline reached the end of its sources after 0 of")
    [output] = report["outputs"]
    assert output["rows_expected"] == output["rows"] == 1 and output["missing"] == output["extra"] == 0, output
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)


@pytest.mark.kafka
@pytest.mark.slow(15)
def test_chaos_on_the_shipped_user_totals_spec_finds_its_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        postgres_endpoint: PostgresEndpoint, kafka_endpoint: Any) -> None:
    """examples/user-totals as shipped (its table named ``${USER_TOTALS_TABLE:-user_minute_totals}``,
    created by its table.sql): chaos gets past the table check to the runs. The stand-in runs
    write nothing, so chaos then refuses with nothing to compare (not with a missing table)."""
    from tests.support.kafka_broker import create_topic

    project = Path(__file__).resolve().parents[2]
    table = f"user_totals_{tmp_path.name[-12:].replace('-', '_').lower()}"
    topic = f"payments-{tmp_path.name[-12:].replace('_', '-').lower()}"
    create_topic(kafka_endpoint, topic, 1)
    for name, value in {"KAFKA_BOOTSTRAP": kafka_endpoint.bootstrap_servers, "PAYMENTS_TOPIC": topic,
                        "USER_TOTALS_TABLE": table, "USER_TOTALS_HOME": str(tmp_path / "home"),
                        "BARRIERFLOW_POSTGRES_DSN": postgres_endpoint.dsn}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(runner, "_run_command", lambda spec_path, processes: [sys.executable, "-c", "pass"])
    ddl = (project / "examples" / "user-totals" / "table.sql").read_text(encoding="utf-8")
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        conn.execute(ddl.replace("user_minute_totals", table))

    code = main(["chaos", str(project / "examples" / "user-totals" / "pipeline.yaml"), "--kills", "1",
                 "--scratch", str(tmp_path / "scratch")])
    err = capsys.readouterr().err

    assert code == 2 and "does not exist" not in err, err
    assert "committed no row" in err or "nothing to compare" in err.lower(), err
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:  # the copies' tables, like the user's
        copies = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_name LIKE %s",
                              (f"{table}%",)).fetchone()
    assert copies is not None and copies[0] == 3, copies
