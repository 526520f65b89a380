"""A spec change the saved state cannot honour is refused at ``run``, before any stage starts.

Each test runs a small bounded pipeline once on empty state, changes its spec, and runs it
again over the same work dir and checkpoint store: a changed ``spark.shuffle_partitions`` or
a changed event-time window is refused (:class:`~barrierflow.errors.IncompatibleStateError`,
exit 2 at the command line) naming the pipeline, the stage and ``old -> new``, and leaves the
Spark checkpoint and the output as they were; an unchanged restart runs. State without a
recorded fingerprint is compared by Spark's own state metadata, and refused when that cannot
decide.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.errors import IncompatibleStateError, UnverifiedStateError
from barrierflow.runtime.job import StreamingJob
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.runtime.state_compat import FINGERPRINT_FILE
from barrierflow.spec import load_spec, parse_staged_spec

from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import two_stage_spec
from tests.support.state_origin import OPERATOR_METADATA, strip_state_records

pytestmark = pytest.mark.spark

SHUFFLE = "spark.sql.shuffle.partitions"


@pytest.fixture
def session(spark: Any) -> Any:
    """The shared SparkSession, its shuffle partitions put back afterwards (a run sets the spec's)."""
    before = spark.conf.get(SHUFFLE)
    yield spark
    spark.conf.set(SHUFFLE, before)


def window_spec(tmp_path: Path, *, window: str = "10 seconds", shuffle_partitions: int = 4) -> dict[str, Any]:
    """The demo's shape, small: generator -> per-key event-time window counts (append) ->
    Parquet; 2 x 300 records, 100 ms of event time apart (30 s of event time)."""
    return {
        "version": 1,
        "name": f"sc{uuid.uuid4().hex[:6]}",
        "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                     "max_records_per_batch": 150, "records_per_partition": 300, "keys": 5,
                     "event_time_step_ms": 100}],
        "transformation": {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                           "output_mode": "append", "options": {"window": window}},
        "event_time": {"column": "event_time", "watermark_delay": "5s"},
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "300ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": shuffle_partitions},
    }


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def files_of(*roots: Path) -> dict[str, str]:
    """Every file under ``roots``: path -> sha256 of its content."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for root in roots if root.exists() for p in sorted(root.rglob("*")) if p.is_file()}


def test_changed_shuffle_partitions_are_refused_with_exit_2_and_change_nothing(
        session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """4 -> 8 over the same store: Spark would keep 4 (its offset log's conf wins); the run is
    refused naming the stage, 4 and 8, and the fix, and neither the Spark checkpoint nor the
    output changes. So is ``spark.state_store`` hdfs -> rocksdb (Spark keeps the provider)."""
    data = window_spec(tmp_path)
    path = write(tmp_path, data)
    assert main(["run", str(path), "--until-exhausted", "--quiet", "--duration", "150"]) == 0
    checkpoint = tmp_path / "work" / "spark-checkpoint"
    assert (checkpoint / FINGERPRINT_FILE).is_file()
    before = files_of(checkpoint, tmp_path / "out")
    assert any("/out/" in p for p in before), "the first run committed no output"

    data["spark"]["shuffle_partitions"] = 8
    write(tmp_path, data)
    capsys.readouterr()
    assert main(["run", str(path), "--until-exhausted", "--quiet", "--duration", "150"]) == 2
    err = capsys.readouterr().err
    name = data["name"]
    assert f"stage {name} of pipeline {name}" in err and "spark.shuffle_partitions: 4 -> 8" in err, err
    assert "revert the change" in err and "new `work_dir` and a new `checkpoint.storage`" in err, err
    assert "`barrierflow stop SPEC --savepoint`" in err, err
    assert "`barrierflow upgrade SPEC --to NEW_SPEC --dry-run`" in err, err
    assert files_of(checkpoint, tmp_path / "out") == before

    # another state store: Spark would keep the checkpoint's provider as silently
    data["spark"].update({"shuffle_partitions": 4, "state_store": "rocksdb"})
    write(tmp_path, data)
    assert main(["run", str(path), "--until-exhausted", "--quiet", "--duration", "150"]) == 2
    err = capsys.readouterr().err
    assert "spark.state_store: hdfs -> rocksdb; Spark would keep hdfs" in err, err
    assert files_of(checkpoint, tmp_path / "out") == before


def test_a_changed_window_is_refused_also_after_a_restore_from_the_store(session: Any, tmp_path: Path) -> None:
    """10 s -> 20 s windows over state whose keys are 10-second windows: refused, also when the
    work dir is gone and the run restores the newest checkpoint from the store (the fingerprint
    travels with every checkpoint)."""
    data = window_spec(tmp_path)
    path = write(tmp_path, data)
    first = StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(until_exhausted=True, duration=150)
    assert first.completed
    checkpoint = tmp_path / "work" / "spark-checkpoint"
    assert any(f.path == FINGERPRINT_FILE for f in first.completed[-1].files)

    import shutil

    shutil.rmtree(tmp_path / "work")
    data["transformation"]["options"]["window"] = "20 seconds"
    write(tmp_path, data)
    with pytest.raises(IncompatibleStateError) as refused:
        StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(until_exhausted=True, duration=150)
    message = str(refused.value)
    assert refused.value.stage == data["name"] and "Aggregate window: 10 s -> 20 s" in message, message
    assert (checkpoint / "commits").is_dir(), "the restore at start did not bring the state back"
    before = files_of(checkpoint, tmp_path / "out")

    # The window put back: the restored state runs on.
    data["transformation"]["options"]["window"] = "10 seconds"
    write(tmp_path, data)
    again = StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(until_exhausted=True, duration=150)
    assert again.completed
    assert files_of(checkpoint) != {k: v for k, v in before.items() if k.startswith(str(checkpoint))}


def test_a_changed_stage_of_two_is_refused_by_name_before_either_starts(
        session: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """Stage b of a two-stage pipeline keeps running totals per key; its key's type changes
    (long -> string): refused naming stage b and the key, before either stage's query started.
    The run restored the last global checkpoint first (a new attempt), as every start of a
    pipeline of several stages does, and then planned no batch in either stage; the committed
    output is unchanged."""
    data = two_stage_spec(tmp_path, kafka_endpoint)
    b = data["stages"][1]
    b["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                           "output_mode": "update"}
    first = StagedPipelineJob(parse_staged_spec(data), spark=session).run(until_exhausted=True, duration=150)
    assert first.completed
    restored = first.completed[-1].checkpoint_id

    def output_files() -> dict[str, str]:
        """The committed output: ``_staging`` holds write-ahead batches of uncommitted epochs, and
        the restore at start discards those of a cut the first run left incomplete."""
        return {k: v for k, v in files_of(tmp_path / "out").items() if "/_staging/" not in k}

    output = output_files()
    assert output, "the first run committed nothing"

    b["sources"][0]["json_fields"]["key"] = "string"
    with pytest.raises(IncompatibleStateError) as refused:
        StagedPipelineJob(parse_staged_spec(data), spark=session).run(until_exhausted=True, duration=150)
    message = str(refused.value)
    assert refused.value.stage == "b" and "stage b of pipeline two" in message, message
    assert "Aggregate grouping keys: key: bigint -> key: string" in message, message
    assert output_files() == output
    for stage in ("a", "b"):
        manifest = next(m for m in first.stage_manifests[stage] if m.checkpoint_id == restored)
        logs = {f.path for f in manifest.files if f.path.startswith(("offsets/", "commits/"))}
        checkpoint = tmp_path / "work" / "stages" / stage / "spark-checkpoint"
        on_disk = {p.relative_to(checkpoint).as_posix() for log in ("offsets", "commits")
                   for p in (checkpoint / log).iterdir() if not p.name.startswith(".")}
        assert on_disk == logs, (stage, sorted(on_disk - logs))


def test_an_unchanged_restart_runs(session: Any, tmp_path: Path) -> None:
    """The same spec twice: the second run is not refused and processes the rest of the source."""
    data = window_spec(tmp_path)
    data["sources"][0]["records_per_partition"] = 600
    path = write(tmp_path, data)
    first = StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(checkpoints=1, duration=150)
    assert first.completed
    second = StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(until_exhausted=True,
                                                                                   duration=150)
    assert second.completed and second.batches > 0


@pytest.mark.slow(60)
def test_state_without_a_fingerprint_is_compared_by_sparks_metadata_and_unknown_is_refused_naming_the_fix(
        session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Today's state with its fingerprint taken out (as state written before barrierflow
    recorded one): a 10 s -> 20 s window is refused, named from the stored keys; the unchanged
    spec runs and records the fingerprint (in the Spark checkpoint and in its next checkpoint);
    with Spark's operator metadata taken out too, the run is refused as unknown (exit 2), naming
    ``upgrade --assume-compatible``, and the state is left as it was."""
    data = window_spec(tmp_path)
    data["sources"][0]["records_per_partition"] = 900
    path = write(tmp_path, data)
    checkpoint = tmp_path / "work" / "spark-checkpoint"
    assert StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(checkpoints=1, duration=150).completed
    assert strip_state_records(path) > 0 and not (checkpoint / FINGERPRINT_FILE).exists()

    data["transformation"]["options"]["window"] = "20 seconds"
    write(tmp_path, data)
    with pytest.raises(IncompatibleStateError) as refused:
        StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(checkpoints=1, duration=150)
    message = str(refused.value)
    assert "window changed: 10 s -> 20 s" in message and "by Spark's state metadata" in message, message
    assert not (checkpoint / FINGERPRINT_FILE).exists()

    data["transformation"]["options"]["window"] = "10 seconds"
    write(tmp_path, data)
    again = StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(checkpoints=1, duration=150)
    assert again.completed and again.batches > 0
    assert (checkpoint / FINGERPRINT_FILE).is_file()
    assert any(f.path == FINGERPRINT_FILE for f in again.completed[-1].files)

    strip_state_records(path, paths=(FINGERPRINT_FILE, OPERATOR_METADATA))
    before = files_of(checkpoint)
    capsys.readouterr()
    assert main(["run", str(path), "--until-exhausted", "--quiet", "--duration", "150"]) == 2
    err = capsys.readouterr().err
    assert "Unknown is not compatible" in err and "operator metadata (state/0/_metadata) is missing" in err, err
    assert "`barrierflow upgrade SPEC --to SPEC --assume-compatible`" in err, err
    assert files_of(checkpoint) == before
    with pytest.raises(UnverifiedStateError):
        StreamingJob(load_spec(path), spark=session, spec_path=str(path)).run(checkpoints=1, duration=150)
