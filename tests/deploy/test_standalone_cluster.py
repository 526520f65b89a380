"""Cluster mode: pipelines spark-submitted to a Spark standalone master with a separate worker.

The module starts a master and one worker (2 cores, 1 GiB) from the installed PySpark on
127.0.0.1 (:mod:`tests.support.spark_cluster`, no Docker) and submits
``jobs/run_pipeline.py`` to it with ``spark-submit --master spark://...``, as the Airflow launch
does. Every path the executors write is on the test S3 endpoint: the checkpoint store, the dead
letters (``dead_letter_path``), the Kafka event times (``event_times_path``) and the sinks'
staging (under the Parquet sink's ``s3://`` path). The single-stage pipeline has its work dir
(Spark's own checkpoint, whose state files the executors write) on S3 too, through Hadoop's S3A
(the ``spark-s3a`` jars, passed with ``--jars``), and shares no file system with the worker: the
worker runs in a mount namespace of its own with an empty tmpfs over the driver's folder (the
spec, the user's package, ``BARRIERFLOW_HOME`` with the driver's snapshots and control channel),
as tests/deploy/test_unshared_work_dir.py does. The two-stage pipeline keeps a local work dir
(one host: the driver and the worker see the same path).

The executors get the S3 credentials from the worker's environment (never from Spark's
configuration or the spec), and run the project's interpreter (``PYSPARK_PYTHON``, through
barrierflow/spark/worker_python.sh), which has the barrierflow package installed. The secret (a fresh
value per module for the test endpoint, which accepts any) must not appear in any driver's
output, any daemon or executor log, or the specs.

1. Single stage (generator -> 1 s event-time windows per key, stateful -> Parquet via 2PC),
   whose transformation is the user's own: a package in the test's folder, outside the
   repository, installed nowhere and on no path of the driver or the worker, that reaches them
   only as the zip ``spark.py_packages`` ships (every value goes through a Python function of
   it on the executors), work dir on S3: the driver SIGKILLs itself right after its second
   completed checkpoint (``BARRIERFLOW_CRASH_AT=after_manifest@2``: manifest stored, sink not yet
   told), then ``barrierflow restore --latest`` (another process), then a second spark-submit
   runs to the end; the committed windows equal the ones computed from the generator's record
   function, each once, the dead letters on S3 are exactly the malformed records, and Spark's
   checkpoint (state files included) is on S3, nowhere on the driver's disk.
2. Two stages (generator -> stage a -> channel on the test Kafka broker -> stage b -> Parquet):
   the driver SIGKILLs itself right after the first global checkpoint completed; the next
   spark-submit restores it as attempt 1 and runs to the end; every record is committed once,
   and stage b's executors recorded the channel's event times on S3.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.run import submit_jars
from barrierflow.sinks.parquet import read_committed
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import load_spec
from barrierflow.spec.models import GeneratorSourceSpec
from barrierflow.storage import open_store

from tests.drivers import WORKER_PYTHON, short_lived_driver_java_options
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.s3_server import S3Endpoint
from tests.support.spark_cluster import StandaloneCluster, hiding_wrapper, running_standalone_cluster
from tests.support.staged_specs import PARTITIONS, two_stage_spec
from tests.support.staged_specs import RECORDS as STAGED_RECORDS

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.kafka, pytest.mark.slow(120),
              pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
RUN_PIPELINE = ROOT / "jobs" / "run_pipeline.py"
#: The interpreter of driver and executors: the project's, where barrierflow is installed.
PYTHON = sys.executable
#: The executors' (and the driver's Python workers') interpreter: the project's, started through
#: barrierflow/spark/worker_python.sh, which imports pyspark from site-packages, not from Spark's zips.
WORKER_ENV = {"PYSPARK_PYTHON": str(WORKER_PYTHON), "BARRIERFLOW_WORKER_PYTHON": PYTHON}
MALFORMED_EVERY, KEYS, WATERMARK_DELAY = 101, 10, timedelta(milliseconds=200)
#: Records per partition of the single-stage pipeline.
RECORDS = 1000


@dataclass
class ClusterRuns:
    """The cluster, the credentials its drivers and executors use, every output to check for the
    secret, and the driver's folder the worker cannot see (``hidden``: why not, when it can)."""

    cluster: StandaloneCluster
    credentials: dict[str, str]
    driver_disk: Path
    hidden: str = ""
    outputs: list[str] = field(default_factory=list)

    @property
    def secret(self) -> str:
        return self.credentials["AWS_SECRET_ACCESS_KEY"]

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, **self.credentials, **WORKER_ENV, "PYSPARK_DRIVER_PYTHON": PYTHON,
               "SPARK_LOCAL_IP": "127.0.0.1", "_JAVA_OPTIONS": short_lived_driver_java_options(), **extra}
        for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "BARRIERFLOW_CRASH_AT"):
            if name not in extra:
                env.pop(name, None)
        return env

    def run(self, command: list[str], *, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess[str]:
        """Run ``command`` (its own process group, killed whole on timeout); keep its output (also
        in ``<cluster log dir>/drivers/<n>.out|.err`` for a look after a failure)."""
        folder = self.cluster.log_dir / "drivers"
        folder.mkdir(exist_ok=True)
        name = folder / str(len(self.outputs) // 2)
        with open(f"{name}.out", "w+") as out, open(f"{name}.err", "w+") as err:
            process = subprocess.Popen(command, cwd=ROOT, env=self.env(**extra), stdout=out, stderr=err, text=True,
                                       start_new_session=True)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
            finally:
                out.seek(0)
                err.seek(0)
                result = subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())
                self.outputs += [result.stdout, result.stderr]
        return result

    def submit(self, spec_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        """``spark-submit --master spark://... --jars JARS jobs/run_pipeline.py --spec SPEC
        --until-exhausted`` (client mode: the driver runs here, the executors on the worker), with
        the jars the spec needs (:func:`barrierflow.ops.run.submit_jars`), as the launch DAG does."""
        self.cluster.wait_until_idle()  # a killed driver's application must have released the cores
        conf = {"spark.cores.max": "2"}
        jars = submit_jars(spec_path)
        if jars:
            conf["spark.jars"] = ",".join(jars)
        return self.run(self.cluster.submit_command(RUN_PIPELINE, "--spec", str(spec_path), "--until-exhausted",
                                                    conf=conf), timeout=420, **extra)

    def cli(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return self.run([PYTHON, "-m", "barrierflow.cli.main", *args], timeout=120, **extra)


@pytest.fixture(scope="module")
def runs(s3_endpoint: S3Endpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterRuns]:
    """A standalone master and one worker whose environment carries the S3 credentials; for the
    test endpoint a fresh secret (it accepts any), else the environment's."""
    credentials = dict(s3_endpoint.env())
    if s3_endpoint.access_key_id is not None:
        credentials["AWS_ACCESS_KEY_ID"] = f"bf-cluster-{uuid.uuid4().hex[:8]}"
        credentials["AWS_SECRET_ACCESS_KEY"] = f"bf-secret-{uuid.uuid4().hex}"
    else:
        missing = [n for n in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not os.environ.get(n)]
        if missing:
            pytest.skip(f"the external S3 endpoint needs {missing} in the environment")
        credentials.update({n: os.environ[n] for n in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    log_dir = tmp_path_factory.mktemp("standalone")
    driver_disk = tmp_path_factory.mktemp("driver-disk")
    wrapper, hidden = hiding_wrapper(driver_disk)
    with running_standalone_cluster(log_dir, worker_env={**credentials, **WORKER_ENV},
                                    worker_wrapper=wrapper) as cluster:
        yield ClusterRuns(cluster, credentials, driver_disk, hidden)
        # Before the daemons stop: nothing any process printed or logged names the secret.
        logs = cluster.logs()
        assert runs_secret_free(credentials["AWS_SECRET_ACCESS_KEY"], logs), "the S3 secret is in a cluster log"


def runs_secret_free(secret: str, *texts: str) -> bool:
    return not any(secret in text for text in texts)


def _bucket(s3_endpoint: S3Endpoint) -> str:
    name = f"bf-cluster-{uuid.uuid4().hex[:12]}"
    s3_endpoint.create_bucket(name)
    return name


def _write_spec(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _us(value: datetime) -> int:
    """Microseconds since the epoch of a timestamp read back from Parquet (naive = UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1_000_000)


def _expected_windows(source: dict[str, Any]) -> list[tuple[int, int, int, int, int]]:
    """The windows the pipeline commits, from the generator's record function: every
    (1 s window, key) whose end the final watermark (newest event time minus the delay) passed,
    with its count and value sum; malformed records are not counted."""
    model = GeneratorModel(GeneratorSourceSpec.model_validate(source))
    counts: Counter[tuple[datetime, int]] = Counter()
    sums: Counter[tuple[datetime, int]] = Counter()
    newest = datetime.min.replace(tzinfo=UTC)
    for p in range(source["partitions"]):
        for _p, _offset, key, value, event_time in model.rows(p, 0, source["records_per_partition"]):
            start = event_time.replace(microsecond=0)
            counts[start, key] += 1
            sums[start, key] += value
            newest = max(newest, event_time)
    watermark = newest - WATERMARK_DELAY
    second = timedelta(seconds=1)
    return sorted((_us(start), _us(start + second), key, counts[start, key], sums[start, key])
                  for start, key in counts if start + second <= watermark)


def _committed_windows(uri: str) -> list[tuple[int, int, int, int, int]]:
    table = read_committed(uri)
    rows = table.to_pylist() if table is not None else []
    return sorted((_us(r["window_start"]), _us(r["window_end"]), int(r["key"]), int(r["count"]),
                   int(r["value_sum"])) for r in rows)


def _objects(uri: str, prefix: str = "") -> list[str]:
    return [info.key for info in open_store(uri).list(prefix)]


def _places_with(secret: str, base: str, folder: Path) -> list[str]:
    """Every object below ``base`` (the test's S3 prefix: manifests, ledger, staged and committed
    output, dead letters, event times) and every file below ``folder`` (spec, work dir with
    Spark's checkpoint) that holds ``secret``, as stored bytes."""
    needle = secret.encode()
    store = open_store(base)
    found = [f"{base}/{key}" for key in _objects(base) if needle in store.get_bytes(key)]
    return found + [str(path) for path in folder.rglob("*") if path.is_file() and needle in path.read_bytes()]


def _executor_logs(cluster: StandaloneCluster) -> set[str]:
    """Ids of the applications that ran executors on the worker (their executor log dirs)."""
    return {path.parent.parent.name for path in cluster.log_dir.glob("work-*/app-*/*/stderr")}


# Under spark-submit the Python driver's stderr is merged into spark-submit's stdout (Spark's
# PythonRunner), so barrierflow's own messages (the injected crash, the progress) are there.


#: The user's package of the single-stage test: its transformation passes every value through a
#: Python function, which the executors' Python workers import by name (a module-level function
#: is pickled by reference), then counts the windows as ``keyed_window_counts`` does.
USER_TRANSFORM = """\
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from barrierflow.transforms.aggregations import keyed_window_counts


def same_value(value):
    return value


def checked_window_counts(df, ctx):
    return keyed_window_counts(df.withColumn("value", F.udf(same_value, LongType())("value")), ctx)
"""


def _user_package(folder: Path) -> Path:
    """A package of the user's own, outside the repository and on no path of the cluster's."""
    package = folder / f"bf_user_{uuid.uuid4().hex[:8]}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "windows.py").write_text(USER_TRANSFORM)
    return package


def test_single_stage_pipeline_without_a_shared_file_system_crash_restore_exactly_once(
        runs: ClusterRuns, s3_endpoint: S3Endpoint) -> None:
    # Where mount namespaces are not allowed (``runs.hidden`` says why), the worker sees the
    # driver's folder; the run is the same, and what shows that nothing went through a shared
    # disk is below: no Spark checkpoint file on the driver's disk, the restore from S3 alone.
    base = f"s3://{_bucket(s3_endpoint)}/single"
    home = runs.driver_disk / f"home-{uuid.uuid4().hex[:8]}"  # BARRIERFLOW_HOME of driver and restore
    home.mkdir()
    driver = {"BARRIERFLOW_HOME": str(home)}
    package = _user_package(home / "user-code")
    not_installed = runs.run([PYTHON, "-c", f"import {package.name}"], timeout=60)
    assert not_installed.returncode != 0 and "ModuleNotFoundError" in not_installed.stderr
    source = {"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
              "max_records_per_batch": 500, "records_per_partition": RECORDS, "keys": KEYS,
              "malformed_every": MALFORMED_EVERY}
    data = {
        "version": 1, "name": f"cluster{uuid.uuid4().hex[:8]}", "work_dir": f"{base}/work",
        "sources": [source],
        "transformation": {"function": f"{package.name}.windows:checked_window_counts",
                           "output_mode": "append", "options": {"window": "1 second"}},
        "event_time": {"column": "event_time", "watermark_delay": "200ms"},
        "sinks": [{"name": "out", "type": "parquet", "path": f"{base}/out"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"{base}/checkpoints", "interval": "1s", "timeout": "120s"},
        "dead_letter_path": f"{base}/dead-letter",
        "event_times_path": f"{base}/event-times",
        "spark": {"master": runs.cluster.master_url, "shuffle_partitions": 2, "py_packages": [str(package)]},
    }
    spec_path = _write_spec(home, data)
    apps_before = _executor_logs(runs.cluster)

    crashed = runs.submit(spec_path, BARRIERFLOW_CRASH_AT="after_manifest@2", **driver)
    assert crashed.returncode != 0, crashed.stdout[-2000:] + crashed.stderr[-4000:]
    assert "injected crash at after_manifest" in crashed.stdout, crashed.stdout[-2000:] + crashed.stderr[-4000:]
    store = CheckpointStore.for_spec(load_spec(spec_path))
    latest = store.latest()
    assert latest is not None and latest.checkpoint_id == 2, latest

    restored = runs.cli("restore", str(spec_path), "--latest", **driver)
    assert restored.returncode == 0, restored.stdout[-2000:] + restored.stderr[-4000:]

    final = runs.submit(spec_path, **driver)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-4000:]

    assert _committed_windows(f"{base}/out") == _expected_windows(source)
    # The executors wrote the dead letters to S3, nothing to the local work dir; replays
    # rewrite a range's file, so the set of dead-lettered records is exact.
    model = GeneratorModel(GeneratorSourceSpec.model_validate(source))
    expected_dead = {(str(p), m["offset"]) for p in range(2) for m in model.malformed(p, 0, RECORDS)}
    dead = open_store(f"{base}/dead-letter")
    found = {(json.loads(line)["partition"], json.loads(line)["offset"])
             for key in _objects(f"{base}/dead-letter")
             for line in dead.get_bytes(key).decode().splitlines() if line.strip()}
    assert found == expected_dead
    # Spark's checkpoint, state files included, is on S3 and nowhere on the driver's disk, which
    # holds only what the driver uses (its snapshots).
    assert _objects(f"{base}/work/spark-checkpoint", "state/"), "no state file on S3"
    assert _objects(f"{base}/work/spark-checkpoint", "commits/")
    assert not [p for p in home.rglob("*") if p.name.startswith("spark-checkpoint")]
    assert not [p for p in home.rglob("*") if p.name in ("dead-letter", "event-times")]
    assert (home / "var" / "object-work-dirs" / base.removeprefix("s3://") / "work" / "snapshots").is_dir()
    assert len(_executor_logs(runs.cluster) - apps_before) == 2, "both applications ran executors on the worker"
    assert runs_secret_free(runs.secret, *runs.outputs, spec_path.read_text()), "the S3 secret was printed"
    assert _places_with(runs.secret, base, home) == []


def test_two_stage_pipeline_on_the_cluster_crash_restore_exactly_once(
        runs: ClusterRuns, s3_endpoint: S3Endpoint, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    base = f"s3://{_bucket(s3_endpoint)}/staged"
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["name"] = f"two{uuid.uuid4().hex[:8]}"
    data["stages"][1]["sinks"][0]["path"] = f"{base}/out"
    data["checkpoint"]["storage"] = f"{base}/checkpoints"
    data["dead_letter_path"] = f"{base}/dead-letter"
    data["event_times_path"] = f"{base}/event-times"
    data["spark"] = {"master": runs.cluster.master_url, "shuffle_partitions": 2}
    spec_path = _write_spec(tmp_path, data)
    apps_before = _executor_logs(runs.cluster)

    crashed = runs.submit(spec_path, BARRIERFLOW_CRASH_AT="after_global_manifest@1")
    assert crashed.returncode != 0, crashed.stdout[-2000:] + crashed.stderr[-4000:]
    assert "injected crash at after_global_manifest" in crashed.stdout, crashed.stdout[-2000:] + crashed.stderr[-4000:]
    assert _objects(f"{base}/checkpoints", "global/chk-1/"), "global checkpoint 1 is not in the store"

    final = runs.submit(spec_path)  # restores global checkpoint 1 as attempt 1
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-4000:]
    assert "attempt 1" in final.stdout, final.stdout[-2000:]

    table = read_committed(f"{base}/out")
    assert table is not None
    seen = sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(), strict=True))
    assert seen == [(p, o) for p in range(PARTITIONS) for o in range(STAGED_RECORDS)]
    # Stage b reads the channel with the Kafka reader: its executors recorded the newest event
    # time of every range they read on S3, below the stage's part of event_times_path, and stage
    # b's coordinator read them for its manifests (folding the ranges up to each barrier into a
    # per-partition _summary.json): every input partition has its records' event times there.
    times = open_store(f"{base}/event-times/stages/b")
    keys = [key for key in _objects(f"{base}/event-times/stages/b") if key.endswith(".json")]
    partitions = {key.split("/")[-2] for key in keys}
    assert len(partitions) == 2, keys  # the channel's two partitions
    summaries = [json.loads(times.get_bytes(key)) for key in keys if key.endswith("/_summary.json")]
    ranges = [json.loads(times.get_bytes(key)) for key in keys if not key.endswith("/_summary.json")]
    assert all(s["max_event_time"] for s in summaries) and all(r["max_event_time"] for r in ranges if r["records"])
    assert summaries or sum(r["records"] for r in ranges) >= PARTITIONS * STAGED_RECORDS
    assert not (tmp_path / "work" / "stages" / "b" / "event-times").exists()
    assert len(_executor_logs(runs.cluster) - apps_before) == 2, "both applications ran executors on the worker"
    assert runs_secret_free(runs.secret, *runs.outputs, spec_path.read_text()), "the S3 secret was printed"
    assert _places_with(runs.secret, base, tmp_path) == []
