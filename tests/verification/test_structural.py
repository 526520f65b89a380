"""Structural verification, ``verify`` and ``restore --latest-valid`` on checkpoints built
by the real coordinator on a hand-written Spark dir (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.errors import SourceError
from barrierflow.pipeline.model import stage_pipeline
from barrierflow.spec.models import StageSpec
from barrierflow.transactions.ledger import TxnState
from barrierflow.verification.choice import LATEST_VALID, CheckpointChoice, choose_checkpoint
from barrierflow.verification.report import load_report, report_key
from barrierflow.verification.runner import candidate_ids, verify_checkpoints
from barrierflow.verification.structural import check_monotonic, check_source_retention, check_state_files

from tests.pipeline_specs import make_spec, spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory


def _latest_valid(spec: StageSpec, store: CheckpointStore) -> CheckpointChoice:
    """``restore --latest-valid``'s choice over the one-stage pipeline of ``spec`` on ``store``."""
    return choose_checkpoint(stage_pipeline(spec, store=store), LATEST_VALID)


def _delete_state_file(f: CheckpointFactory, m) -> tuple[str, str]:
    path = f"state/0/0/{m.state_version}.delta"
    f.shared_path(m, path).unlink()
    return path, "missing from the store"


def _flip_byte(f: CheckpointFactory, m) -> tuple[str, str]:
    path = f"state/0/1/{m.state_version}.delta"
    target = f.shared_path(m, path)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    return path, "sha256 mismatch"


def _truncate_manifest(f: CheckpointFactory, m) -> tuple[str, str]:
    key = f"chk-{m.checkpoint_id}/_metadata.json"
    target = f.tmp_path / "checkpoints" / key
    target.write_bytes(target.read_bytes()[:200])
    return key, "truncated"


def _delete_manifest(f: CheckpointFactory, m) -> tuple[str, str]:
    key = f"chk-{m.checkpoint_id}/_metadata.json"
    (f.tmp_path / "checkpoints" / key).unlink()
    return key, "no _metadata.json"


def _delete_offsets(f: CheckpointFactory, m) -> tuple[str, str]:
    path = f"offsets/{m.spark_batch_id}"
    f.shared_path(m, path).unlink()
    return path, "missing from the store"


CORRUPTIONS = {"state-file-deleted": _delete_state_file, "byte-flipped": _flip_byte,
               "manifest-truncated": _truncate_manifest, "manifest-missing": _delete_manifest,
               "offsets-file-removed": _delete_offsets}


def test_intact_checkpoints_pass_and_results_are_stored(tmp_path: Path) -> None:
    f = CheckpointFactory(tmp_path)
    f.take(3)
    spec = make_spec(tmp_path)
    reports = verify_checkpoints(spec, f.store, candidate_ids(f.store))
    assert [r.checkpoint_id for r in reports] == [1, 2, 3]
    assert all(r.passed for r in reports), [r.reason() for r in reports]
    names = {c.name for c in reports[-1].checks}
    assert names == {"manifest", "required-files", "files", "offsets-log", "offsets-monotonic",
                     "source-retention", "ledger", "state-files"}
    stored = json.loads((tmp_path / "checkpoints" / report_key(3)).read_text())
    assert stored["format"] == "barrierflow-verification" and stored["format_version"] == 1
    assert stored["passed"] is True and stored["started"] <= stored["finished"]
    assert load_report(f.store.objects, 3) == reports[-1]


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_verify_reports_each_corruption_and_latest_valid_skips_it(tmp_path: Path, capsys, corruption: str) -> None:
    f = CheckpointFactory(tmp_path, ledger_sink=False)
    manifests = f.take(4)
    spec_path = write_spec(tmp_path, spec_dict(tmp_path))
    assert main(["verify", str(spec_path)]) == 0  # every checkpoint passes, results stored
    capsys.readouterr()
    file, reason = CORRUPTIONS[corruption](f, manifests[-1])

    code = main(["verify", str(spec_path), "--json", "--html", str(tmp_path / "report.html")])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["failed"] == [4]
    bad = next(r for r in out["reports"] if r["checkpoint_id"] == 4)
    [stage] = bad["stages"].values()  # one stage: the cut has no checks of its own
    failures = [c for c in stage["checks"] if not c["passed"]]
    assert bad["checks"] == [] and not bad["passed"]
    assert any(c["file"] == file and reason in c["message"] for c in failures), failures
    assert all(r["passed"] for r in out["reports"] if r["checkpoint_id"] != 4)
    assert "failed" in (tmp_path / "report.html").read_text() and file in (tmp_path / "report.html").read_text()

    assert main(["restore", str(spec_path), "--latest-valid"]) == 0
    out = capsys.readouterr().out
    assert "skipped checkpoint 4" in out and "restored checkpoint 3" in out
    restored = tmp_path / "work" / "spark-checkpoint"
    assert (restored / "commits" / str(manifests[2].spark_batch_id)).is_file()
    assert not (restored / "commits" / str(manifests[3].spark_batch_id)).exists()


def test_missing_manifest_is_found_through_the_ledger_without_an_earlier_result(tmp_path: Path) -> None:
    f = CheckpointFactory(tmp_path)
    manifests = f.take(3)
    _delete_manifest(f, manifests[-1])  # chk-3/ is now empty, but its transaction was committed
    reports = verify_checkpoints(make_spec(tmp_path), f.store, candidate_ids(f.store))
    assert [(r.checkpoint_id, r.passed) for r in reports] == [(1, True), (2, True), (3, False)]
    assert reports[-1].checks[0].file == "chk-3/_metadata.json"


def test_latest_valid_trusts_a_stored_pass_only_while_intact(tmp_path: Path) -> None:
    f = CheckpointFactory(tmp_path)
    manifests = f.take(3)
    spec = make_spec(tmp_path)
    verify_checkpoints(spec, f.store, [1, 2, 3])
    assert _latest_valid(spec, f.store).checkpoint_id == 3
    _delete_state_file(f, manifests[-1])  # damaged after it was verified
    selection = _latest_valid(spec, f.store)
    assert selection.checkpoint_id == 2
    assert selection.skipped[0][0] == 3 and "damaged since" in selection.skipped[0][1]
    assert load_report(f.store.objects, 3).passed is False  # the new verdict is stored


def test_a_manifest_without_a_delta_of_the_state_chain_fails_state_files(tmp_path: Path) -> None:
    f = CheckpointFactory(tmp_path)
    manifest = f.take(2)[-1]
    assert check_state_files(f.store, manifest).passed
    dropped = f"state/0/0/{manifest.state_version}.delta"
    broken = manifest.model_copy(update={"files": [e for e in manifest.files if e.path != dropped]})
    check = check_state_files(f.store, broken)
    assert not check.passed and check.file == dropped and f"version {manifest.state_version}" in check.message


def test_ledger_must_hold_a_live_transaction_for_each_sink_handle(tmp_path: Path) -> None:
    f = CheckpointFactory(tmp_path)
    f.take(2)
    txn = f.ledger.get("out", 2)
    f.ledger.put(txn.model_copy(update={"state": TxnState.ABORTED}))
    report = verify_checkpoints(make_spec(tmp_path), f.store, [2])[0]
    assert [c.name for c in report.failures] == ["ledger"]
    assert "ABORTED" in report.failures[0].message


def test_offsets_monotonic_and_source_retention(tmp_path: Path) -> None:
    f = CheckpointFactory(tmp_path, ledger_sink=False)
    first, second = f.take(2)
    assert check_monotonic(second, first).passed
    went_back = second.model_copy(update={"barrier_offsets": {"events": {"0": 1, "1": 20}}})
    check = check_monotonic(went_back, first)
    assert not check.passed and "events[0]: 1 < 10" in check.message
    assert check_source_retention(second, {"events": None}).passed  # the generator keeps everything
    gone = check_source_retention(second, {"events": {"0": 5, "1": 25}})
    assert not gone.passed and "events[1]: 20 < beginning offset 25" in gone.message
    skipped = check_source_retention(second, SourceError("broker down"))
    assert skipped.passed and skipped.status.value == "skipped"


def test_verify_bad_input_exits_2(tmp_path: Path) -> None:
    CheckpointFactory(tmp_path).take(1)
    spec_path = write_spec(tmp_path, spec_dict(tmp_path))
    assert main(["verify", str(spec_path), "--checkpoint", "42"]) == 2
    assert main(["verify", str(spec_path), "--latest", "0"]) == 2
    assert main(["verify", str(spec_path), "--latest", "1"]) == 0


def test_a_job_on_a_fresh_machine_restores_the_newest_valid_checkpoint(tmp_path: Path) -> None:
    """No local Spark checkpoint: ``run`` restores by itself, skipping a corrupt newest one."""
    import shutil

    from barrierflow.errors import CheckpointNotFoundError
    from barrierflow.runtime.job import StreamingJob

    f = CheckpointFactory(tmp_path, ledger_sink=False)
    manifests = f.take(3)
    local = tmp_path / "work" / "spark-checkpoint"
    shutil.rmtree(local, ignore_errors=True)  # the job moved to a fresh machine
    _flip_byte(f, manifests[-1])
    StreamingJob(make_spec(tmp_path)).restore_at_start()
    assert (local / "commits" / str(manifests[1].spark_batch_id)).is_file()
    assert not (local / "commits" / str(manifests[2].spark_batch_id)).exists()

    shutil.rmtree(local)
    for m in manifests[:2]:
        _delete_manifest(f, m)
    _truncate_manifest(f, manifests[2])
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint that passes verification"):
        StreamingJob(make_spec(tmp_path)).restore_at_start()  # never silently start from scratch


def test_latest_valid_rehashes_a_checkpoint_verified_earlier(tmp_path: Path) -> None:
    """Bit rot after a passed verification keeps every size: only the sha256 shows it."""
    f = CheckpointFactory(tmp_path)
    manifests = f.take(3)
    spec = make_spec(tmp_path)
    verify_checkpoints(spec, f.store, [1, 2, 3])
    _flip_byte(f, manifests[-1])
    selection = _latest_valid(spec, f.store)
    assert selection.checkpoint_id == 2
    assert selection.skipped[0][0] == 3 and "sha256 mismatch" in selection.skipped[0][1]
