"""The examples under examples/ run as their READMEs and docs/writing-pipelines.md say.

Each test follows its example's README step by step from the repository root, on the tests'
Kafka broker and throwaway PostgreSQL instead of the embedded broker and a hand-started server
(the addresses go in through the environment variables the specs read), with every path under
the test's directory. ``barrierflow validate --deep`` runs in this process on the shared
SparkSession; ``barrierflow run`` and the example's producer run as the README's commands do,
as processes of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from barrierflow.cli.main import main

from tests.conftest import PROJECT_ROOT
from tests.drivers import short_lived_driver_env
from tests.support.kafka_broker import KafkaEndpoint, partition_records
from tests.support.postgres_server import PostgresEndpoint

#: Each test starts one driver (a Spark JVM) as the README's `barrierflow run` does: about
#: 25-40 s each on an idle two-core machine, 70-145 s on a saturated one.
pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(600), pytest.mark.slow(40)]

EXAMPLES = PROJECT_ROOT / "examples"
RECORDS = 200
WATERMARK_DELAY = timedelta(seconds=30)


def _environment(monkeypatch: pytest.MonkeyPatch, packages: list[str], **variables: str) -> dict[str, str]:
    """The README's exports, in this process (validate) and for the commands it starts."""
    folders = [str(EXAMPLES / p) for p in packages]
    for folder in folders:
        monkeypatch.syspath_prepend(folder)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    path = os.pathsep.join([*folders, os.environ.get("PYTHONPATH", "")])
    return {**os.environ, **short_lived_driver_env(), "PYTHONPATH": path}


def _command(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=480, check=False)
    assert done.returncode == 0, f"{args}: {done.stderr[-4000:]}"
    return done.stdout


def _validate_deep(spec: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["validate", "--deep", str(spec)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def _payments(endpoint: KafkaEndpoint, topic: str) -> list[dict[str, object]]:
    """What the producer wrote, read back with kafka-python (independent of barrierflow)."""
    return [json.loads(r.value) for p in (0, 1) for r in partition_records(endpoint, topic, p)]


def test_user_totals_runs_as_documented(spark: object, kafka_endpoint: KafkaEndpoint,
                                        postgres_endpoint: PostgresEndpoint, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg

    suffix = uuid.uuid4().hex[:8]
    topic, table = f"payments-{suffix}", f"user_minute_totals_{suffix}"
    env = _environment(monkeypatch, ["user-totals"], KAFKA_BOOTSTRAP=kafka_endpoint.bootstrap_servers,
                       BARRIERFLOW_POSTGRES_DSN=postgres_endpoint.dsn, USER_TOTALS_HOME=str(tmp_path),
                       PAYMENTS_TOPIC=topic, USER_TOTALS_TABLE=table)
    spec = EXAMPLES / "user-totals" / "pipeline.yaml"
    ddl = (EXAMPLES / "user-totals" / "table.sql").read_text(encoding="utf-8").replace("user_minute_totals", table)
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        conn.execute(ddl)
        # an external server keeps the commit markers of earlier runs of this pipeline name
        if conn.execute("SELECT to_regclass('barrierflow_commits')").fetchone()[0] is not None:
            conn.execute("DELETE FROM barrierflow_commits WHERE pipeline = 'user-totals'")

    produced = _command(env, "-m", "user_totals.produce", kafka_endpoint.bootstrap_servers, topic,
                        "--records", str(RECORDS))
    assert f"produced {RECORDS} payments" in produced
    assert "transformation of user-totals (checked)" in _validate_deep(spec, capsys)
    _command(env, "-m", "barrierflow.cli.main", "run", str(spec), "--until-exhausted", "--quiet")

    payments = _payments(kafka_endpoint, topic)
    assert len(payments) == RECORDS
    times = {id(p): datetime.fromisoformat(str(p["event_time"])) for p in payments}
    watermark = max(times.values()) - WATERMARK_DELAY
    expected: dict[tuple[datetime, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for p in payments:
        start = times[id(p)].replace(second=0, microsecond=0)
        if start + timedelta(minutes=1) <= watermark:  # windows the watermark closed
            expected[(start, str(p["user_id"]))][0] += float(p["amount"])  # type: ignore[arg-type]
            expected[(start, str(p["user_id"]))][1] += 1
    with psycopg.connect(postgres_endpoint.dsn) as conn:
        rows = conn.execute(f"SELECT window_start, window_end, user_id, total, payments FROM {table}").fetchall()
    got = {(start.astimezone(UTC), user): [total, count] for start, end, user, total, count in rows}
    assert all(end - start == timedelta(minutes=1) for start, end, *_ in rows)
    assert len(rows) == len(got) == 12  # 4 closed minutes x 3 users, each written once
    assert got == expected


def test_large_payments_runs_as_documented(spark: object, kafka_endpoint: KafkaEndpoint, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.kafka_io.committed_output import committed_records

    suffix = uuid.uuid4().hex[:8]
    source, target = f"payments-{suffix}", f"large-payments-{suffix}"
    env = _environment(monkeypatch, ["user-totals", "large-payments"], KAFKA_BOOTSTRAP=kafka_endpoint.bootstrap_servers,
                       LARGE_PAYMENTS_HOME=str(tmp_path), PAYMENTS_TOPIC=source, LARGE_PAYMENTS_TOPIC=target)
    spec = EXAMPLES / "large-payments" / "pipeline.yaml"
    _command(env, "-m", "user_totals.produce", kafka_endpoint.bootstrap_servers, source, "--records", "60")
    _command(env, "-m", "large_payments.topics", kafka_endpoint.bootstrap_servers, target, "__barrierflow_commits")
    assert "(user_id string, amount double, amount_cents bigint, event_time timestamp)" in _validate_deep(spec, capsys)
    _command(env, "-m", "barrierflow.cli.main", "run", str(spec), "--until-exhausted", "--quiet")

    expected = sorted((str(p["user_id"]), float(p["amount"])) for p in _payments(kafka_endpoint, source)  # type: ignore[arg-type]
                      if float(p["amount"]) >= 1.5)  # type: ignore[arg-type]
    records = committed_records(kafka_endpoint.bootstrap_servers, target, "__barrierflow_commits",
                                pipeline="large-payments")
    got = [json.loads(r.value) for r in records]
    assert sorted((row["user_id"], row["amount"]) for row in got) == expected
    assert all(row["amount_cents"] == round(row["amount"] * 100) for row in got)
    assert all(r.key.decode() == json.loads(r.value)["user_id"] for r in records)


def test_two_stages_validate_and_run_as_documented(spark: object, kafka_endpoint: KafkaEndpoint, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.sinks.parquet import read_committed

    records = 300
    env = _environment(monkeypatch, ["two-stages"], ORDER_FLOW_HOME=str(tmp_path),
                       CHANNEL_BOOTSTRAP=kafka_endpoint.bootstrap_servers, ORDER_FLOW_RECORDS=str(records))
    spec = EXAMPLES / "two-stages" / "pipeline.yaml"
    out = _validate_deep(spec, capsys)
    assert "transformation of tag (checked): (partition, offset, key, value, event_time) -> (customer bigint, " \
           "amount bigint, big boolean, event_time timestamp)" in out
    assert "transformation of big (checked)" in out
    _command(env, "-m", "barrierflow.cli.main", "run", str(spec), "--until-exhausted", "--quiet")

    table = read_committed(f"file://{tmp_path}/output")
    assert table is not None
    rows = table.to_pylist()
    assert rows and all(row["amount"] >= 500 for row in rows)
    # the generator's values are deterministic: a batch replay of stage tag over the same
    # records gives the big orders independently of the channel
    from barrierflow.sources.generator import GeneratorModel
    from barrierflow.spec.loader import load_any_spec

    generator = load_any_spec(spec).stages[0].sources[0]  # type: ignore[union-attr]
    model = GeneratorModel(generator)
    expected = sorted((key, value) for p in range(2) for _, _, key, value, _ in model.rows(p, 0, records)
                      if value >= 500)
    assert sorted((row["customer"], row["amount"]) for row in rows) == expected
