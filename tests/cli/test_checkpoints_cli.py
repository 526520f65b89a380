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
