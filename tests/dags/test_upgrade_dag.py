"""``barrierflow_upgrade__<name>`` under ``dag.test()``: the compatibility report over a
pipeline's saved state, then (not for a dry run) a person's approval before the upgrade.

A keyed-totals pipeline runs to the end of its bounded input (in this process's SparkSession),
then:

* a dry run with the shuffle partitions changed: ``report`` succeeds with "needs rewrite" naming
  the partitions, its Markdown (the approval page's body) says so; ``approve`` and ``upgrade`` are
  skipped; the checkpoint store is unchanged;
* a dry run with the grouping key changed: ``report`` fails (incompatible, naming the operator),
  nothing after it runs, nothing changed;
* a trigger without ``new_spec``, or with a negative ``canary_checkpoints``, is refused by the
  DAG's params, as the REST API refuses it.

The approval itself (Airflow's human-in-the-loop, answered through the REST API) needs a real
scheduler and API server.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.runtime.job import StreamingJob
from barrierflow.spec import load_spec

from tests.dags.conftest import run_dag
from tests.state.test_state_reader import totals_spec

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("airflow_db")]


def _files(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_upgrade_dag_reports_and_stops_for_a_dry_run_and_fails_an_incompatible_change(
        spark: Any, tmp_path: Path, pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = totals_spec(tmp_path)
    spec_path = pipelines_dir / f"{data['name']}.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path)).run(until_exhausted=True)
    before = _files(tmp_path / "checkpoints")
    dag_id = f"barrierflow_upgrade__{data['name']}"

    rescaled = tmp_path / "rescaled.yaml"  # outside the pipelines folder: not a pipeline of its own
    rescaled.write_text(yaml.safe_dump({**data, "spark": {**data["spark"], "shuffle_partitions": 8}}), encoding="utf-8")
    run = run_dag(monkeypatch, pipelines_dir, dag_id, new_spec=str(rescaled))
    assert run.task_states == {"report": "success", "needs_approval": "success", "approve": "skipped",
                          "upgrade": "skipped"}, run.log
    report = run.returned["report"]
    assert report["verdict"] == "needs rewrite" and report["new_spec"] == str(rescaled), report
    assert "**needs rewrite**" in report["markdown"] and "shuffle partitions" in report["markdown"], report["markdown"]
    assert _files(tmp_path / "checkpoints") == before

    regrouped = tmp_path / "regrouped.yaml"
    regrouped.write_text(yaml.safe_dump({**data, "transformation": {
        "function": "tests.support.state_transforms:totals_by_partition", "output_mode": "update"}}), encoding="utf-8")
    run = run_dag(monkeypatch, pipelines_dir, dag_id, new_spec=str(regrouped), dry_run=False)
    assert run.task_states["report"] == "failed" and run.task_states["approve"] != "success", run.task_states
    assert run.task_states["upgrade"] != "success" and "incompatible" in run.log, run.log[-3000:]
    assert _files(tmp_path / "checkpoints") == before

    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="new_spec"):
        run_dag(monkeypatch, pipelines_dir, dag_id)
    with pytest.raises(ParamValidationError, match="canary_checkpoints"):
        run_dag(monkeypatch, pipelines_dir, dag_id, new_spec=str(rescaled), dry_run=False, canary_checkpoints=-1)
    assert _files(tmp_path / "checkpoints") == before


def test_the_upgrade_dags_canary_default_is_the_commands() -> None:
    from barrierflow.airflow.params import UPGRADE_CANARY_CHECKPOINTS, upgrade_params
    from barrierflow.ops.upgrade import DEFAULT_CANARY_CHECKPOINTS

    assert UPGRADE_CANARY_CHECKPOINTS == DEFAULT_CANARY_CHECKPOINTS
    assert upgrade_params()["canary_checkpoints"].value == DEFAULT_CANARY_CHECKPOINTS
