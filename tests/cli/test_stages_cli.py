"""The CLI on multi-stage specs without Spark: bad input to ``run`` (exit 2, before any broker
or query starts) and ``checkpoints list`` over global records written here by hand.
(The full run on the embedded broker is in tests/runtime/test_staged_pipeline.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest, StageSnapshot, global_key
from barrierflow.cli.main import main


def _spec(tmp_path: Path, *, bounded: bool = True) -> Path:
    generator: dict[str, Any] = {"name": "events", "type": "generator", "partitions": 1, "rows_per_second": 0}
    if bounded:
        generator["records_per_partition"] = 10
    spec = {
        "name": "flow", "work_dir": str(tmp_path / "work"),
        "channels": [{"name": "ab", "bootstrap": "127.0.0.1:1"}],
        "stages": [
            {"name": "a", "sources": [generator],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"value": "value"}}},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": {"value": "long"}}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"value": "value"}}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
    }
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def test_run_refuses_bad_limits_and_until_exhausted_without_bounded_sources(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(_spec(tmp_path)), "--checkpoints", "0"]) == 2
    assert "--checkpoints must be a positive whole number" in capsys.readouterr().err
    assert main(["run", str(_spec(tmp_path)), "--duration", "-1"]) == 2
    assert "--duration must be a positive" in capsys.readouterr().err
    assert main(["run", str(_spec(tmp_path, bounded=False)), "--until-exhausted"]) == 2
    err = capsys.readouterr().err
    assert "stage 'a' reads an unbounded one" in err and "--checkpoints/--duration" in err
    assert main(["run", str(_spec(tmp_path)), "--stage", "nope"]) == 2
    assert "pipeline flow has no stage 'nope'; its stages: ['a', 'b']" in capsys.readouterr().err
    assert main(["run", str(_spec(tmp_path)), "--stage", "a", "--processes"]) == 2
    assert "--stage and --processes exclude each other" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


def test_processes_and_stage_are_refused_for_a_single_stage_spec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.pipeline_specs import spec_dict

    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(spec_dict(tmp_path)), encoding="utf-8")
    for flag in (["--processes"], ["--stage", "a"]):
        assert main(["run", str(path), *flag]) == 2
        assert "is for pipelines of several stages" in capsys.readouterr().err


def test_checkpoints_list_shows_global_checkpoints_per_stage(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _spec(tmp_path)
    assert main(["checkpoints", "list", str(path)]) == 0
    assert "no global checkpoints in" in capsys.readouterr().out

    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    store = tmp_path / "chk"
    manifest = GlobalManifest(pipeline="flow", checkpoint_id=1, attempt=0, trigger_time=now, completion_time=now,
                              total_ms=812.5, stages={
                                  "a": StageSnapshot(manifest="stages/a/chk-1/_metadata.json", spark_batch_id=3,
                                                     sync_ms=4.0, async_ms=30.0),
                                  "b": StageSnapshot(manifest="stages/b/chk-1/_metadata.json", spark_batch_id=5,
                                                     mode="unaligned", alignment_ms=0.0, sync_ms=6.5, async_ms=41.0,
                                                     channel_state_records=17)})
    failure = GlobalFailure(pipeline="flow", checkpoint_id=2, reason="EXPIRED", message="not completed in 60 s",
                            failure_time=now)
    for key, doc in ((global_key(1, "_metadata"), manifest), (global_key(2, "_failed"), failure)):
        (store / key).parent.mkdir(parents=True, exist_ok=True)
        (store / key).write_text(doc.model_dump_json(), encoding="utf-8")
    (store / global_key(3, "_triggered")).parent.mkdir(parents=True)
    (store / global_key(3, "_triggered")).write_text("{}", encoding="utf-8")  # pending: not listed

    assert main(["checkpoints", "list", str(path), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [m["checkpoint_id"] for m in listing["completed"]] == [1]
    assert listing["completed"][0]["stages"]["b"] == manifest.stages["b"].model_dump(mode="json")
    assert [f["checkpoint_id"] for f in listing["failed"]] == [2] and listing["attempt"] == 0
    assert listing["noun"] == "global checkpoint" and set(listing["stages"]) == {"a", "b"}

    assert main(["checkpoints", "list", str(path)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["1", "0", "COMPLETED", "2026-11-23T12:00:00+00:00", "812.5", "-"] in rows  # "-": never verified
    # no stage manifests were written here: kind and bytes unknown ("-")
    assert ["a", "-", "3", "-", "0.0", "4.0", "30.0", "0", "-", "-"] in rows
    assert ["b", "-", "5", "unaligned", "0.0", "6.5", "41.0", "17", "-", "-"] in rows
    assert ["2", "-", "FAILED", "EXPIRED:", "not", "completed", "in", "60", "s"] in rows

    # An unreadable global manifest is left out and named; the other records are still listed.
    (store / global_key(1, "_metadata")).write_text('{"pipeline": "flow"}', encoding="utf-8")
    assert main(["checkpoints", "list", str(path)]) == 0
    out, err = capsys.readouterr()
    assert f"skipped file://{store / global_key(1, '_metadata')}, which cannot be read" in err, err
    assert "is not a valid GlobalManifest" in err and "no global checkpoints" not in out
    assert [line.split()[:3] for line in out.splitlines()[2:]] == [["2", "-", "FAILED"]]


def test_restore_of_a_multi_stage_spec_refuses_what_it_cannot_restore(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing completed yet, an unknown id, --accept-duplicates: exit 2 with the reason; with
    embedded channels the restore starts the embedded broker on the pipeline's data dir and
    gives the same reason (a real global restore runs in tests/scenarios/test_staged_crashes.py)."""
    path = _spec(tmp_path)
    assert main(["restore", str(path), "--latest"]) == 2
    assert "no completed global checkpoint" in capsys.readouterr().err
    assert main(["restore", str(path), "--checkpoint", "3"]) == 2
    assert "no completed global checkpoint" in capsys.readouterr().err
    assert main(["restore", str(path), "--latest", "--accept-duplicates"]) == 2
    assert "--accept-duplicates applies to single-stage pipelines only" in capsys.readouterr().err
    data = yaml.safe_load(path.read_text())
    data["channels"][0]["bootstrap"] = "embedded"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["restore", str(path), "--latest"]) == 2
    assert "no completed global checkpoint" in capsys.readouterr().err


def test_each_command_has_one_handler_for_both_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``checkpoints show``, ``verify``, ``savepoint``, ``retain`` and ``reconcile`` on global
    checkpoints made without Spark (tests/verification/test_choice.py) and on one stage's
    checkpoints: the same handler renders either, naming global checkpoints and stages for
    several stages and keeping the single-stage wording and JSON for one."""
    from tests.pipeline_specs import spec_dict, write_spec
    from tests.verification.checkpoint_factory import CheckpointFactory
    from tests.verification.test_choice import _two_stage_cuts

    (tmp_path / "two").mkdir()
    _two_stage_cuts(tmp_path / "two", 2)
    two = str(tmp_path / "two" / "flow.yaml")
    CheckpointFactory(tmp_path / "one").take(2)
    one = str(write_spec(tmp_path / "one", spec_dict(tmp_path / "one")))
    capsys.readouterr()

    assert main(["verify", two]) == 0 and main(["verify", one]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["global checkpoint 1: passed (21/21 checks; stages: a, b)",
                       "global checkpoint 2: passed (21/21 checks; stages: a, b)"]
    assert out[2].startswith("checkpoint 1: passed (") and out[2].endswith(" checks; stages: t)")

    assert main(["checkpoints", "show", two, "2"]) == 0
    shown = capsys.readouterr().out
    assert "global checkpoint 2 of flow" in shown and "stage b: batch" in shown
    assert 'alignment aligned, 1.5 ms; barrier positions {"flow.ab:0": 20, "flow.ab:1": 20}' in shown

    assert main(["savepoint", two, "--checkpoint", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pipeline": "flow", "noun": "global checkpoint", "savepoint": 1,
                                                   "stages": {"a": 0, "b": 0}}
    assert main(["savepoint", one, "--checkpoint", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pipeline": "t", "noun": "checkpoint", "savepoint": 1,
                                                   "stages": {"t": 0}}
    assert main(["savepoint", one, "--checkpoint", "1"]) == 0
    assert capsys.readouterr().out.startswith("checkpoint 1 of t is a savepoint in every stage (stage t: batch 0)")

    assert main(["retain", two, "--dry-run", "--json"]) == 0
    retained = json.loads(capsys.readouterr().out)
    assert retained["savepoints"] == [1] and set(retained["stages"]) == {"a", "b"}
    assert main(["reconcile", two, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "pipeline flow: latest completed global checkpoint 2; pipeline not running",
        f"  nothing in doubt (transaction ledgers in file://{tmp_path / 'two' / 'chk'})"]
    assert main(["reconcile", one, "--dry-run"]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == "pipeline t: latest completed checkpoint 2; job not running"
    assert second.startswith("  nothing in doubt (transaction ledgers in file://")
    assert main(["reconcile", one, "--dry-run", "--json"]) == 0
    reconciled = json.loads(capsys.readouterr().out)
    assert reconciled["latest_completed"] == 2 and reconciled["dry_run"] is True and set(reconciled["stages"]) <= {"t"}
    assert reconciled["noun"] == "checkpoint"
