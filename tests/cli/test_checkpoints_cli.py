"""`barrierflow checkpoints list/show` print every manifest field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from barrierflow.cli.main import main

from tests.recovery.fake_pipeline import parquet_pipeline as _pipeline

MANIFEST_FIELDS = {
    "checkpoint_id", "status", "spark_batch_id", "barrier_offsets", "trigger_time", "completion_time",
    "barrier_batch_ms", "sync_ms", "async_ms", "full_bytes", "incremental_bytes", "files", "max_event_time",
    "sink_handles", "attempt",
}


def test_list_json_has_every_manifest_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, _spec, _store = _pipeline(tmp_path, 3)
    assert main(["checkpoints", "list", str(spec_path), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [c["checkpoint_id"] for c in listing["completed"]] == [1, 2, 3] and listing["noun"] == "checkpoint"
    [name] = listing["stages"]  # one stage: its own checkpoints in full
    assert [c["stages"][name]["spark_batch_id"] for c in listing["completed"]] == \
        [c["spark_batch_id"] for c in listing["stages"][name]["completed"]]
    for chk in listing["stages"][name]["completed"]:
        assert MANIFEST_FIELDS <= set(chk)
        assert chk["status"] == "COMPLETED"
        assert chk["barrier_offsets"] == {"events": {"0": chk["spark_batch_id"] * 10 + 10,
                                                     "1": chk["spark_batch_id"] * 10 + 10}}
        assert chk["trigger_time"].endswith(("Z", "+00:00")) and chk["files"][0]["sha256"]
        assert chk["sink_handles"][0]["sink"] == "out"


def test_show_and_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, _spec, _store = _pipeline(tmp_path, 1)
    assert main(["checkpoints", "show", str(spec_path), "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    [stage] = shown["stages"].values()
    assert shown["checkpoint_id"] == stage["manifest"]["checkpoint_id"] == 1
    assert MANIFEST_FIELDS <= set(stage["manifest"])
    assert main(["checkpoints", "show", str(spec_path), "1"]) == 0
    text = capsys.readouterr().out
    assert "state/0/0/1.delta" in text and text.startswith("checkpoint 1 of ")
    assert "    spark_batch_id     " in text  # the stage's manifest, field by field
    assert main(["checkpoints", "list", str(spec_path)]) == 0
    text = capsys.readouterr().out
    assert "sync ms" in text and "full B" in text and "checkpoints in " in text
    assert main(["checkpoints", "show", str(spec_path), "9"]) == 2


def _corrupt(path: Path) -> None:
    path.write_text('{"checkpoint_id": ', encoding="utf-8")  # truncated mid-write


def test_list_shows_status_duration_and_verdict_and_names_what_it_skips_one_stage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Synthetic checkpoints (no Spark): 1 verified and passing, 2 with a manifest that does not
    parse, 3 verified and failing, 4 never verified."""
    from barrierflow.checkpointing.store import manifest_key

    from tests.pipeline_specs import spec_dict, write_spec
    from tests.verification.checkpoint_factory import CheckpointFactory
    from tests.verification.test_choice import _flip_state_byte

    factory = CheckpointFactory(tmp_path)
    manifests = factory.take(4)
    spec = str(write_spec(tmp_path, spec_dict(tmp_path)))
    _flip_state_byte(tmp_path / "checkpoints", manifests[2])
    assert main(["verify", spec, "--checkpoint", "1"]) == 0
    assert main(["verify", spec, "--checkpoint", "3"]) == 1
    broken = tmp_path / "checkpoints" / manifest_key(2)
    _corrupt(broken)
    capsys.readouterr()

    assert main(["checkpoints", "list", spec]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("pipeline t: checkpoints in ")
    assert lines[1].split()[:3] == ["id", "attempt", "status"] and "total ms" in lines[1] and "verified" in lines[1]
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.split()[0].isdigit()}
    assert sorted(rows) == ["1", "3", "4"]
    for cid, verdict in (("1", "passed"), ("3", "FAILED"), ("4", "-")):
        row = rows[cid]
        assert row[0] == cid and row[2] == "COMPLETED" and row[-1] == verdict, row
        assert row[4] == f"{manifests[int(cid) - 1].total_ms:.1f}"  # the duration, trigger -> completion
    assert [line.split()[:2] for line in lines if line.split()[0] == "t"] == [["t", "checkpoint"]] * 3  # its stage
    reason = next(line for line in lines if line.strip().startswith("verification:"))
    assert "sha256 mismatch" in reason
    assert f"skipped file://{broken}, which cannot be read" in err and "corrupt or truncated" in err, err

    assert main(["checkpoints", "list", spec, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [c["checkpoint_id"] for c in listing["completed"]] == [1, 3, 4]
    assert listing["verification"]["1"] == {"passed": True, "deep": False, "reason": "passed"}
    assert listing["verification"]["3"]["passed"] is False and "4" not in listing["verification"]
    assert [s["file"] for s in listing["skipped"]] == [f"file://{broken}"]


def test_list_shows_the_verdict_of_global_checkpoints_and_names_what_it_skips_several_stages(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Global checkpoints without Spark (tests/verification/test_choice.py): a cut's verdict is
    its stages' stored reports together; an unreadable stage report leaves the cut unverified."""
    from barrierflow.checkpointing.global_manifest import global_key

    from tests.verification.test_choice import _two_stage_cuts

    _two_stage_cuts(tmp_path, 3)
    spec = str(tmp_path / "flow.yaml")
    assert main(["verify", spec, "--checkpoint", "1"]) == 0
    assert main(["verify", spec, "--checkpoint", "2"]) == 0
    _corrupt(tmp_path / "chk" / "stages" / "b" / "chk-2" / "_verification.json")  # its verdict is unknown now
    broken = tmp_path / "chk" / global_key(3, "_metadata")
    _corrupt(broken)
    capsys.readouterr()

    assert main(["checkpoints", "list", spec]) == 0
    out, err = capsys.readouterr()
    cut_rows = [line.split() for line in out.splitlines()[2:] if line.split()[0].isdigit()]
    assert [row[:3] + row[-1:] for row in cut_rows] == [["1", "0", "COMPLETED", "passed"], ["2", "0", "COMPLETED", "-"]]
    assert f"skipped file://{broken}, which cannot be read" in err and "GlobalManifest" in err, err
    assert main(["checkpoints", "list", spec, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert list(listing["verification"]) == ["1"] and listing["skipped"][0]["file"] == f"file://{broken}"
