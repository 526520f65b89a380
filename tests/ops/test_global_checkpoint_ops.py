"""The checkpoint operations on a multi-stage pipeline's global checkpoints, through the CLI:
``checkpoints show``, ``verify``, ``skew``, ``reconcile``, ``savepoint`` and ``retain`` on a
two-stage pipeline run on the test broker and the shared SparkSession (generator -> a ->
channel ab -> b -> Parquet 2PC). Reconciliation of an epoch in doubt is in
tests/scenarios/test_staged_crashes.py.

What could go wrong and is checked: a global checkpoint that passes although one stage's
checkpoint lost a file or its manifest; retention deleting a stage checkpoint that a kept
global checkpoint or a savepoint needs, or leaving a global manifest that names a deleted
stage checkpoint; a savepoint that does not survive retention or does not restore.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.global_manifest import global_key
from barrierflow.cli.main import main
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import parse_staged_spec

from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, RECORDS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(600)]


def _json(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> Any:
    capsys.readouterr()
    assert main([*argv, "--json"]) == code
    return json.loads(capsys.readouterr().out)


def _globals(chk: Path) -> list[int]:
    return sorted(int(p.parent.name[4:]) for p in chk.glob("global/chk-*/_metadata.json"))


def test_show_verify_savepoint_and_retain_work_on_whole_global_checkpoints(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["checkpoint"]["retained"] = 2
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    chk = tmp_path / "chk"
    first = StagedPipelineJob(parse_staged_spec(data), spark=spark, spec_path=str(path)).run(checkpoints=5,
                                                                                               duration=200)
    ids = _globals(chk)
    assert len(ids) >= 5, ids
    topic = data["channels"][0]["topic"]

    # show: the global manifest with each stage's manifest; b's barrier positions cover the channel.
    shown = _json(capsys, "checkpoints", "show", str(path), str(ids[0]))
    assert shown["checkpoint_id"] == ids[0] and set(shown["stages"]) == {"a", "b"}
    assert shown["noun"] == "global checkpoint" and shown["stages"]["a"]["part"]["spark_batch_id"] >= 0
    b = shown["stages"]["b"]["manifest"]
    assert set(b["alignment"]["barrier_offsets"]) == {f"{topic}:0", f"{topic}:1"}
    capsys.readouterr()
    assert main(["checkpoints", "show", str(path), str(ids[0])]) == 0
    text = capsys.readouterr().out
    assert f"global checkpoint {ids[0]} of two" in text and "stage a:" in text and "alignment aligned" in text
    assert main(["checkpoints", "show", str(path), "999"]) == 2
    assert "global checkpoint 999 of pipeline two is not complete (unknown)" in capsys.readouterr().err

    # verify: every global checkpoint passes, b's cut crosses both channel partitions.
    verified = _json(capsys, "verify", str(path))
    assert verified["verified"] == len(ids) and verified["failed"] == []
    cut = [c for c in verified["reports"][0]["checks"] if c["name"] == "b: channel-cut"]
    assert cut and cut[0]["status"] == "passed" and "all 2 input partitions" in cut[0]["message"]
    assert set(verified["reports"][0]["stages"]) == {"a", "b"}

    # skew: one report per stage over its part of the global checkpoints (stored in the stage's
    # store); reconcile: nothing in doubt after a clean stop, against the latest global checkpoint.
    skew = _json(capsys, "skew", str(path))
    assert skew["passed"] and set(skew["stages"]) == {"a", "b"}
    for stage in ("a", "b"):
        assert [c["checkpoint_id"] for c in skew["stages"][stage]["checkpoints"]] == ids
        assert (chk / "stages" / stage / "reports" / "skew-latest.json").is_file()
    assert [c["checkpoint_id"] for c in _json(capsys, "skew", str(path), "--last", "2")["stages"]["b"]
            ["checkpoints"]] == ids[-2:]
    reconciled = _json(capsys, "reconcile", str(path), "--dry-run")
    assert reconciled["latest_completed"] == ids[-1] and reconciled["decisions"] == [], reconciled

    # A stage checkpoint that lost a file, and one that lost its manifest: their global
    # checkpoints fail, naming the stage; the others still pass.
    a_files = {cid: {f["sha256"] for f in _json(capsys, "checkpoints", "show", str(path), str(cid))
                     ["stages"]["a"]["manifest"]["files"]} for cid in ids}
    new_in_1 = {f["sha256"] for f in _json(capsys, "checkpoints", "show", str(path), str(ids[1]))
                ["stages"]["a"]["manifest"]["files"] if f["uploaded"]}
    digest = min(new_in_1, key=lambda d: sum(d in files for files in a_files.values()))
    lost = chk / "stages" / "a" / "shared" / digest[:2] / digest
    moved = lost.with_suffix(".moved")
    lost.rename(moved)
    (chk / "stages" / "b" / f"chk-{ids[2]}" / "_metadata.json").unlink()
    report = _json(capsys, "verify", str(path), code=1)
    expected_failed = sorted({cid for cid, files in a_files.items() if digest in files} | {ids[2]})
    assert report["failed"] == expected_failed and ids[0] not in expected_failed, report["failed"]
    by_id = {r["checkpoint_id"]: r for r in report["reports"]}
    assert not by_id[ids[1]]["stages"]["a"]["passed"]
    assert any(c["name"] == "b: manifest" and "missing" in c["message"] for c in by_id[ids[2]]["checks"])
    capsys.readouterr()
    assert main(["verify", str(path), "--checkpoint", str(ids[2])]) == 1
    assert f"global checkpoint {ids[2]}: FAILED" in capsys.readouterr().out
    # A savepoint of a damaged global checkpoint is refused; of an intact one, every stage's
    # checkpoint becomes a savepoint.
    assert main(["savepoint", str(path), "--checkpoint", str(ids[2])]) == 2
    assert "cannot become a savepoint" in capsys.readouterr().err
    moved.rename(lost)
    assert _json(capsys, "verify", str(path), code=1)["failed"] == [ids[2]]
    savepoint = ids[1]
    assert _json(capsys, "savepoint", str(path), "--checkpoint", str(savepoint))["savepoint"] == savepoint
    for stage in ("a", "b"):
        manifest = json.loads((chk / "stages" / stage / f"chk-{savepoint}" / "_metadata.json").read_text())
        assert manifest["kind"] == "savepoint"

    # retain (checkpoint.retained 2): the savepoint and the newest two verified global
    # checkpoints stay, whole; the others go in every stage, global records first.
    dry = _json(capsys, "retain", str(path), "--dry-run")
    assert dry["savepoints"] == [savepoint] and len(dry["kept"]) == 2 and ids[2] not in dry["kept"]
    assert _globals(chk) == ids, "a dry run deleted something"
    done = _json(capsys, "retain", str(path))
    kept = sorted(done["kept"] + done["savepoints"])
    assert done["kept"] == dry["kept"] and kept == _globals(chk)
    assert set(done["deleted"]["checkpoints"]) == set(ids) - set(kept) and done["deleted"]["global_records"] > 0
    for stage in ("a", "b"):
        left = sorted(int(p.name[4:]) for p in (chk / "stages" / stage).glob("chk-*")
                      if (p / "_metadata.json").exists())
        assert set(kept) <= set(left) and not set(left) & set(done["deleted"]["checkpoints"]), (stage, left)
    after = _json(capsys, "verify", str(path))
    assert after["failed"] == [] and sorted(r["checkpoint_id"] for r in after["reports"]) == kept

    # The savepoint is older than output already committed: restoring it would write that
    # output twice, so it is refused with nothing changed. The newest kept global checkpoint
    # still restores, and the run ends exactly-once.
    capsys.readouterr()
    assert main(["restore", str(path), "--checkpoint", str(savepoint)]) == 2
    assert "older than output already committed" in capsys.readouterr().err
    assert main(["restore", str(path), "--latest"]) == 0
    final = StagedPipelineJob(parse_staged_spec(data), spark=spark, spec_path=str(path)).run(
        until_exhausted=True, duration=200)
    assert final.completed
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None
    rows = sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(), strict=True))
    assert rows == [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]
    assert (chk / global_key(savepoint, "_metadata")).is_file()
    print(f"\nglobal ops: {len(ids)} global checkpoints in {first.elapsed_seconds:.1f} s; kept {kept}, deleted "
          f"{done['deleted']['checkpoints']}, {done['bytes_freed']} bytes freed")
