"""The files of a new project, for each source and sink ``init`` offers.

Every project is the same pipeline over a different source and sink: per key and tumbling
10-second event-time window, the sum of ``value`` and the number of records (output mode append:
each (window, key) is written once, after the watermark passed it), with RocksDB state, a Great
Expectations suite on its state (deep verification, the upgrade canary) and on its output, and a
test that runs it with :func:`barrierflow.testing.run_bounded` against the servers it starts
itself (Kafka, PostgreSQL) and compares what the sink committed with the windows it computes
from the input on its own.

:func:`project_files` gives the files as :class:`string.Template` texts (``$name``: the project
and pipeline name, ``$package``: its Python package, ``$test_command``: how to run its tests);
keys are paths relative to the project folder, with ``$package`` and ``$name`` substituted too.
"""

from __future__ import annotations

import json
from string import Template
from typing import Any

#: The sources ``init --source`` offers (the first is the default).
SOURCES = ("generator", "kafka")
#: The sinks ``init --sink`` offers (the first is the default).
SINKS = ("parquet", "postgres", "kafka", "iceberg", "delta")

_HEADER = """\
# The $name pipeline: $source_line
# -> $package.transform:window_sums (per key and 10-second event-time window: the sum of value,
# the number of records) -> $sink_line, with exactly-once checkpoints.
# Relative paths (var/..., expectations/..., the package) are the project folder's: run barrierflow
# with BARRIERFLOW_HOME set to it (unset, a spec's paths are taken from its folder).
# Fields: barrierflow's docs/pipeline-spec.md.
version: 1
name: $name
description: Per key and 10-second event-time window, the sum of value and the number of records.
"""

_GENERATOR_SOURCE = """\
sources:
  - name: events
    type: generator        # deterministic records (partition, offset, key, value, event_time);
    partitions: 2          # barrierflow init --source kafka writes a Kafka-fed project
    rows_per_second: 4     # per partition; with event_time_step_ms 250, event time keeps wall-clock pace
    event_time_step_ms: 250
    max_records_per_batch: 1000
    keys: 10
"""

_KAFKA_SOURCE = """\
sources:
  - name: events
    type: kafka
    bootstrap_servers: $${KAFKA_BOOTSTRAP:-localhost:9092}
    topics: [$name-events]
    starting_offsets: earliest
    max_records_per_batch: 1000   # per partition and batch
    format: json                  # each record a JSON object with these fields:
    json_fields: {key: string, value: long, event_time: timestamp}
"""

_TRANSFORMATION = """\
transformation:
  function: $package.transform:window_sums
  output_mode: append
  options:
    window: 10 seconds
event_time:
  column: event_time
  watermark_delay: 5s      # a window is written once the newest event time is this far past its end
"""

_SINKS = {
    "parquet": """\
sinks:
  - name: results
    type: parquet
    path: file://var/$name/output
""",
    "postgres": """\
sinks:
  - name: results
    type: postgres
    dsn_env: BARRIERFLOW_POSTGRES_DSN   # the connection string comes from this variable
    table: ${package}_window_sums       # created by sql/tables.sql (barrierflow never creates it)
""",
    "kafka": """\
sinks:
  - name: results
    type: kafka
    bootstrap_servers: $${KAFKA_BOOTSTRAP:-localhost:9092}
    topic: $name-window-sums   # it and __barrierflow_commits (the commit markers) must exist
    key_column: key
""",
    "iceberg": """\
sinks:
  - name: results
    type: iceberg
    table: lake.${package}_window_sums   # created from the output at the first start
    # catalog: the default is pyiceberg's SQL catalog on a SQLite file in the work dir (nothing to
    # start); a shared catalog: {type: sql, uri_env: ICEBERG_CATALOG_URI, warehouse: s3://...}
""",
    "delta": """\
sinks:
  - name: results
    type: delta
    path: file://var/$name/tables/window_sums   # or s3://BUCKET/PREFIX; created by the first commit
""",
}

_RUN = """\
trigger:
  interval: 500ms
checkpoint:
  storage: file://var/$name/checkpoints
  interval: 2s
  retained: 5
spark:
  master: local[2]         # under spark-submit (the Airflow launch) its --master wins
  shuffle_partitions: 2
  # RocksDB keeps the state off the JVM heap, restores fastest, and is what barrierflow upgrade
  # rescales and rewrites (the HDFS-backed default store can never be rescaled).
  state_store: rocksdb
  # Shipped to the driver and every executor with each job (zipped; SparkContext.addPyFile),
  # so that a cluster's workers import the transformation's code without installing it.
  py_packages: [$package]
verification:
  # Great Expectations suite run on a checkpoint's state by deep verification
  # (barrierflow verify SPEC --deep) and by the upgrade canary.
  expectations: expectations/$name-state.json
"""

_OUTPUT_SUITE_FIELD = """\
  # Suite of the data-quality DAG (barrierflow quality SPEC) on the committed output.
  output_expectations: expectations/$name-output.json
"""

PACKAGE_INIT = Template('''\
"""The code of the $name pipeline (pipelines/$name.yaml)."""
''')

TRANSFORM = Template('''\
"""The transformation of the $name pipeline (pipelines/$name.yaml, transformation.function).

barrierflow calls :func:`window_sums` once, when a job starts, with the source's streaming
DataFrame (columns key, value, event_time among others) and writes the DataFrame it returns.
``ctx.options`` is the spec's ``transformation.options``; ``ctx.with_watermark`` applies the spec's
``event_time`` (column and watermark delay).
"""

from __future__ import annotations

from barrierflow.transforms import TransformContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def window_sums(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Per key and tumbling event-time window (``options.window``): the sum of ``value``
    (``value_sum``) and the number of records (``records``). Output mode append: each (window,
    key) row is written once, after the watermark (the newest event time minus
    ``event_time.watermark_delay``) passed the window's end."""
    window = str(ctx.options["window"])
    return (
        ctx.with_watermark(df)
        .groupBy(F.window(ctx.event_time_column, window).alias("w"), F.col("key"))
        .agg(F.sum("value").alias("value_sum"), F.count(F.lit(1)).alias("records"))
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                "key", "value_sum", "records")
    )
''')

_TEST_HEADER = '''\
"""The $name pipeline end to end:
$source_line -> window sums -> $sink_line.

``run_bounded`` (barrierflow.testing) runs the spec in a local Spark on a bounded input
$bound_note, with every path under ``tmp_path``, until everything
is committed, and returns its input and what the sink committed. The test computes the windows
the watermark closed from the input on its own and compares them with the committed rows: a
lost or duplicated row fails it.$servers_note
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from barrierflow.testing import run_bounded

PROJECT = Path(__file__).resolve().parents[1]
SPEC = PROJECT / "pipelines" / "$name.yaml"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def closed_windows(records: Iterable[tuple[Any, int, datetime]], window: timedelta,
                   watermark_delay: timedelta) -> dict[tuple[datetime, Any], tuple[int, int]]:
    """(window start, key) -> (sum of value, number of records) of the tumbling windows the
    watermark closed: those ending at or before the newest event time minus the delay."""
    records = list(records)
    watermark = max(t for _, _, t in records) - watermark_delay
    sums: dict[tuple[datetime, Any], list[int]] = defaultdict(lambda: [0, 0])
    for key, value, t in records:
        start = EPOCH + (t - EPOCH) // window * window
        if start + window <= watermark:
            sums[(start, key)][0] += value
            sums[(start, key)][1] += 1
    return {k: (s, n) for k, (s, n) in sums.items()}


def committed_windows(rows: Iterable[dict[str, Any]]) -> dict[tuple[datetime, Any], tuple[int, int]]:
    """The committed rows keyed like :func:`closed_windows` (a key twice fails: a duplicate)."""
    out: dict[tuple[datetime, Any], tuple[int, int]] = {}
    for row in rows:
        start = row["window_start"]  # a Kafka sink's rows carry ISO-8601 strings
        start = start if isinstance(start, datetime) else datetime.fromisoformat(start)
        start = start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
        assert (start, row["key"]) not in out, f"window {start} key {row['key']!r} committed twice"
        out[(start, row["key"])] = (row["value_sum"], row["records"])
    return out


def spec_window(run: Any) -> tuple[timedelta, timedelta]:
    """The spec's window length (``options.window``, e.g. "10 seconds") and watermark delay."""
    amount, unit = str(run.spec.transformation.options["window"]).split()
    window = timedelta(**{unit if unit.endswith("s") else unit + "s": int(amount)})
    return window, timedelta(seconds=run.spec.event_time.watermark_delay)
'''

_TEST_GENERATOR_HEAD = '''

def test_every_closed_window_is_committed_once_with_its_sum($fixtures) -> None:
$setup    run = run_bounded(SPEC, tmp_path, records_per_partition=120, home=PROJECT)
    expected = closed_windows(((r["key"], r["value"], r["event_time"]) for r in run.source_records), *spec_window(run))
'''

_TEST_KAFKA_HEAD = '''

#: What the test produces: 3 keys, 120 records 250 ms apart in event time (30 s: two 10-second
#: windows close), values 1-7.
START = datetime(2026, 1, 1, tzinfo=UTC)
RECORDS = [{"key": f"k{i % 3}", "value": i % 7 + 1,
            "event_time": (START + timedelta(milliseconds=250 * i)).isoformat()} for i in range(120)]


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    """Create ``topic`` (2 partitions) and write ``records`` to it as JSON, keyed by their key."""
    import json

    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for record in records:
        producer.send(topic, key=record["key"].encode(), value=json.dumps(record).encode())
    producer.flush()
    producer.close()


def test_every_closed_window_is_committed_once_with_its_sum($fixtures) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)  # the spec's bootstrap_servers
    produce(kafka_bootstrap, "$name-events", RECORDS)
$setup    run = run_bounded(SPEC, tmp_path, home=PROJECT)
    assert len(run.source_records) == len(RECORDS)  # the run read what the test produced
    expected = closed_windows(((r["key"], r["value"], datetime.fromisoformat(r["event_time"])) for r in RECORDS),
                              *spec_window(run))
'''

_TEST_SETUP = {
    "parquet": "",
    "iceberg": "",
    "delta": "",
    "postgres": '''\
    monkeypatch.setenv("BARRIERFLOW_POSTGRES_DSN", postgres_dsn)  # the sink's dsn_env
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute((PROJECT / "sql" / "tables.sql").read_text(encoding="utf-8"))
''',
    "kafka": '''\
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)  # the sink's bootstrap_servers
''',
}

_TEST_TAIL = '''\
    assert len(expected) >= 2, "the input closes windows to compare"
    assert committed_windows(run.output) == expected


def test_the_output_meets_its_expectation_suite_on_a_sample() -> None:
    from barrierflow.testing import expectation_failures

    window_start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [{"window_start": window_start, "window_end": window_start + timedelta(seconds=10), "key": key,
             "value_sum": 12, "records": 3} for key in $sample_keys]
    assert expectation_failures(PROJECT / "expectations" / "$name-output.json", rows) == []
    rows.append(dict(rows[0]))  # a duplicate (window, key)
    assert expectation_failures(PROJECT / "expectations" / "$name-output.json", rows) != []
'''

_CONFTEST = '''\
"""$servers_sentenceThe tests' SparkSession (run_bounded creates or reuses one) is stopped
once they are done."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
$fixtures

@pytest.fixture(scope="session", autouse=True)
def _stop_spark() -> Iterator[None]:
    yield
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
'''

_KAFKA_FIXTURE = '''

@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Apache Kafka on 127.0.0.1 (barrierflow's embedded broker): its ``host:port``."""
    from barrierflow.testing import embedded_kafka

    with embedded_kafka() as bootstrap:
        yield bootstrap
'''

_POSTGRES_FIXTURE = '''

@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1 (from the installed server binaries): its DSN."""
    from barrierflow.testing import throwaway_postgres

    with throwaway_postgres() as dsn:
        yield dsn
'''

_TABLES_SQL = """\
-- The sink's table (pipelines/$name.yaml, sinks[0].table): barrierflow never creates or alters it.
-- Run it once against the database: psql "$$BARRIERFLOW_POSTGRES_DSN" -f sql/tables.sql
CREATE TABLE IF NOT EXISTS ${package}_window_sums (
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    key          $key_sql_type NOT NULL,
    value_sum    bigint      NOT NULL,
    records      bigint      NOT NULL,
    PRIMARY KEY (key, window_start)
);
"""

def _suite(name: str, notes: str, expectations: list[dict[str, Any]]) -> str:
    """A Great Expectations suite document (the format deep verification reads) as JSON text,
    one expectation a line."""
    head = json.dumps({"name": name, "meta": {"pipeline": "pipelines/$name.yaml", "notes": notes}}, indent=2)
    lines = ",\n".join("    " + json.dumps(e) for e in expectations)
    return head[:-2] + ',\n  "expectations": [\n' + lines + "\n  ]\n}\n"


def _not_null(column: str) -> dict[str, Any]:
    return {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": column}}


_STATE_SUITE = _suite(
    "$name-state",
    "Run by deep verification (barrierflow verify SPEC --deep, the upgrade canary) on the state rows of "
    "window_sums at a checkpoint: one row per (10-second event-time window, key) still held, read with Spark's "
    "statestore reader (key.window flattened to key_window_start/key_window_end; value = the aggregation "
    "buffer: sum, count).",
    [{"type": "expect_table_columns_to_match_set",
      "kwargs": {"column_set": ["partition_id", "operator_id", "key_window_start", "key_window_end", "key_key",
                                "value_sum", "value_count"], "exact_match": True},
      "meta": {"notes": "the state schema of window_sums; a change means the transformation changed"}},
     _not_null("key_window_start"), _not_null("key_key"),
     {"type": "expect_compound_columns_to_be_unique",
      "kwargs": {"column_list": ["operator_id", "key_window_start", "key_window_end", "key_key"]},
      "meta": {"notes": "each (window, key) is held once: a duplicate would be counted twice after a restore"}},
     {"type": "expect_column_pair_values_a_to_be_greater_than_b",
      "kwargs": {"column_A": "key_window_end", "column_B": "key_window_start", "or_equal": False}},
     {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_count", "min_value": 1},
      "meta": {"notes": "a (window, key) is in state only once a record arrived for it"}}])


def _output_suite(quality_note: str) -> str:
    return _suite(
        "$name-output",
        "The rows window_sums writes: each (10-second window, key) once, after the watermark passed it. Checked "
        f"by the project's test on a sample{quality_note}.",
        [{"type": "expect_table_columns_to_match_set",
          "kwargs": {"column_set": ["window_start", "window_end", "key", "value_sum", "records"],
                     "exact_match": True}},
         _not_null("window_start"), _not_null("key"),
         {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["window_start", "key"]},
          "meta": {"notes": "exactly once: a (window, key) written twice is a duplicate"}},
         {"type": "expect_column_pair_values_a_to_be_greater_than_b",
          "kwargs": {"column_A": "window_end", "column_B": "window_start", "or_equal": False}},
         {"type": "expect_column_values_to_be_between", "kwargs": {"column": "records", "min_value": 1}}])


PYPROJECT = Template("""\
[project]
name = "$name"
version = "0.1.0"
description = "The $name barrierflow pipeline"
requires-python = ">=3.11"
dependencies = ["barrierflow"]

[tool.setuptools.packages.find]
include = ["$package*"]

[tool.pytest.ini_options]
testpaths = ["tests"]
# This folder on sys.path: the tests import $package without installing it.
pythonpath = ["."]
# kafka-python (the tests' producer) loads its protocol schemas with deprecated importlib calls.
filterwarnings = ["ignore:read_text is deprecated:DeprecationWarning",
                  "ignore:open_text is deprecated:DeprecationWarning"]
""")

DAGS = Template('''\
"""Airflow DAGs of this project: barrierflow's DAG factory over its pipelines/ folder.

Every spec in pipelines/ gets barrierflow's DAGs (barrierflow_pipeline__<name> launches it with
spark-submit; supervise, verify, retain, recover, reconcile, skew; chaos when the spec opts in
with ``chaos: {dag: true}``; the batch DAGs of a Parquet output), with this folder as
BARRIERFLOW_HOME (where the specs' relative paths, var/ and $package, are taken from). Put
this file in Airflow's dags folder: point ``dags_folder`` at this project's airflow/ folder,
or link the file there (the link is followed to find the project). The Airflow connection
``spark_default`` chooses the cluster (without it: the spec's spark.master).
"""

from __future__ import annotations

from pathlib import Path

from barrierflow.airflow.project import project_dags

PROJECT = Path(__file__).resolve().parents[1]

globals().update(project_dags(PROJECT / "pipelines", home=PROJECT))
''')

_README = """\
# $name

A barrierflow pipeline: [pipelines/$name.yaml](pipelines/$name.yaml) reads $source_text,
applies `$package.transform:window_sums` ([$package/transform.py]($package/transform.py): per key
and 10-second event-time window, the sum of `value` and the number of records) and writes
$sink_text, with exactly-once checkpoints under `var/$name/checkpoints` and RocksDB state.

Run every command from this folder, with the Python environment barrierflow is installed in
(for a clone of barrierflow: its `.venv`, e.g. `source ../barrierflow/.venv/bin/activate`) and
`export BARRIERFLOW_HOME=$$PWD`: the spec's relative paths (`var/`, `expectations/`, the package)
are this folder's (without it they would be taken from `pipelines/`, the spec's own folder).

## Test

    $test_command

[tests/test_pipeline.py](tests/test_pipeline.py) runs the pipeline in a local Spark on a small
bounded input (`barrierflow.testing.run_bounded`, everything in a temporary folder)$test_servers
and compares the committed windows with the ones it computes from the input on its own.

## Expectations

[expectations/$name-state.json](expectations/$name-state.json) is the Great Expectations suite
deep verification runs on a checkpoint's state (`barrierflow verify pipelines/$name.yaml --deep`,
and the upgrade canary before it accepts a new version of the pipeline);
[expectations/$name-output.json](expectations/$name-output.json) describes the committed rows$output_suite_text.

## Run
$run_prerequisites
    barrierflow validate --deep pipelines/$name.yaml
    barrierflow run pipelines/$name.yaml --checkpoints 5
    barrierflow checkpoints list pipelines/$name.yaml

`run` stops after 5 completed checkpoints (without a limit: until interrupted; a second
`run` restores the latest checkpoint). $output_where

## Deploy

* **Airflow**: [airflow/${package}_dags.py](airflow/${package}_dags.py) builds barrierflow's DAGs
  for every spec in `pipelines/`. Point Airflow's `dags_folder` at `airflow/` (or link the
  file into it); trigger `barrierflow_pipeline__$name` to launch the job with spark-submit.
* **A cluster**: give Airflow a `spark_default` connection (`spark://host:7077`, `yarn`,
  `k8s://...`), or set `spark.master` in the spec for `barrierflow run`. Every job zips
  `$package/` (`spark.py_packages` in the spec) and ships it to the driver and the executors:
  the workers need barrierflow and its dependencies installed, not this package. Put the
  checkpoint store on shared storage (`s3://...`) and the work dir on a file system every
  node mounts; see barrierflow's docs/deployment.md.
"""

_SOURCE_TEXT = {
    "generator": "the built-in generator",
    "kafka": ("JSON records of the Kafka topic `$name-events` (fields `key`, `value`, `event_time`; "
              "brokers at `$$KAFKA_BOOTSTRAP`, default `localhost:9092`)"),
}
_SINK_TEXT = {
    "parquet": "Parquet files under `var/$name/output`",
    "postgres": ("the PostgreSQL table `${package}_window_sums` ([sql/tables.sql](sql/tables.sql); the "
                 "connection string from `$$BARRIERFLOW_POSTGRES_DSN`)"),
    "kafka": ("JSON records keyed by `key` to the Kafka topic `$name-window-sums`, exactly once through Kafka "
              "transactions"),
    "iceberg": ("the Apache Iceberg table `lake.${package}_window_sums` (pyiceberg's SQLite catalog in "
                "`var/$name/work`; `barrierflow lake read pipelines/$name.yaml` shows its snapshot in each cut)"),
    "delta": ("the Delta Lake table at `var/$name/tables/window_sums` (`barrierflow lake read "
              "pipelines/$name.yaml` shows its version in each cut)"),
}


def _run_prerequisites(source: str, sink: str) -> str:
    """The README's steps before ``run``: the servers' addresses, the table, the topics."""
    lines = []
    if "kafka" in (source, sink):
        lines.append("    export KAFKA_BOOTSTRAP=host:9092   # your brokers (default localhost:9092)")
    if sink == "postgres":
        lines += ["    export BARRIERFLOW_POSTGRES_DSN=postgresql://user@host:5432/db   # needs "
                  "max_prepared_transactions > 0",
                  '    psql "$$BARRIERFLOW_POSTGRES_DSN" -f sql/tables.sql']
    if sink == "kafka":
        lines.append("    # create the topics $name-window-sums and __barrierflow_commits (the sink creates none)")
    if source == "kafka":
        lines.append("    # produce JSON records {\"key\": ..., \"value\": ..., \"event_time\": ...} to $name-events")
    return "\n" + "\n".join(lines) if lines else ""


def project_files(source: str = "generator", sink: str = "parquet") -> dict[str, Template]:
    """The project's files for ``source`` (one of :data:`SOURCES`) and ``sink`` (one of
    :data:`SINKS`): relative path (a template too) -> content. KeyError for another one."""
    source_line, sink_line = {"generator": "the built-in generator", "kafka": "Kafka JSON ($name-events)"}[source], {
        "parquet": "Parquet files", "postgres": "PostgreSQL (${package}_window_sums)",
        "kafka": "Kafka ($name-window-sums)", "iceberg": "an Iceberg table (lake.${package}_window_sums)",
        "delta": "a Delta table (var/$name/tables/window_sums)"}[sink]
    spec = (_HEADER + (_GENERATOR_SOURCE if source == "generator" else _KAFKA_SOURCE) + _TRANSFORMATION
            + _SINKS[sink] + _RUN + (_OUTPUT_SUITE_FIELD if sink in ("parquet", "iceberg", "delta") else ""))
    spec = spec.replace("$source_line", source_line).replace("$sink_line", sink_line)

    kafka_needed = "kafka" in (source, sink)
    fixtures = ["tmp_path: Path"]
    if kafka_needed or sink == "postgres":
        fixtures.append("monkeypatch: pytest.MonkeyPatch")
    if kafka_needed:
        fixtures.append("kafka_bootstrap: str")
    if sink == "postgres":
        fixtures.append("postgres_dsn: str")
    servers = [s for s, on in (("Apache Kafka", kafka_needed), ("a throwaway PostgreSQL", sink == "postgres")) if on]
    head = _TEST_GENERATOR_HEAD if source == "generator" else _TEST_KAFKA_HEAD
    setup = _TEST_SETUP[sink]
    if source == "kafka" and sink == "kafka":
        setup = ""  # the source's setenv already points the sink at the broker
    signature = ", ".join(fixtures) if len(fixtures) < 3 else "\n        " + ",\n        ".join(fixtures) + ",\n"
    test = (_TEST_HEADER + head.replace("$fixtures", signature).replace("$setup", setup) + _TEST_TAIL)
    test = (test.replace("$source_line", source_line).replace("$sink_line", sink_line)
            .replace("$bound_note", "(the generator stops after ``records_per_partition`` records per partition)"
                     if source == "generator" else "(the topic's records as of the start)")
            .replace("$servers_note", f"\n\nThe servers it needs ({' and '.join(servers)}) come from tests/conftest.py."
                     if servers else "")
            .replace("$sample_keys", '[3, 7]' if source == "generator" else '["k0", "k1"]'))
    if "pytest." not in test.split("import pytest", 1)[1]:
        test = test.replace("import pytest\n", "")

    servers_sentence = (f"The servers the tests need, started once and stopped when they are done: "
                        f"{' and '.join(servers)}.\n" if servers else "")
    conftest = _CONFTEST.replace("$servers_sentence", servers_sentence).replace(
        "$fixtures", (_KAFKA_FIXTURE if kafka_needed else "") + (_POSTGRES_FIXTURE if sink == "postgres" else ""))

    readme = (_README.replace("$source_text", _SOURCE_TEXT[source]).replace("$sink_text", _SINK_TEXT[sink])
              .replace("$test_servers", f", against {' and '.join(servers)} it starts itself" if servers else "")
              .replace("$output_suite_text", " (the data-quality DAG runs it on the Parquet output; the project's "
                                             "test checks it on a sample)" if sink == "parquet"
                       else " (the data-quality DAG runs it on the table as of its newest cut; the project's test "
                            "checks it on a sample)" if sink in ("iceberg", "delta")
                       else " (the project's test checks it on a sample)")
              .replace("$run_prerequisites", _run_prerequisites(source, sink))
              .replace("$output_where", {"parquet": "The output is in `var/$name/output`.",
                                         "postgres": "The output is in the table `${package}_window_sums`.",
                                         "kafka": "The output is in the topic `$name-window-sums`; a "
                                                  "`read_committed` consumer sees each window once.",
                                         "iceberg": "The output is in the Iceberg table `lake.${package}_window_sums`; "
                                                    "`barrierflow lake read pipelines/$name.yaml` names its snapshot "
                                                    "in the newest cut.",
                                         "delta": "The output is in the Delta table `var/$name/tables/window_sums`; "
                                                  "`barrierflow lake read pipelines/$name.yaml` names its version in "
                                                  "the newest cut."}[sink]))

    files = {
        "README.md": Template(readme),
        "pyproject.toml": PYPROJECT,
        "pipelines/$name.yaml": Template(spec),
        "$package/__init__.py": PACKAGE_INIT,
        "$package/transform.py": TRANSFORM,
        "expectations/$name-state.json": Template(_STATE_SUITE),
        "expectations/$name-output.json": Template(_output_suite(
            " and by the data-quality DAG (barrierflow quality SPEC) on the Parquet output" if sink == "parquet"
            else " and by the data-quality DAG (barrierflow quality SPEC) on the table as of its newest cut"
            if sink in ("iceberg", "delta")
            else "")),
        "tests/conftest.py": Template(conftest),
        "tests/test_pipeline.py": Template(test),
        "airflow/${package}_dags.py": DAGS,
    }
    if sink == "postgres":
        files["sql/tables.sql"] = Template(_TABLES_SQL.replace(
            "$key_sql_type", ("bigint" if source == "generator" else "text").ljust(len("timestamptz"))))
    return files
