"""The RocksDB state store provider (``spark.state_store: rocksdb``) end to end on a real job:
the synchronous phase hard-links exactly the files that load the barrier's state version
(the zip Spark loads from, the ``SSTs/`` files its metadata names, the changelogs after it),
the upload is incremental by file, and those files alone, restored into a fresh directory,
load the same state as the job's own Spark checkpoint (read with Spark's ``statestore``
reader; deep verification passes). Both with and without changelog checkpointing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.errors import CheckpointError, SpecError
from barrierflow.retention.local import spark_state_files
from barrierflow.runtime.job import StreamingJob
from barrierflow.spark import state_files
from barrierflow.spark.session import ROCKSDB_CHANGELOG
from barrierflow.spec import parse_spec
from barrierflow.verification.deep import deep_checks, read_state
from barrierflow.verification.structural import check_state_files

from tests.pipeline_specs import make_spec, spec_dict


def test_a_wrong_state_store_is_refused_naming_the_field_and_the_values(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["spark"] = {"state_store": "rocks"}
    with pytest.raises(SpecError) as error:
        parse_spec(data)
    message = str(error.value)
    assert "spark.state_store" in message and "'hdfs'" in message and "'rocksdb'" in message


def _state(spark: Any, checkpoint: Path, batch: int) -> list[tuple[Any, ...]]:
    rows = read_state(spark, checkpoint, batch)
    assert rows is not None
    return sorted(tuple(r) for r in rows.collect())


@pytest.mark.spark
@pytest.mark.parametrize("changelog", ["true", "false"])
def test_rocksdb_checkpoint_files_load_the_barrier_version_in_a_fresh_directory(
        spark: Any, tmp_path: Path, changelog: str) -> None:
    spec = make_spec(tmp_path, checkpoint={"timeout": "300s"}, spark={"state_store": "rocksdb", "conf": {
        ROCKSDB_CHANGELOG: changelog, "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}})
    job = StreamingJob(spec, spark=spark)
    result = job.run(checkpoints=3, duration=240)
    assert len(result.completed) >= 3
    manifests = [job.store.get(i) for i in job.store.checkpoint_ids()]
    latest = manifests[-1]
    version = latest.state_version
    local = job.layout.spark_checkpoint
    partitions = sorted(p for p in (local / "state" / "0").iterdir() if p.name.isdigit())
    assert partitions, "the job has no state partitions"
    listed = {f.path for f in latest.files}
    for partition in partitions:
        key = f"state/0/{partition.name}"
        mine = {p[len(key) + 1:] for p in listed if p.startswith(key + "/")}
        zips = {n for n in mine if n.endswith(".zip")}
        changelogs = sorted(int(n.split(".")[0]) for n in mine if n.endswith(".changelog"))
        base = latest.state_bases[key]
        # Exactly the files Spark loads version V+1 from, read from the zip's own metadata.
        expected = set(state_files.rocksdb_chain_files(local / key, base, version))
        assert {n for n in mine if not n.startswith("_metadata/")} == expected
        if changelog == "false":
            assert zips == {f"{version}.zip"} and not changelogs
        else:
            assert changelogs == list(range(base + 1, version + 1))
        # Only the SSTs of that version, not every SST the partition directory holds.
        ssts = partition / "SSTs"  # with changelogs only, Spark's maintenance may not have written a zip yet
        present = {f"SSTs/{p.name}" for p in ssts.iterdir() if not p.name.startswith(".")} if ssts.is_dir() else set()
        assert {n for n in mine if n.startswith("SSTs/")} <= present
    # Incremental by file: a state file an earlier checkpoint already stored (same content) is
    # referenced, not uploaded again. Which SSTs survive from one version to the next depends on
    # RocksDB's compactions, so the test checks the rule on whatever is shared, not a count.
    earlier = {f.sha256 for m in manifests[:-1] for f in m.files}
    shared = [f for f in latest.files if f.path.startswith("state/") and f.sha256 in earlier]
    assert shared, "no state file of the newest checkpoint was stored before (the state never carried over)"
    assert not [f.path for f in shared if f.uploaded], "a state file already in the store was uploaded again"
    # Structural verification finds a file of that set missing from the manifest.
    assert check_state_files(job.store, latest).passed
    key = f"state/0/{partitions[0].name}"
    dropped = f"{key}/{state_files.rocksdb_chain_files(local / key, latest.state_bases[key], version)[-1]}"
    broken = latest.model_copy(update={"files": [f for f in latest.files if f.path != dropped]})
    assert check_state_files(job.store, broken).file == dropped
    # Local retention leaves RocksDB directories to Spark's maintenance, even at its most eager.
    assert spark_state_files(local, latest.spark_batch_id, 1, latest.state_bases)[0] == []
    restored = tmp_path / "fresh"
    materialize_checkpoint(job.store, latest, restored)
    expected_state = _state(spark, local, latest.spark_batch_id)
    assert expected_state, "the job's state is empty"
    assert _state(spark, restored, latest.spark_batch_id) == expected_state
    checks = deep_checks(spec, job.store, latest, spark=spark)
    assert all(c.passed for c in checks), [c.message for c in checks if not c.passed]
    assert any(c.name == "state-read" for c in checks)


def _zip(path: Path, ssts: list[str]) -> None:
    import json
    import zipfile

    metadata = {"sstFiles": [{"localFileName": f"{n[:6]}.sst", "dfsSstFileName": n, "sizeBytes": 1} for n in ssts],
                "numKeys": 1}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata", "v1\n" + json.dumps(metadata))
        archive.writestr("CURRENT", "MANIFEST-000005\n")


def test_rocksdb_version_loads_from_the_newest_zip_and_the_changelogs_after_it(tmp_path: Path) -> None:
    """The layout Spark writes with changelog checkpointing once maintenance wrote snapshots:
    version 6 loads from 4.zip (its SSTs) and changelogs 5-6, not from 2.zip or 7.zip."""
    for v in range(1, 8):
        (tmp_path / f"{v}.changelog").write_bytes(b"x")
    (tmp_path / "SSTs").mkdir()
    for name in ("000008-a.sst", "000009-b.sst", "000012-c.sst", "000015-d.sst"):
        (tmp_path / "SSTs" / name).write_bytes(b"s")
    _zip(tmp_path / "2.zip", ["000008-a.sst", "000009-b.sst"])
    _zip(tmp_path / "4.zip", ["000009-b.sst", "000012-c.sst"])
    _zip(tmp_path / "7.zip", ["000015-d.sst"])
    found = state_files.rocksdb_scan(tmp_path)
    assert state_files.rocksdb_base(found, 6) == 4
    assert state_files.rocksdb_chain_files(tmp_path, 4, 6) == [
        "4.zip", "SSTs/000009-b.sst", "SSTs/000012-c.sst", "5.changelog", "6.changelog"]
    assert state_files.rocksdb_base(found, 7) == 7
    (tmp_path / "6.changelog").unlink()
    with pytest.raises(CheckpointError, match=r"changelogs \[6\] missing"):
        state_files.rocksdb_base(state_files.rocksdb_scan(tmp_path), 6)
