"""SIGKILLed drivers of a two-stage pipeline (generator -> stage a -> channel ab on the Kafka
-protocol broker -> stage b -> Parquet through 2PC): nothing lost, nothing twice.

Every crashed run is a separate driver process (``barrierflow run``) that SIGKILLs itself at
a protocol point; the next ``barrierflow run`` restores the latest global checkpoint (a new
attempt; stage b skips what the dead attempt wrote to the channel after the restored
barriers). In this shape every stage and the pipeline coordinator share one driver process
(a deployment runs one application per stage, and any stage's failure restores every stage
from the same global checkpoint, so killing one stage leads to the same recovery); which
component's protocol point the kill hit is printed with each crash.

1. The kill between a stage's snapshot and its acknowledgement: at ``after_precommit`` (the
   stage's snapshot taken and its sink pre-committed, its manifest not yet stored) in the
   first run, before any global checkpoint completed (the next run restores the initial cut:
   every stage from the beginning as a new attempt), and at ``after_manifest`` (its manifest
   stored, the pipeline coordinator not yet told). The global checkpoint must not be complete
   in the first case, and in both every complete global checkpoint names stage manifests
   that exist.
   Then the pipeline coordinator, right after a global checkpoint completed and before the
   final stage's sink was told (``after_global_manifest``): ``barrierflow reconcile`` (dry
   run first) commits that epoch against the latest global checkpoint.
2. ``barrierflow restore --latest-valid`` on the multi-stage spec (every stage to one global
   checkpoint, a new attempt), then the final run to the end of the bounded source: the
   output equals the failure-free output.

Kills at random moments, of every kind, on a two-stage pipeline are ``barrierflow chaos``'s
(tests/scenarios/test_chaos.py; the recorded 100-kill runs are in bench/results/chaos-runs.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.global_manifest import global_key
from barrierflow.cli.main import main
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import parse_staged_spec

from tests.scenarios.harness import FAST_JVM, assert_sub_multiset, crashed_run
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(1500), pytest.mark.slow(300)]
RECORDS = 1500
CRASH = re.compile(r"injected crash at (\w+) \(hit (\d+)\) (\{.*\})")


def _output(tmp_path: Path) -> list[tuple[int, int]]:
    table = read_committed(f"file://{tmp_path / 'out'}")
    if table is None:
        return []
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(), strict=True))


def _completed_globals(chk: Path) -> list[int]:
    return sorted(int(p.parent.name[4:]) for p in chk.glob("global/chk-*/_metadata.json"))


def _check_globals_name_existing_stage_manifests(chk: Path) -> None:
    """A global checkpoint is complete only with every stage's manifest in the store."""
    for cid in _completed_globals(chk):
        manifest = yaml.safe_load((chk / global_key(cid, "_metadata")).read_text())
        assert set(manifest["stages"]) == {"a", "b"}, manifest
        for name, part in manifest["stages"].items():
            assert (chk / part["manifest"]).is_file(), f"global {cid} names a missing manifest of stage {name}"


def _crash(spec_path: Path, crash_at: str) -> tuple[str, dict[str, Any]]:
    run = crashed_run(spec_path, crash_at, timeout=400)
    assert run.returncode in (0, -9), f"{crash_at}: exit {run.returncode}\n{run.stderr[-3000:]}"
    if run.returncode == 0:
        return "", {}
    found = CRASH.search(run.stderr)
    assert found, run.stderr[-3000:]
    context = yaml.safe_load(found.group(3).replace("'", '"'))
    return found.group(1), context


def test_sigkilled_drivers_of_a_two_stage_pipeline_stay_exactly_once(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, figures: dict[str, object],
        capsys: pytest.CaptureFixture[str]) -> None:
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["stages"][0]["sources"][0]["records_per_partition"] = RECORDS
    data["spark"] = {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM}
    spec_path = tmp_path / "two.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    chk = tmp_path / "chk"
    expected = [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]
    kills: list[str] = []

    # 1. Between a stage's snapshot and its acknowledgement, in the first run: no global
    # checkpoint is complete, so the next run restores the initial cut (every stage from the
    # beginning, a new attempt; b skips everything the dead attempt wrote to the channel).
    point, context = _crash(spec_path, "after_precommit@1")
    assert point == "after_precommit", "the run ended before its first pre-commit"
    assert _completed_globals(chk) == [], "a global checkpoint is complete although a stage's snapshot was never stored"
    kills.append(f"{point}[{context['pipeline']} chk {context['checkpoint_id']}, before the first global checkpoint]")
    assert _output(tmp_path) == []
    point, context = _crash(spec_path, "after_manifest@2")
    assert point == "after_manifest", "the run ended before its second stage manifest"
    kills.append(f"{point}[{context['pipeline']} chk {context['checkpoint_id']}]")
    _check_globals_name_existing_stage_manifests(chk)
    assert_sub_multiset(_output(tmp_path), expected, kills[-1])
    # The coordinator dies right after a global checkpoint completed, before the final stage's
    # sink was told: the next run restores that checkpoint and its restore commits the epoch.
    point, context = _crash(spec_path, "after_global_manifest@2")
    assert point == "after_global_manifest", "the run ended before its second global checkpoint"
    assert context["checkpoint_id"] == _completed_globals(chk)[-1]
    kills.append(f"{point}[pipeline coordinator chk {context['checkpoint_id']}]")
    assert_sub_multiset(_output(tmp_path), expected, kills[-1])
    # `reconcile` finishes that epoch against the latest global checkpoint (dry run first).
    before = _output(tmp_path)
    capsys.readouterr()
    assert main(["reconcile", str(spec_path), "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["latest_completed"] == context["checkpoint_id"] and not planned["job_running"]
    commits = [d for d in planned["stages"].get("b", []) if d["action"] == "COMMIT"]
    assert [d["checkpoint_id"] for d in commits] == [context["checkpoint_id"]], planned
    assert _output(tmp_path) == before, "a dry run committed something"
    assert main(["reconcile", str(spec_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decisions"] == planned["decisions"]
    after = _output(tmp_path)
    assert len(after) > len(before), "the reconciled epoch's output is not committed"
    assert_sub_multiset(after, expected, f"{kills[-1]} and reconcile")

    # 2. `barrierflow restore` on the multi-stage spec: every stage to the newest global
    # checkpoint whose stage manifests all pass verification; an unknown id is refused.
    assert main(["restore", str(spec_path), "--checkpoint", "9999"]) == 2
    attempt = json.loads((chk / "_pipeline.json").read_text())["attempt"]
    capsys.readouterr()
    assert main(["restore", str(spec_path), "--latest-valid", "--json"]) == 0
    restored = json.loads(capsys.readouterr().out)
    assert restored["checkpoint_id"] == _completed_globals(chk)[-1] and restored["attempt"] == attempt + 1
    assert [name for name, stage in restored["stages"].items() if stage["cutoff"]] == ["b"]

    # 3. To the end (the run restores the latest global checkpoint once more).
    final = StagedPipelineJob(parse_staged_spec(data), spark=spark, spec_path=str(spec_path)).run(
        until_exhausted=True, duration=300)
    assert final.completed
    rows = _output(tmp_path)
    figures.update({"kills": len(kills), "where": ", ".join(kills), "global checkpoints": len(_completed_globals(chk)),
                    "rows": len(rows), "rows lost": len(set(expected) - set(rows)),
                    "rows duplicated": len(rows) - len(set(rows))})
    assert rows == expected
