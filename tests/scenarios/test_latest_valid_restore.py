"""Corrupt the five newest checkpoints of a real job, each in a different way; ``verify``
names each file and reason, ``restore --latest-valid`` picks the newest intact checkpoint,
and the job's output stays exactly-once although the corrupt checkpoints' epochs were
already committed (they are replayed with their output suppressed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key, shared_key
from barrierflow.cli.main import main
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec

from tests.scenarios.harness import finish, window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600), pytest.mark.slow(60)]
RECORDS = 6000


def _blob(root: Path, manifest: Manifest, prefix: str) -> tuple[str, Path]:
    """A file of ``manifest`` this checkpoint uploaded itself, under ``prefix``, and its blob."""
    entry = next(f for f in manifest.files if f.path.startswith(prefix) and f.uploaded)
    return entry.path, root / shared_key(entry.sha256)


def delete_state_file(root: Path, m: Manifest) -> tuple[str, str]:
    path, blob = _blob(root, m, "state/")
    blob.unlink()
    return path, "missing from the store"


def flip_byte(root: Path, m: Manifest) -> tuple[str, str]:
    path, blob = _blob(root, m, "state/")
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    return path, "sha256 mismatch"


def remove_offsets_file(root: Path, m: Manifest) -> tuple[str, str]:
    path, blob = _blob(root, m, f"offsets/{m.spark_batch_id}")
    blob.unlink()
    return path, "missing from the store"


def truncate_manifest(root: Path, m: Manifest) -> tuple[str, str]:
    target = root / manifest_key(m.checkpoint_id)
    target.write_bytes(target.read_bytes()[:200])
    return manifest_key(m.checkpoint_id), "truncated"


def delete_manifest(root: Path, m: Manifest) -> tuple[str, str]:
    (root / manifest_key(m.checkpoint_id)).unlink()
    return manifest_key(m.checkpoint_id), "no _metadata.json"


#: Oldest to newest. Damage to a file also breaks the newer checkpoints that share it, never
#: an older one, so the sixth-newest checkpoint stays intact.
CORRUPTIONS: list[Callable[[Path, Manifest], tuple[str, str]]] = [
    delete_manifest, truncate_manifest, remove_offsets_file, flip_byte, delete_state_file]


def committed(out: Path) -> list[tuple[Any, ...]]:
    table = read_committed(f"file://{out}")
    return window_rows(table.to_pylist() if table is not None else [])


def test_restore_latest_valid_skips_corrupt_committed_checkpoints_exactly_once(
        spark, tmp_path: Path, reference_rows, capsys: pytest.CaptureFixture[str]) -> None:
    out, root = tmp_path / "out", tmp_path / "checkpoints"
    spec_path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"},
                              records=RECORDS, per_batch=150)
    spec = load_spec(spec_path)
    first = StreamingJob(spec, spark=spark, spec_path=str(spec_path)).run(checkpoints=8, duration=300)
    for _ in range(5):  # on a fast machine 8 checkpoints may close no window yet: run a little more
        if committed(out):
            break
        StreamingJob(spec, spark=spark, spec_path=str(spec_path)).run(checkpoints=2, duration=300)
    store = CheckpointStore.for_spec(spec)
    manifests = store.completed()
    assert len(manifests) >= 6, f"only {len(manifests)} checkpoints completed"
    assert manifests[-1].barrier_offsets["events"] != {"0": RECORDS, "1": RECORDS}, "the source ran out too early"
    before = committed(out)
    assert before and len(before) < len(reference_rows(RECORDS)), "the first run's epochs were not committed"
    intact, damaged = manifests[-6], manifests[-5:]
    expected = {m.checkpoint_id: corrupt(root, m) for m, corrupt in zip(damaged, CORRUPTIONS, strict=True)}
    capsys.readouterr()

    assert main(["verify", str(spec_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["failed"]) == sorted(expected)
    for checkpoint_id, (file, reason) in expected.items():
        bad = next(r for r in report["reports"] if r["checkpoint_id"] == checkpoint_id)
        failures = [c for stage in bad["stages"].values() for c in stage["checks"] if not c["passed"]]
        assert any(c["file"] == file and reason in c["message"] for c in failures), (checkpoint_id, failures)
    assert all(r["passed"] for r in report["reports"] if r["checkpoint_id"] <= intact.checkpoint_id)

    assert main(["restore", str(spec_path), "--latest-valid", "--json"]) == 0
    restored = json.loads(capsys.readouterr().out)
    assert restored["checkpoint_id"] == intact.checkpoint_id
    assert sorted(s["checkpoint_id"] for s in restored["skipped"]) == sorted(expected)
    assert restored["replay"] is not None and set(restored["replay"]["epochs"]) >= set(expected)
    assert committed(out) == before, "restoring must not touch committed output"

    # The job stops again soon after (a crash during the recovery, say) and is restored from
    # its newest checkpoint, most likely one taken during the replay: the rest of the
    # replay must still be suppressed although the committed epochs have smaller ids.
    StreamingJob(spec, spark=spark, spec_path=str(spec_path)).run(checkpoints=2, duration=300)
    assert main(["restore", str(spec_path), "--latest"]) == 0
    capsys.readouterr()
    finish(spark, spec_path)
    assert committed(out) == reference_rows(RECORDS)
    newer = [m.checkpoint_id for m in CheckpointStore.for_spec(spec).completed()
             if m.checkpoint_id > intact.checkpoint_id]
    assert newer and min(newer) > max(expected), "a new checkpoint reused the id of a corrupt one"
    assert first.completed  # the first run's own checkpoints are what was damaged
