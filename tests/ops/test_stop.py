"""``barrierflow stop SPEC [--savepoint]``: a running pipeline stops on request, after one more
cut kept as a savepoint, in every shape.

* nothing running: exit 2 naming the lease looked for;
* a lease held by something that never reads the request: exit 1 after the timeout, the
  request withdrawn, the message says the pipeline keeps running;
* one stage, its driver a subprocess: ``stop --savepoint`` -> the driver exits 0 naming the
  savepoint, whose offsets bound the committed output exactly; the savepoint's bytes (manifest,
  files, its sink transactions) are identical after two restores from it, each followed by a
  run, and the output stays exactly once;
* two stages (one process, and one process per stage): the same stop, and the next
  ``barrierflow run --until-exhausted`` (its function, in this process) continues from the
  savepoint exactly once;
* without ``--savepoint``: the latest completed checkpoint is named, the output runs through it;
* a savepoint whose upload fails: the stop fails, saying the pipeline keeps running, and it does
  (also with ``tolerable_failed_checkpoints: 0``), triggering checkpoints again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.global_manifest import GlobalManifest, global_key, stage_prefix
from barrierflow.checkpointing.manifest import CheckpointKind, Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key, shared_key
from barrierflow.cli.main import main
from barrierflow.errors import StorageError
from barrierflow.lease import JobLease, lease_holder
from barrierflow.metrics import read_address
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime.stop_request import StopRequest, read_outcome, write_request
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec
from barrierflow.storage import open_store
from barrierflow.storage.local import LocalObjectStore

from tests.drivers import short_lived_driver_env
from tests.metrics.scrape import Samples, parse, scrape, value
from tests.scenarios.harness import FAST_JVM
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, two_stage_spec


def _single_spec(tmp_path: Path, folder: Path | None = None) -> Path:
    """A single-stage spec (data under ``tmp_path``, the file in ``folder``, default ``tmp_path``)."""
    data = {
        "version": 1,
        "name": "stoppable",
        "work_dir": str(tmp_path / "work"),
        # unbounded and throttled: it runs until it is stopped
        "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 40,
                     "max_records_per_batch": 50, "keys": 5}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {"src_partition": "partition", "src_offset": "offset",
                                                   "value": "value"}}},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "500ms", "timeout": "120s"},
        "spark": {"master": "local[1]", "shuffle_partitions": 1, "conf": FAST_JVM},
    }
    path = (folder or tmp_path) / "stoppable.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _driver(spec_path: Path, *extra: str) -> subprocess.Popen[str]:
    """``barrierflow -v run SPEC``, its output in files beside the spec (read by :func:`_ended`)."""
    env = {**os.environ, **short_lived_driver_env()}
    runs = len(list(spec_path.parent.glob("driver-*.out")))
    with open(spec_path.parent / f"driver-{runs}.out", "w") as out, \
            open(spec_path.parent / f"driver-{runs}.err", "w") as err:
        process = subprocess.Popen([sys.executable, "-m", "barrierflow.cli.main", "-v", "run", str(spec_path),
                                    "--quiet", *extra], env=env, stdout=out, stderr=err, text=True)
    process.args = [*process.args, spec_path.parent / f"driver-{runs}"]  # where its output goes
    return process


class _RunInThisProcess:
    """``barrierflow run SPEC`` in this process: the function the command runs
    (:func:`barrierflow.ops.run.run`, whose return is the command's exit 0), on the suite's shared
    SparkSession, in a thread, so the test's thread can ask ``barrierflow stop`` while it runs.
    The run ends by itself after ``duration`` s if nothing stops it (a failing test)."""

    def __init__(self, spec_path: Path, duration: float = 300.0) -> None:
        import threading

        from barrierflow.ops.run import run

        self.outcome: Any = None
        self.error: BaseException | None = None

        def body() -> None:
            try:
                self.outcome = run(spec_path, duration=duration)
            except BaseException as exc:  # reported by poll()/ended()
                self.error = exc

        self.thread = threading.Thread(target=body, name=f"run {spec_path.name}", daemon=True)
        self.thread.start()

    def poll(self) -> int | None:
        """None while the run goes on, else 0 (it returned) or 1 (it raised)."""
        if self.thread.is_alive():
            return None
        return 0 if self.error is None else 1

    def ended(self, timeout: float) -> Any:
        """The run's outcome once it ended (waiting up to ``timeout`` s); its error re-raised."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the run did not end within {timeout:g} s"
        if self.error is not None:
            raise self.error
        return self.outcome


def _ended(process: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Wait for ``process`` (killed after ``timeout`` s); its exit code, stdout and stderr."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    base = Path(process.args[-1])
    out = base.with_suffix(".out").read_text(encoding="utf-8")
    err = "\n".join(line for line in base.with_suffix(".err").read_text(encoding="utf-8").splitlines()
                    if " DEBUG " not in line)
    return process.returncode, out, err


@pytest.fixture
def drivers() -> Iterator[list[subprocess.Popen[str]]]:
    """Drivers a test starts: killed at its end if still running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _wait_for(condition: Any, what: str, process: subprocess.Popen[str] | _RunInThisProcess,
              timeout: float = 300.0) -> Any:
    """Poll ``condition`` until it is truthy; fail if ``process`` exits first or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process.poll() is not None:
            if isinstance(process, _RunInThisProcess):
                pytest.fail(f"the run ended before {what}: {process.error!r}")
            code, out, err = _ended(process, 0)
            pytest.fail(f"the driver exited ({code}) before {what}:\n{out}\n{err[-3000:]}")
        time.sleep(0.2)
    if isinstance(process, _RunInThisProcess):
        pytest.fail(f"no {what} within {timeout:g} s")
    process.kill()
    pytest.fail(f"no {what} within {timeout:g} s")


def _stage_figures(work_dir: Path, stages: tuple[str, ...]) -> Samples | None:
    """A scrape of the run's ``/metrics`` once every stage in ``stages`` counts records and a
    completed checkpoint there, else None (no server yet, or figures still behind: a stage
    reading a channel may complete its first checkpoint before any record reached it)."""
    address = read_address(work_dir)
    if address is None:
        return None
    samples, _ = parse(scrape(str(address["url"]))[0])

    def counting(family: str, least: float) -> set[str | None]:
        return {dict(labels).get("stage") for (name, labels), v in samples.items() if name == family and v >= least}

    ready = counting("barrierflow_checkpoints_completed_total", 1) & counting("barrierflow_records_total", 1)
    return samples if set(stages) <= ready else None


def _output(out: Path) -> list[tuple[int, int]]:
    table = read_committed(f"file://{out}")
    if table is None:
        return []
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(), strict=True))


def _through(offsets: dict[str, int]) -> list[tuple[int, int]]:
    """Every record the offsets cover, once: what the committed output must be."""
    return sorted((int(p), o) for p, end in offsets.items() for o in range(end))


def _savepoint_digest(store: CheckpointStore, checkpoint_id: int) -> str:
    """A hash of everything the savepoint consists of: its manifest, every file it names (from
    the content-addressed area) and its sinks' transactions."""
    objects = store.objects
    digest = hashlib.sha256(objects.get_bytes(manifest_key(checkpoint_id)))
    manifest = store.get(checkpoint_id)
    for entry in sorted(manifest.files, key=lambda f: f.path):
        digest.update(entry.path.encode())
        digest.update(objects.get_bytes(shared_key(entry.sha256)))
    ledger = sorted(i.key for i in objects.list("ledger/") if f"/txn-{checkpoint_id:012d}." in i.key)
    assert ledger, "the savepoint has no sink transaction"
    for key in ledger:
        digest.update(key.encode())
        digest.update(objects.get_bytes(key))
    return digest.hexdigest()


def test_stop_with_nothing_running_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = _single_spec(tmp_path)
    assert main(["stop", str(spec_path), "--savepoint"]) == 2
    err = capsys.readouterr().err
    assert "pipeline stoppable is not running: no live lease in " in err and "nothing to stop" in err, err


def test_stop_that_no_run_takes_up_times_out_and_withdraws_the_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = _single_spec(tmp_path)
    spec = load_spec(spec_path)
    objects = open_store(spec.checkpoint.storage)
    # A holder of the lease that never reads its stop request (a stalled driver).
    with JobLease(tmp_path / "work", spec.name, "run", store=objects) as lease:
        assert lease.token is not None
        assert main(["stop", str(spec_path), "--timeout", "1s"]) == 1
        err = capsys.readouterr().err
        assert "did not take the stop request up within 1 s" in err and "the pipeline keeps running" in err, err
        assert not objects.exists(f"_stop/request-{lease.token.fence:012d}.json")


@pytest.mark.spark
@pytest.mark.slow(90)
@pytest.mark.timeout(900)
def test_stop_with_a_savepoint_then_restore_from_it_twice(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        drivers: list[subprocess.Popen[str]]) -> None:
    from barrierflow.runtime.job import StreamingJob

    spec_path = _single_spec(tmp_path)
    spec = load_spec(spec_path)
    store = CheckpointStore.for_spec(spec)
    driver = _driver(spec_path)
    drivers.append(driver)
    _wait_for(lambda: (tmp_path / "chk" / manifest_key(1)).is_file(), "the first checkpoint", driver)

    stopped = main(["stop", str(spec_path), "--savepoint", "--timeout", "3m"])
    said, why = capsys.readouterr()
    if stopped != 0:
        code, out, err = _ended(driver, 1)
        pytest.fail(f"stop exited {stopped}: {why}\ndriver ({code}):\n{out}\n{err[-5000:]}")
    code, out, err = _ended(driver, 120)
    assert code == 0, f"{code}\n{out}\n{err[-3000:]}"
    savepoint = max(store.checkpoint_ids())
    assert f"stopped with savepoint {savepoint} " in said, said
    assert f"stopped with savepoint {savepoint} " in out, out
    assert str(tmp_path / "chk" / manifest_key(savepoint)) in said
    manifest = store.get(savepoint)
    assert manifest.kind is CheckpointKind.SAVEPOINT
    assert lease_holder(tmp_path / "work", store.objects) is None
    # Every sink committed the savepoint, and nothing beyond it.
    assert _output(tmp_path / "out") == _through(manifest.barrier_offsets["events"])
    before = _savepoint_digest(store, savepoint)

    committed = dict(manifest.barrier_offsets["events"])
    for _ in range(2):
        assert main(["restore", str(spec_path), "--checkpoint", str(savepoint)]) == 0
        assert _savepoint_digest(store, savepoint) == before
        result = StreamingJob(spec, spark=spark, spec_path=str(spec_path)).run(checkpoints=2, duration=300)
        last: Manifest = result.completed[-1]
        assert all(last.barrier_offsets["events"][p] >= o for p, o in manifest.barrier_offsets["events"].items())
        # Output an earlier run committed beyond the savepoint stays committed (its batches are
        # replayed with their output suppressed), so a run whose last checkpoint ends before it
        # leaves exactly that output: every record up to the furthest committed offset, once.
        committed = {p: max(o, last.barrier_offsets["events"].get(p, 0)) for p, o in committed.items()}
        assert _output(tmp_path / "out") == _through(committed)
    assert _savepoint_digest(store, savepoint) == before
    assert store.get(savepoint).kind is CheckpointKind.SAVEPOINT
    # Retention deletes the checkpoints around it, never the savepoint, which still restores.
    assert main(["retain", str(spec_path)]) == 0
    assert savepoint > 1 and not store.objects.exists(manifest_key(1))
    assert _savepoint_digest(store, savepoint) == before
    assert main(["restore", str(spec_path), "--checkpoint", str(savepoint)]) == 0


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow(120)
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("processes", [False, True], ids=["one-process", "processes"])
def test_stop_a_two_stage_pipeline_with_a_savepoint(
        tmp_path: Path, processes: bool, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest,
        drivers: list[subprocess.Popen[str]], kafka_endpoint: KafkaEndpoint) -> None:
    records = 240
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["stages"][0]["sources"][0].update(records_per_partition=records, rows_per_second=20,
                                           max_records_per_batch=20)
    data["spark"] = {"master": "local[1]", "shuffle_partitions": 1, "conf": FAST_JVM}
    data["trigger"] = {"interval": "500ms"}  # the source is throttled: fewer, fuller micro-batches
    data["metrics"] = {"port": 0}
    spec_path = tmp_path / "two.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    chk = tmp_path / "chk"
    extra = ("--processes",) if processes else ()

    driver = _driver(spec_path, *extra)
    drivers.append(driver)
    _wait_for(lambda: (chk / global_key(1, "_metadata")).is_file(), "the first global checkpoint", driver)
    # The run serves every stage's figures in either shape (with --processes: the supervisor,
    # from the stage processes' progress files and their manifests in the store).
    work_dir = Path(open_pipeline(spec_path).work_dir)
    samples = _wait_for(lambda: _stage_figures(work_dir, ("a", "b")), "both stages' figures at /metrics", driver)
    for stage in ("a", "b"):
        assert value(samples, "barrierflow_batches_total", pipeline=data["name"], stage=stage) >= 1, stage
        assert value(samples, "barrierflow_last_checkpoint_id", pipeline=data["name"], stage=stage) >= 1, stage
    stopped = main(["stop", str(spec_path), "--savepoint", "--timeout", "5m"])
    said, why = capsys.readouterr()
    if stopped != 0:
        code, out, err = _ended(driver, 1)
        pytest.fail(f"stop exited {stopped}: {why}\ndriver ({code}):\n{out}\n{err[-5000:]}")
    code, out, err = _ended(driver, 180)
    assert code == 0, f"{code}\n{out}\n{err[-3000:]}"
    ids = sorted(int(p.parent.name.removeprefix("chk-")) for p in chk.glob("global/chk-*/_metadata.json"))
    savepoint = ids[-1]
    assert f"stopped with savepoint {savepoint} (global checkpoint {savepoint}" in said, said
    assert str(chk / global_key(savepoint, "_metadata")) in said
    for stage in ("a", "b"):
        stage_manifest = Manifest.model_validate_json(
            (chk / stage_prefix(stage) / manifest_key(savepoint)).read_text(encoding="utf-8"))
        assert stage_manifest.kind is CheckpointKind.SAVEPOINT, stage
    cut = GlobalManifest.model_validate_json((chk / global_key(savepoint, "_metadata")).read_text(encoding="utf-8"))
    assert set(cut.stages) == {"a", "b"}
    a = Manifest.model_validate_json((chk / stage_prefix("a") / manifest_key(savepoint)).read_text(encoding="utf-8"))
    # Stage b's sink committed the savepoint: the output is every record stage a read up to it.
    assert _output(tmp_path / "out") == _through(a.barrier_offsets["events"])

    # The next run continues from the savepoint, exactly once, to the end of the source: `barrierflow
    # run --until-exhausted`'s own function, here on the suite's shared session, after either shape
    # (the restore at start is the run's, whatever the shape: a run with --processes restoring a
    # global checkpoint is tests/runtime/test_stage_processes.py).
    from barrierflow.ops.run import run

    spark = request.getfixturevalue("spark")
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        outcome = run(spec_path, until_exhausted=True, duration=600)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    assert outcome.attempt >= 1, outcome  # a start after the first restores the newest cut as a new attempt
    assert _output(tmp_path / "out") == [(p, o) for p in range(PARTITIONS) for o in range(records)]


@pytest.mark.spark
@pytest.mark.slow(30)
@pytest.mark.timeout(900)
def test_stop_without_a_savepoint_names_the_latest_checkpoint(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run is ``barrierflow run``'s own function in this process (the shared session, no
    driver of its own: the stop's protocol is the store and the lease, whoever runs it); a
    driver in a process of its own is stopped by the other tests of this module."""
    spec_path = _single_spec(tmp_path)
    store = CheckpointStore.for_spec(load_spec(spec_path))
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    running = _RunInThisProcess(spec_path)
    try:
        _wait_for(lambda: (tmp_path / "chk" / manifest_key(1)).is_file(), "the first checkpoint", running)
        assert main(["stop", str(spec_path), "--json"]) == 0
        said = json.loads(capsys.readouterr().out)
        outcome = running.ended(120)  # the run returned: `barrierflow run` exits 0
    finally:
        running.thread.join(330)
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    assert outcome.stop is not None and outcome.stop.status == "stopped" and outcome.stop.savepoint is None
    latest = max(store.checkpoint_ids())
    assert said["status"] == "stopped" and said["savepoint"] is None and said["latest"] == latest, said
    assert f"the latest completed checkpoint is {latest}" in said["message"]
    assert all(store.get(c).kind is CheckpointKind.CHECKPOINT for c in store.checkpoint_ids())
    assert _output(tmp_path / "out") == _through(store.get(latest).barrier_offsets["events"])


class _FlakyStore(LocalObjectStore):
    """Uploads of checkpoint files fail while :attr:`failing`."""

    failing = False

    def put_file(self, key: str, local_path: str, sha256: str | None = None) -> None:
        if self.failing and key.startswith("shared/"):
            raise StorageError(f"injected: cannot write {key}")
        super().put_file(key, local_path, sha256)


@pytest.mark.spark
@pytest.mark.slow(60)
def test_a_savepoint_that_fails_fails_the_stop_and_the_pipeline_keeps_running(spark: Any, tmp_path: Path) -> None:
    from barrierflow.runtime.job import StreamingJob

    spec_path = _single_spec(tmp_path)
    data = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    data["checkpoint"]["interval"] = "5s"  # no checkpoint of its own in flight when the savepoint's starts
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    spec = load_spec(spec_path)
    store = _FlakyStore(tmp_path / "chk")
    job = StreamingJob(spec, spark=spark, spec_path=str(spec_path), checkpoint_objects=store)
    seen: dict[str, Any] = {}

    def on_tick(job: StreamingJob) -> None:
        coordinator = job.coordinator
        assert coordinator is not None and job.lease is not None and job.lease.token is not None
        if "requested" not in seen and coordinator.completed_count >= 1 and not coordinator.pending:
            store.failing = True  # the savepoint's upload fails
            write_request(store, StopRequest.new(job.lease.token.fence, savepoint=True))
            seen["requested"] = coordinator.completed_count
        outcome = read_outcome(store, job.lease.token.fence)
        if "failed" not in seen and outcome is not None and outcome.status == "failed":
            store.failing = False
            seen["failed"], seen["after"] = outcome, coordinator.completed_count

    result = job.run(on_tick=on_tick, duration=300,
                     until=lambda job: "failed" in seen and job.driver.keeper.completed_count > seen["after"])
    outcome = seen["failed"]
    assert result.stopped_by is None  # the run went on, and ended on its own limit
    assert outcome.savepoint in [f.checkpoint_id for f in result.failed]
    assert f"checkpoint {outcome.savepoint}, the savepoint of the stop, failed (UPLOAD_FAILED" in outcome.message
    assert "the pipeline keeps running" in outcome.message
    checkpoints = CheckpointStore(store, spec.name)
    assert max(checkpoints.checkpoint_ids()) > outcome.savepoint  # it triggered checkpoints again
    assert all(checkpoints.get(c).kind is CheckpointKind.CHECKPOINT for c in checkpoints.checkpoint_ids())
