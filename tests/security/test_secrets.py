"""No secret leaks (issue 14, item 5): a PostgreSQL-sink pipeline and an S3-store pipeline run
with known, distinctive secrets, and everything they and the tools around them produce is
scanned for those secrets.

The secrets: the password of a PostgreSQL role created for this test (in the DSN, URL-encoded,
in ``BARRIERFLOW_POSTGRES_DSN``), and the AWS access key id and secret access key the moto S3
server is used with (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``). Each contains a token
``S3CR3T<hex>`` unique to the run and characters that URL encoding changes. The throwaway
PostgreSQL server checks the role's password (scram-sha-256); moto accepts any keys.

What runs, each through its real path:

* ``secretpg``: generator -> 1 s windows -> PostgreSQL sink (2PC), checkpoint store on S3.
  Launched by Airflow: ``barrierflow_pipeline__secretpg`` through ``dag.test()`` (spark-submit
  of the streaming job, a new driver inheriting the worker's environment, then ``supervise``).
* ``secrets3``: the same with a local Parquet sink and the checkpoint store on S3, run in this
  process (``ops.run.run``) with the CLI's live progress line. Its output stays local because
  the shared session's Python workers started before the test set the keys.
* Airflow's ``verify``, ``reconcile`` and ``skew`` DAGs of both pipelines; the CLI's reports of
  both (``checkpoints list``/``show``, ``verify`` with ``--json`` and ``--html``, ``skew`` with
  ``--json`` and ``--html``, ``reconcile --dry-run``, ``retain --dry-run``, ``restore --latest``);
  and two failures (the DSN pointing at a closed port, and with a wrong password), where
  messages carrying connection details are most likely.

Scanned, for each secret in raw, URL-encoded, form-encoded and base64 form and for its token
alone: every file under the test's directory (specs, work dirs with Spark's checkpoint and the
sink's staging, the Parquet output, the HTML reports), every object in the S3 bucket
(manifests, ledger entries, shared files, stored reports), everything written to this
process's file descriptors 1 and 2 (the CLI's output and JSON reports, the progress line, the
JVM's log), every log record (DEBUG for ``barrierflow``, INFO for the rest, as ``-v`` shows),
every Airflow run's task log (with the spark-submit driver's output), every XCom row of those
runs, and every file under ``AIRFLOW_HOME`` (the metadata database as raw bytes). Compressed
data files (Parquet pages, Spark's state deltas) are scanned as stored bytes: the secrets could
only reach them through the data, which carries none.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import psycopg
import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.cli.run import _progress_line
from barrierflow.local_ports import free_port
from barrierflow.ops.run import run
from barrierflow.spec import load_spec
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.dags.conftest import DagRunResult, run_dag
from tests.drivers import short_lived_driver_java_options
from tests.scenarios.harness import FAST_JVM
from tests.support.postgres_server import PostgresEndpoint, restartable_postgres
from tests.support.s3_server import S3Endpoint

PG_PIPELINE = "secretpg"
S3_PIPELINE = "secrets3"
DSN_ENV = "BARRIERFLOW_POSTGRES_DSN"


# -- the secrets and the scan -------------------------------------------------------------------


@dataclass(frozen=True)
class Secret:
    """One secret value; ``token`` is a distinctive part of it that no encoding changes."""

    what: str
    value: str
    token: str

    @classmethod
    def make(cls, what: str, template: str) -> Secret:
        """A fresh secret from ``template`` ("{token}" is replaced by ``S3CR3T<32 hex>``)."""
        token = f"S3CR3T{uuid.uuid4().hex}"
        return cls(what, template.format(token=token), token)

    def forms(self) -> dict[str, bytes]:
        """Every form the scan looks for, by name: the value raw, URL-encoded (as in a DSN),
        form-encoded, base64 (as in a Basic auth header) and the token alone."""
        return {"raw": self.value.encode(), "url-encoded": quote(self.value, safe="").encode(),
                "form-encoded": quote_plus(self.value).encode(),
                "base64": base64.b64encode(self.value.encode()), "token": self.token.encode()}


@dataclass
class Scan:
    """Everything scanned, by category (items and bytes), and every place a secret was found."""

    secrets: list[Secret]
    items: Counter[str] = field(default_factory=Counter)
    size: Counter[str] = field(default_factory=Counter)
    leaks: list[str] = field(default_factory=list)

    def data(self, category: str, where: str, data: bytes | str) -> None:
        """Scan one item (a file, an object, an output, a log, an XCom value)."""
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        self.items[category] += 1
        self.size[category] += len(raw)
        for secret in self.secrets:
            for form, needle in secret.forms().items():
                at = raw.find(needle)
                if at >= 0:
                    context = raw[max(0, at - 120):at + len(needle) + 40].decode("utf-8", "replace")
                    self.leaks.append(f"{secret.what} ({form}) in {category} {where}: ...{context}...")

    def tree(self, root: Path, category: Callable[[str], str]) -> None:
        """Scan every file under ``root``; ``category(relative_posix_path)`` names its category."""
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            self.data(category(path.relative_to(root).as_posix()), str(path), path.read_bytes())

    def bucket(self, client: Any, bucket: str, category: Callable[[str], str]) -> None:
        """Scan every object of an S3 bucket (all keys, paginated); ``category(key)`` names its category."""
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                self.data(category(item["Key"]), f"s3://{bucket}/{item['Key']}", body)


def store_category(key: str) -> str:
    """The category of a checkpoint-store file by its key relative to the store."""
    if re.fullmatch(r"chk-\d+/_metadata\.json", key):
        return "manifest"
    if re.fullmatch(r"ledger/[^/]+/txn-\d+\.json", key):
        return "ledger entry"
    if key.startswith("reports/"):
        return "stored report (html)" if key.endswith(".html") else "stored report"
    return "checkpoint store file"


def local_category(relative: str) -> str:
    """The category of a file under the test's directory (``<pipeline>/work/...``,
    ``<pipeline>/out/...``, ``pipelines/*.yaml``, ``reports/*.html``)."""
    top, _, rest = relative.partition("/")
    if top == "reports":
        return "report (html)" if rest.endswith(".html") else "report file"
    if top == "pipelines":
        return "spec"
    part = rest.partition("/")[0]
    return {"work": "work dir file", "out": "output file"}.get(part, "local file")


def s3_category(key: str) -> str:
    """The category of an object in the test's bucket (``<pipeline>/checkpoints/<store key>``)."""
    _pipeline, part, rest = key.split("/", 2)
    return store_category(rest) if part == "checkpoints" else "s3 object"


# -- the systems, with the secrets ----------------------------------------------------------------


@dataclass(frozen=True)
class SecretDatabase:
    """A role with a password and a database it owns, on the test server; ``dsn`` has both."""

    dsn: str
    role: str
    database: str
    table: str


@pytest.fixture
def own_postgres() -> Iterator[PostgresEndpoint]:
    """A throwaway server of this test, always: it is reached as superuser (to create the
    role) and its ``pg_hba.conf`` is changed, which an environment's server must not be."""
    with restartable_postgres() as server:
        yield server.endpoint


@pytest.fixture
def secret_database(own_postgres: PostgresEndpoint, password: Secret) -> Iterator[SecretDatabase]:
    """A fresh role ``bf_secret_<hex>`` with ``password`` and its own database holding the
    pipeline's table; dropped afterwards (the server is reached as the endpoint's superuser).

    On the throwaway server, which trusts 127.0.0.1, the role alone must authenticate with its
    password (scram-sha-256, a line put first in ``pg_hba.conf`` and taken out afterwards), so
    the password really travels; the fixture waits until a wrong password is refused."""
    suffix = uuid.uuid4().hex[:10]
    role, database, table = f"bf_secret_{suffix}", f"bf_secret_{suffix}", "windows"
    admin = own_postgres.dsn
    params = conninfo_to_dict(admin)
    host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
    dsn = f"postgresql://{role}:{quote(password.value, safe='')}@{host}:{port}/{database}"
    hba: Path | None = None
    original_hba = ""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                     sql.Literal(password.value)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role)))
        found = conn.execute("SHOW hba_file").fetchone()
        assert found is not None
        hba = Path(str(found[0]))
        original_hba = hba.read_text(encoding="utf-8")
        hba.write_text(f"host all {role} {host}/32 scram-sha-256\n{original_hba}", encoding="utf-8")
        conn.execute("SELECT pg_reload_conf()")
        wait_until_refused(dsn.replace(quote(password.value, safe=""), "wrong"))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (window_start timestamptz, window_end timestamptz, key bigint, "
                         "count bigint, value_sum bigint)")
        yield SecretDatabase(dsn, role, database, table)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            if hba is not None:
                hba.write_text(original_hba, encoding="utf-8")
                conn.execute("SELECT pg_reload_conf()")
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def wait_until_refused(dsn: str, timeout: float = 30.0) -> None:
    """Return once the server refuses ``dsn`` for its password (it reloaded ``pg_hba.conf``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=5).close()
        except psycopg.OperationalError as exc:
            if "password authentication failed" in str(exc):
                return
            raise
        assert time.monotonic() < deadline, f"the server still accepts a wrong password after {timeout:.0f} s"
        time.sleep(0.05)


@pytest.fixture
def password() -> Secret:
    """The PostgreSQL role's password; '/' and '+' change under URL encoding."""
    return Secret.make("PostgreSQL password", "pw/{token}+x")


@pytest.fixture
def aws_keys() -> tuple[Secret, Secret]:
    """The AWS access key id and secret access key (moto accepts any)."""
    return (Secret.make("AWS access key id", "AKIA{token}"),
            Secret.make("AWS secret access key", "sk/{token}+aws="))


def windowed_pipeline(tmp_path: Path, name: str, sink: dict[str, Any], storage: str, spark: dict[str, Any]
                      ) -> dict[str, Any]:
    """The demo-style pipeline (generator -> 1 s event-time windows per key -> ``sink``), small."""
    return {
        "version": 1,
        "name": name,
        "work_dir": str(tmp_path / name / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                     "max_records_per_batch": 300, "records_per_partition": 600, "keys": 10,
                     "event_time_step_ms": 20}],
        "transformation": {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                           "output_mode": "append", "options": {"window": "1 second"}},
        "event_time": {"column": "event_time", "watermark_delay": "200ms"},
        "sinks": [sink],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": storage, "interval": "300ms", "timeout": "120s"},
        "spark": spark,
    }


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as YAML to ``path`` (creating its folder); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def cli(capfd: pytest.CaptureFixture[str], outputs: list[tuple[str, str, str]], *argv: str, expect: int = 0) -> str:
    """Run ``barrierflow ARGV`` in this process and check its exit code; its stdout and stderr
    go to ``outputs`` (category, command, text) for the scan. Returns both, joined."""
    code = main(list(argv))
    out, err = capfd.readouterr()
    outputs.append(("report (json)" if "--json" in argv else "command output", f"barrierflow {' '.join(argv)}",
                    out + err))
    assert code == expect, f"barrierflow {' '.join(argv)} exited {code}, not {expect}:\n{out}\n{err}"
    return out + err


def xcom_rows(dag_runs: list[DagRunResult]) -> list[tuple[str, Any]]:
    """Every XCom row (every key, every task) of ``dag_runs``, from the metadata database."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    rows = []
    with create_session() as session:
        for dag_run in dag_runs:
            for row in session.query(XComModel).filter(XComModel.dag_id == dag_run.dag_id,
                                                       XComModel.run_id == dag_run.run_id).all():
                rows.append((f"{row.dag_id}/{row.run_id}/{row.task_id}/{row.key}", row.value))
    return rows


# -- the tests ------------------------------------------------------------------------------------


def test_the_scan_finds_a_secret_in_every_form_it_looks_for() -> None:
    """The scanner itself: each form planted in text is reported, naming the form; clean text is not."""
    secret = Secret.make("password", "pw/{token}+x")
    for form, needle in secret.forms().items():
        scan = Scan([secret])
        scan.data("log record", "planted", b"before " + needle + b" after")
        assert any(f"password ({form}) in log record planted" in leak for leak in scan.leaks), (form, scan.leaks)
    clean = Scan([secret])
    clean.data("log record", "clean", f"pw {secret.token[:-1]} {secret.value[:12]}")  # parts only
    assert clean.leaks == [] and clean.items["log record"] == 1


@pytest.mark.spark
@pytest.mark.s3
@pytest.mark.postgres
@pytest.mark.slow(90)
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("airflow_db")
def test_no_secret_in_any_log_manifest_ledger_report_progress_line_airflow_log_or_xcom(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture, s3_endpoint: S3Endpoint,
    secret_database: SecretDatabase, password: Secret, aws_keys: tuple[Secret, Secret], airflow_home: Path,
) -> None:
    access_key, secret_key = aws_keys
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="barrierflow")
    monkeypatch.setenv(DSN_ENV, secret_database.dsn)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access_key.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret_key.value)
    # The launch task runs spark-submit from this interpreter's environment (PATH) and, as a
    # short-lived driver, with the suite's JVM options.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("_JAVA_OPTIONS", short_lived_driver_java_options())
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    bucket = f"bf-secrets-{uuid.uuid4().hex[:12]}"
    s3 = S3Endpoint(url=s3_endpoint.url, access_key_id=access_key.value, secret_access_key=secret_key.value,
                    region=s3_endpoint.region)
    s3.create_bucket(bucket)

    pipelines = tmp_path / "pipelines"
    # Launched by spark-submit, a new driver with this environment: sink and checkpoint store
    # both use secrets.
    pg_spec = write_yaml(pipelines / f"{PG_PIPELINE}.yaml", windowed_pipeline(
        tmp_path, PG_PIPELINE, {"name": "out", "type": "postgres", "table": secret_database.table},
        f"s3://{bucket}/{PG_PIPELINE}/checkpoints", {"master": "local[1]", "shuffle_partitions": 2,
                                                     "conf": FAST_JVM}))
    # Run in this process on the shared session (same settings, so nothing changes for other
    # tests), whose Python workers started before the keys were set: the output stays local,
    # the checkpoint store (written by the driver) is on S3.
    s3_spec = write_yaml(pipelines / f"{S3_PIPELINE}.yaml", windowed_pipeline(
        tmp_path, S3_PIPELINE, {"name": "out", "type": "parquet", "path": f"file://{tmp_path / S3_PIPELINE / 'out'}"},
        f"s3://{bucket}/{S3_PIPELINE}/checkpoints", {"master": "local[2]", "shuffle_partitions": 4}))
    outputs: list[tuple[str, str, str]] = []  # (category, what produced it, text)

    # 1. The S3-store pipeline in this process, with the CLI's progress line.
    outcome = run(s3_spec, until_exhausted=True, progress=_progress_line, progress_every=0.2)
    out, err = capfd.readouterr()
    outputs.append(("command output", "the S3 pipeline's run (stdout; stderr with the progress line)", out + err))
    progress_lines = [line for line in err.splitlines() if line.startswith("batch=")]
    assert outcome.result.completed and progress_lines, err[-3000:]

    # 2. The PostgreSQL-sink pipeline through Airflow: the launch DAG (spark-submit), then supervise.
    dag_runs = [run_dag(monkeypatch, pipelines, f"barrierflow_pipeline__{PG_PIPELINE}",
                        max_checkpoint_age_seconds=3600)]
    assert dag_runs[0].state == "success", dag_runs[0].log[-5000:]
    assert dag_runs[0].task_states == {"launch": "success", "supervise": "success"}
    assert f"pipeline {PG_PIPELINE} (1 stage, attempt " in dag_runs[0].log, (
        "the driver's output is not in the launch task's log")
    with psycopg.connect(secret_database.dsn) as conn:
        committed = conn.execute(f"SELECT count(*) FROM {secret_database.table}").fetchone()
    assert committed is not None and committed[0] > 0, "the PostgreSQL sink committed no rows"

    # 3. Airflow's checks of both pipelines (their results are XComs).
    for name in (PG_PIPELINE, S3_PIPELINE):
        for kind in ("verify", "reconcile", "skew"):
            dag_runs.append(run_dag(monkeypatch, pipelines, f"barrierflow_{kind}__{name}"))
            assert dag_runs[-1].state == "success", dag_runs[-1].log[-5000:]
    out, err = capfd.readouterr()
    outputs.append(("command output", "the Airflow runs (what dag.test() did not capture)", out + err))

    # 4. The CLI's reports of both, JSON and HTML.
    reports = tmp_path / "reports"
    reports.mkdir()
    for name, spec in ((PG_PIPELINE, pg_spec), (S3_PIPELINE, s3_spec)):
        latest = CheckpointStore.for_spec(load_spec(spec)).latest()
        assert latest is not None, f"{name}: no completed checkpoint"
        checkpoint = str(latest.checkpoint_id)
        cli(capfd, outputs, "-v", "checkpoints", "list", str(spec))
        cli(capfd, outputs, "checkpoints", "list", str(spec), "--json")
        cli(capfd, outputs, "checkpoints", "show", str(spec), checkpoint)
        cli(capfd, outputs, "-v", "verify", str(spec), "--json", "--html", str(reports / f"verify-{name}.html"))
        cli(capfd, outputs, "-v", "skew", str(spec), "--json", "--html", str(reports / f"skew-{name}.html"))
        cli(capfd, outputs, "-v", "reconcile", str(spec), "--dry-run", "--json")
        cli(capfd, outputs, "retain", str(spec), "--dry-run", "--json")
        cli(capfd, outputs, "-v", "restore", str(spec), "--latest", "--json")

    # 5. Failures with the connection details in play: the DSN points at a closed port, or
    # carries a wrong password (which contains the token too) when the server checks it.
    port = conninfo_to_dict(secret_database.dsn)["port"]
    monkeypatch.setenv(DSN_ENV, secret_database.dsn.replace(f":{port}/", f":{free_port()}/"))
    failed = cli(capfd, outputs, "-v", "reconcile", str(pg_spec), "--dry-run", expect=1)
    assert "error: postgres sink 'out'" in failed, failed
    encoded = quote(password.value, safe="")
    monkeypatch.setenv(DSN_ENV, secret_database.dsn.replace(encoded, f"{encoded}-wrong"))
    failed = cli(capfd, outputs, "-v", "reconcile", str(pg_spec), "--dry-run", expect=1)
    assert "password authentication failed" in failed, failed

    # The scan.
    scan = Scan([password, access_key, secret_key])
    scan.tree(tmp_path, local_category)
    scan.bucket(s3.client(), bucket, s3_category)
    for category, where, text in outputs:
        scan.data(category, where, text)
    for line in progress_lines:
        scan.data("progress line", "the S3 pipeline's run", line)
    for record in caplog.records:
        scan.data("log record", f"{record.name}:{record.lineno}", record.getMessage())
    scan.data("log record", "every record formatted, with tracebacks", caplog.text)
    for dag_run in dag_runs:
        scan.data("Airflow task log", f"{dag_run.dag_id}/{dag_run.run_id}", dag_run.log)
    for where, value in xcom_rows(dag_runs):
        scan.data("Airflow XCom", where, repr(value))
    scan.tree(airflow_home, lambda relative: ("Airflow log file" if relative.startswith("logs/")
                                              else "Airflow metadata DB" if relative.startswith("airflow.db")
                                              else "AIRFLOW_HOME file"))

    print("scanned:", {category: f"{scan.items[category]} items, {scan.size[category]} bytes"
                       for category in sorted(scan.items)})
    assert not scan.leaks, "secrets found:\n" + "\n".join(scan.leaks[:20])
    # Not vacuous: every kind of thing the item names was produced and scanned.
    for category in ("manifest", "ledger entry", "stored report", "checkpoint store file", "work dir file",
                     "output file", "report (json)", "report (html)", "command output", "progress line",
                     "log record", "Airflow task log", "Airflow XCom", "Airflow metadata DB"):
        assert scan.items[category] > 0, f"nothing of kind {category!r} was scanned: {dict(scan.items)}"
