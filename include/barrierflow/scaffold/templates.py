"""The files of a new project, as :class:`string.Template` texts (``$name``: the project and
pipeline name, ``$package``: its Python package, ``$test_command``: how to run its tests).

Keys are paths relative to the project folder, with ``$package`` and ``$name`` substituted too.
"""

from __future__ import annotations

from string import Template

SPEC = Template("""\
# The $name pipeline: the built-in generator -> $package.transform:label_values -> Parquet files,
# with exactly-once checkpoints. Relative paths (var/..., $package) are the project folder's:
# run barrierflow with BARRIERFLOW_HOME set to it (unset, a spec's paths are taken from its folder).
# Fields: barrierflow's docs/pipeline-spec.md.
version: 1
name: $name
description: Generated records of at least min_value, labelled low or high.
sources:
  - name: events
    type: generator        # deterministic records (partition, offset, key, value, event_time);
    partitions: 2          # replace with a Kafka source for real data
    rows_per_second: 200   # per partition
    max_records_per_batch: 2000
    keys: 100
transformation:
  function: $package.transform:label_values
  output_mode: append
  options:
    min_value: 100
sinks:
  - name: results
    type: parquet
    path: file://var/$name/output
trigger:
  interval: 500ms
checkpoint:
  storage: file://var/$name/checkpoints
  interval: 2s
  retained: 5
spark:
  master: local[2]         # under spark-submit (the Airflow launch) its --master wins
  shuffle_partitions: 2
  # Shipped to the driver and every executor with each job (zipped; SparkContext.addPyFile),
  # so that a cluster's workers import the transformation's code without installing it.
  py_packages: [$package]
""")

PACKAGE_INIT = Template('''\
"""The code of the $name pipeline (pipelines/$name.yaml)."""
''')

TRANSFORM = Template('''\
"""The transformation of the $name pipeline (pipelines/$name.yaml, transformation.function).

barrierflow calls :func:`label_values` once, when a job starts, with the source's streaming
DataFrame (the generator's columns: partition, offset, key, value, event_time) and writes the
DataFrame it returns. ``ctx.options`` is the spec's ``transformation.options``.

:func:`label` is plain Python that Spark runs on the executors: their Python workers import it
from this package, which barrierflow ships to them with every job (``spark.py_packages``).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

#: Values from here up are labelled "high".
HIGH = 500


def label(value: int | None) -> str | None:
    """The label of ``value``: "high" from :data:`HIGH` up, else "low" (None stays None)."""
    if value is None:
        return None
    return "high" if value >= HIGH else "low"


def label_values(df: DataFrame, ctx: Any) -> DataFrame:
    """The records whose value is at least ``options.min_value``, each with its :func:`label`."""
    min_value = int(ctx.options["min_value"])
    label_udf = F.udf(label, StringType())
    return (df.where(F.col("value") >= min_value)
            .select("partition", "offset", "key", "value", "event_time", label_udf("value").alias("label")))
''')

TEST = Template('''\
"""The $name pipeline end to end, and its plain-Python part on its own.

``run_bounded`` (barrierflow.testing) runs the spec in a local Spark on a bounded input (the
generator stops after ``records_per_partition`` records per partition) with every path under
``tmp_path``, until everything is committed, and returns the generated records and the
committed output: the test compares them exactly.
"""

from __future__ import annotations

from pathlib import Path

from barrierflow.testing import run_bounded
from $package.transform import label

PROJECT = Path(__file__).resolve().parents[1]
SPEC = PROJECT / "pipelines" / "$name.yaml"


def test_every_kept_record_is_committed_once_with_its_label(tmp_path: Path) -> None:
    run = run_bounded(SPEC, tmp_path, records_per_partition=60, home=PROJECT)
    min_value = int(run.spec.transformation.options["min_value"])
    expected = sorted((r["partition"], r["offset"], r["key"], r["value"], r["event_time"], label(r["value"]))
                      for r in run.source_records if r["value"] >= min_value)
    committed = sorted((r["partition"], r["offset"], r["key"], r["value"], r["event_time"], r["label"])
                       for r in run.output)
    assert expected, "the input has records to keep"
    assert committed == expected


def test_label() -> None:
    assert [label(v) for v in (0, 499, 500, 999, None)] == ["low", "low", "high", "high", None]
''')

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
# PySpark's udf() looks for a pandas UDF's type hints in any typed function (label is a plain one).
filterwarnings = ["ignore:Cannot infer the eval type from type hints:UserWarning"]
""")

CONFTEST = Template('''\
"""The tests' SparkSession (run_bounded creates or reuses one) is stopped once they are done."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _stop_spark() -> Iterator[None]:
    yield
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
''')

DAGS = Template('''\
"""Airflow DAGs of this project: barrierflow's DAG factory over its pipelines/ folder.

Every spec in pipelines/ gets barrierflow's DAGs (barrierflow_pipeline__<name> launches it with
spark-submit; supervise, verify, retain, recover, reconcile, skew; chaos when the spec opts in
with ``chaos: {dag: true}``; the batch DAGs of its Parquet output), with this folder as
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

README = Template("""\
# $name

A barrierflow pipeline: [pipelines/$name.yaml](pipelines/$name.yaml) reads the built-in
generator, applies `$package.transform:label_values` ([$package/transform.py]($package/transform.py))
and writes Parquet files under `var/$name/output`, with exactly-once checkpoints under
`var/$name/checkpoints`.

Run every command from this folder, with the Python environment barrierflow is installed in
(for a clone of barrierflow: its `.venv`, e.g. `source ../barrierflow/.venv/bin/activate`) and
`export BARRIERFLOW_HOME=$$PWD`: the spec's relative paths (`var/`, the package) are this folder's
(without it they would be taken from `pipelines/`, the spec's own folder).

## Test

    $test_command

[tests/test_pipeline.py](tests/test_pipeline.py) runs the pipeline in a local Spark on a small
bounded input (`barrierflow.testing.run_bounded`, everything in a temporary folder) and checks
the committed output row by row against the generated records.

## Run

    barrierflow validate pipelines/$name.yaml
    barrierflow run pipelines/$name.yaml --checkpoints 5
    barrierflow checkpoints list pipelines/$name.yaml

`run` stops after 5 completed checkpoints (without a limit: until interrupted; a second
`run` restores the latest checkpoint). The output is in `var/$name/output`.

## Deploy

* **Airflow**: [airflow/${package}_dags.py](airflow/${package}_dags.py) builds barrierflow's DAGs
  for every spec in `pipelines/`. Point Airflow's `dags_folder` at `airflow/` (or link the
  file into it); trigger `barrierflow_pipeline__$name` to launch the job with spark-submit.
* **A cluster**: give Airflow a `spark_default` connection (`spark://host:7077`, `yarn`,
  `k8s://...`), or set `spark.master` in the spec for `barrierflow run`. Every job zips
  `$package/` (`spark.py_packages` in the spec) and ships it to the driver and the executors:
  the workers need barrierflow and its dependencies installed, not this package. Put the
  checkpoint store and the output on shared storage (`s3://...`) and the work dir on a
  file system every node mounts; see barrierflow's docs/deployment.md.
""")

#: The project's files: relative path (a template too) -> content.
FILES: dict[str, Template] = {
    "README.md": README,
    "pyproject.toml": PYPROJECT,
    "pipelines/$name.yaml": SPEC,
    "$package/__init__.py": PACKAGE_INIT,
    "$package/transform.py": TRANSFORM,
    "tests/conftest.py": CONFTEST,
    "tests/test_pipeline.py": TEST,
    "airflow/${package}_dags.py": DAGS,
}
