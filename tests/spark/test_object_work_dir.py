"""A work dir on object storage: what the driver does with Spark's checkpoint there, without Spark.

The S3A configuration and the refusal without the ``spark-s3a`` jars; the layout; the offset and
commit logs read through :class:`~barrierflow.storage.object_dir.ObjectDir`; the synchronous
phase's copy of exactly the files a local snapshot would hard-link, reading only the files new
since the previous snapshot; a restore's upload. The whole path with Spark on a cluster:
tests/deploy/test_standalone_cluster.py (single stage).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from barrierflow.checkpointing.snapshot import select_files, select_listed_files, take_object_snapshot
from barrierflow.recovery.restore import upload_spark_checkpoint
from barrierflow.runtime.session import work_dir_jars
from barrierflow.spark import commit_log, offset_log
from barrierflow.spark.s3a import JVM_SET, S3AUnavailableError, s3a_conf
from barrierflow.storage.object_dir import LOG_POLL_SECONDS, ObjectDir, PollThrottle, as_checkpoint_dir
from barrierflow.workdir.layout import JobLayout

from tests.support.s3_server import S3Endpoint


def test_s3a_conf_takes_endpoint_and_region_from_the_environment_and_no_credential() -> None:
    env = {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9", "AWS_REGION": "eu-west-3",
           "AWS_ACCESS_KEY_ID": "key-id-value", "AWS_SECRET_ACCESS_KEY": "secret-value"}
    conf = s3a_conf(env)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"
    assert not any(v in ("key-id-value", "secret-value") for v in conf.values())
    aws = s3a_conf({})
    assert "spark.hadoop.fs.s3a.endpoint" not in aws and aws["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"


def test_a_work_dir_on_object_storage_without_the_s3a_set_is_refused_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARRIERFLOW_JVM_CACHE", str(tmp_path / "empty-cache"))
    assert work_dir_jars([str(tmp_path / "work")]) == []
    with pytest.raises(S3AUnavailableError) as caught:
        work_dir_jars(["s3://bucket/jobs/one"])
    message = str(caught.value)
    assert JVM_SET in message and "make install" in message and "s3://bucket/jobs/one" in message


def test_run_refuses_a_work_dir_on_object_storage_without_the_s3a_set_before_touching_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.cli.main import main

    monkeypatch.setenv("BARRIERFLOW_JVM_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing answers there
    spec = {"name": "objwd", "work_dir": "s3://bucket/jobs/objwd",
            "sources": [{"name": "events", "type": "generator", "partitions": 1, "records_per_partition": 10}],
            "transformation": {"function": "barrierflow.transforms.projection:project",
                               "options": {"columns": {"key": "key"}}},
            "sinks": [{"type": "discard"}],
            "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "1s"}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")
    assert main(["run", str(path), "--until-exhausted"]) == 2
    err = capsys.readouterr().err
    assert JVM_SET in err and "make install" in err and "s3://bucket/jobs/objwd" in err


def test_layout_puts_only_sparks_checkpoint_on_object_storage(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv("BARRIERFLOW_HOME", str(tmp_path))
    layout = JobLayout.for_spec(SimpleNamespace(work_dir="s3a://bucket/jobs/one/", name="one"))  # type: ignore[arg-type]
    assert layout.on_object_storage
    assert str(layout.spark_checkpoint) == "s3a://bucket/jobs/one/spark-checkpoint"
    assert layout.work_dir == tmp_path / "var" / "object-work-dirs" / "bucket" / "jobs" / "one"
    assert layout.control.is_relative_to(tmp_path) and layout.snapshots.is_relative_to(tmp_path)
    local = JobLayout.for_spec(SimpleNamespace(work_dir=str(tmp_path / "w"), name="one"))  # type: ignore[arg-type]
    assert not local.on_object_storage and local.spark_checkpoint == tmp_path / "w" / "spark-checkpoint"


def test_logs_on_object_storage_are_polled_at_most_every_poll_interval(tmp_path: Path) -> None:
    now = [100.0]
    remote = PollThrottle(ObjectDir("s3://bucket/p/spark-checkpoint"), clock=lambda: now[0])
    local = PollThrottle(tmp_path, clock=lambda: now[0])
    assert remote.due() and not remote.due() and local.due() and local.due()
    now[0] += LOG_POLL_SECONDS / 2
    assert not remote.due()
    now[0] += LOG_POLL_SECONDS / 2
    assert remote.due() and not remote.due()


def _offsets(barrier: int, end: int) -> str:
    source = {"barrier": barrier, "partitions": {"0": end}}
    return "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}) + "\n" + json.dumps(source)


def _spark_checkpoint(root: Path, batches: int) -> None:
    """A Spark checkpoint of ``batches`` batches with one HDFS-backed state operator of two
    partitions (a snapshot at version 2 in partition 0), as Spark lays it out."""
    files = {"metadata": '{"id":"q"}', "state/0/_metadata/metadata": "v2\n{}", "sources/0/0": "v1\n0"}
    for batch in range(batches):
        files[f"offsets/{batch}"] = _offsets(batch + 1, 10 * (batch + 1))
        files[f"commits/{batch}"] = 'v1\n{"nextBatchWatermarkMs":0}'
        for partition in (0, 1):
            files[f"state/0/{partition}/{batch + 1}.delta"] = "d" * (batch + 1) * 100
    files["state/0/0/2.snapshot"] = "s" * 10
    files["state/0/0/_metadata/schema"] = "schema"
    files["state/0/0/.2.delta.crc"] = "crc"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_listed_selection_is_the_local_selection(tmp_path: Path) -> None:
    root = tmp_path / "spark-checkpoint"
    _spark_checkpoint(root, 4)
    listing = {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()}
    for batch, first, previous in ((3, 0, None), (3, 2, {"state/0/0": 0, "state/0/1": 0}), (1, 0, None)):
        local, local_bases = select_files(root, batch, first, previous)
        listed, listed_bases = select_listed_files(listing, lambda rel: (root / rel).read_bytes(), batch, first,
                                                   previous)
        assert sorted(listed) == sorted(local) and listed_bases == local_bases


def _upload(root: Path, checkpoint: ObjectDir) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        checkpoint.store.put_file(path.relative_to(root).as_posix(), str(path))


def test_logs_snapshots_and_restore_on_object_storage(s3_store_uri: str, tmp_path: Path,
                                                      s3_endpoint: S3Endpoint,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "spark"
    _spark_checkpoint(root, 3)
    checkpoint = as_checkpoint_dir(s3_store_uri.replace("s3://", "s3a://") + "/spark-checkpoint")
    assert isinstance(checkpoint, ObjectDir)
    _upload(root, checkpoint)

    assert commit_log.committed_batches(checkpoint) == [0, 1, 2]
    assert offset_log.read_offsets(str(checkpoint), 2) == [{"barrier": 3, "partitions": {"0": 30}}]
    assert commit_log.committed_at(checkpoint, 2) is not None and commit_log.committed_at(checkpoint, 7) is None
    with pytest.raises(FileNotFoundError):
        offset_log.read_offsets(checkpoint, 7)

    read: list[str] = []
    download = type(checkpoint.store).download_file

    def counting(store: object, key: str, local_path: str) -> None:
        read.append(key)
        download(store, key, local_path)  # type: ignore[arg-type]

    monkeypatch.setattr(type(checkpoint.store), "download_file", counting)
    snapshots = tmp_path / "snapshots"
    first = take_object_snapshot(checkpoint, snapshots, 1, 1, 0)
    expected, _bases = select_files(root, 1, 0)
    assert sorted(f.relpath for f in first.files) == sorted(expected) == sorted(read)
    assert all(Path(f.linked_path).read_bytes() == (root / f.relpath).read_bytes() for f in first.files)

    # Spark runs two batches more: the next snapshot reads only what is new. Then its
    # maintenance deletes files the snapshots copied: the copies are untouched.
    _spark_checkpoint(root, 5)
    _upload(root, checkpoint)
    read.clear()
    second = take_object_snapshot(checkpoint, snapshots, 2, 4, 2, first.state_bases)
    new = {f.relpath for f in second.files} - {f.relpath for f in first.files}
    assert new and sorted(read) == sorted(new)
    for snapshot in (first, second):
        for f in snapshot.files:
            (checkpoint / f.relpath).unlink(missing_ok=True)
        assert all(Path(f.linked_path).read_bytes() == (root / f.relpath).read_bytes() for f in snapshot.files)
    with pytest.raises(FileNotFoundError):
        (checkpoint / "state/0/1/1.delta").read_text()

    # A restore replaces the whole checkpoint on the store, the logs last.
    restored = tmp_path / "restored"
    _spark_checkpoint(restored, 1)
    upload_spark_checkpoint(restored, checkpoint)
    assert commit_log.committed_batches(checkpoint) == [0]
    assert set(checkpoint.listing()) == {p.relative_to(restored).as_posix() for p in restored.rglob("*")
                                         if p.is_file()}
