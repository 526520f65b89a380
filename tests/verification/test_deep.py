"""Deep verification on a real job: the checkpoint's state is read with Spark's
``statestore`` reader and a Great Expectations suite fails on a state altered on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.runtime.job import StreamingJob

from tests.pipeline_specs import make_spec

pytestmark = pytest.mark.spark


def test_deep_verification_reads_state_and_runs_the_suite(spark, tmp_path: Path) -> None:
    from barrierflow.verification.runner import verify_checkpoints

    suite = tmp_path / "state-suite.json"
    suite.write_text(json.dumps({"name": "t-state", "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_sum", "min_value": 0}},
        {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["operator_id", "key_key"]}},
    ]}))

    def spec(poison: bool):
        # Two pipelines: running the poisoned aggregation over the healthy one's state would be
        # refused (a changed stateful operator), so each keeps a store of its own.
        folder = tmp_path / ("poisoned" if poison else "healthy")
        return make_spec(folder, transformation={"function": "tests.verification.state_transforms:signed_counts",
                                                 "options": {"poison": poison}},
                         source={"keys": 20, "max_records_per_batch": 200},
                         verification={"expectations": str(suite)})

    healthy = StreamingJob(spec(False), spark=spark).run(checkpoints=1, duration=120).completed[-1]
    poisoned = StreamingJob(spec(True), spark=spark).run(checkpoints=1, duration=120).completed[-1]
    [good] = verify_checkpoints(spec(False), CheckpointStore.for_spec(spec(False)), [healthy.checkpoint_id],
                                deep=True, spark=spark)
    [bad] = verify_checkpoints(spec(True), CheckpointStore.for_spec(spec(True)), [poisoned.checkpoint_id],
                               deep=True, spark=spark)
    assert good.passed, good.reason()
    read = next(c for c in good.checks if c.name == "state-read")
    assert read.passed and "20 state rows" in read.message
    assert [c.name for c in good.checks if c.name == "expectation"] == ["expectation", "expectation"]
    assert not bad.passed and bad.deep
    failed = bad.failures
    assert [c.name for c in failed] == ["expectation"]
    assert "expect_column_values_to_be_between" in failed[0].message and failed[0].file == str(suite)


def test_deep_verification_from_the_cli_in_a_fresh_process(spark, tmp_path: Path) -> None:
    """``barrierflow verify --deep`` runs in its own process, whose SparkSession never ran a
    streaming query (the shared test session did, which hides a missing state store
    coordinator)."""
    import os
    import subprocess
    import sys

    import yaml

    from tests.drivers import short_lived_driver_env
    from tests.pipeline_specs import spec_dict

    data = spec_dict(tmp_path, source={"keys": 20, "max_records_per_batch": 200})
    data["spark"] = {"master": "local[1]", "shuffle_partitions": 2}
    spec_path = tmp_path / "pipeline.yaml"
    spec_path.write_text(yaml.safe_dump(data), encoding="utf-8")
    from barrierflow.spec import load_spec

    done = StreamingJob(load_spec(spec_path), spark=spark).run(checkpoints=1, duration=120).completed[-1]
    result = subprocess.run(
        [sys.executable, "-m", "barrierflow.cli.main", "verify", str(spec_path), "--checkpoint",
         str(done.checkpoint_id), "--deep", "--json"],
        env={**os.environ, **short_lived_driver_env()},
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    [stage] = json.loads(result.stdout)["reports"][0]["stages"].values()
    checks = stage["checks"]
    read = next(c for c in checks if c["name"] == "state-read")
    assert read["passed"] and "20 state rows" in read["message"], read


def test_verify_deep_without_a_suite_says_it_was_skipped_and_with_a_failing_suite_fails(
        spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without an expectation suite ``verify --deep`` restores and reads the state but checks
    nothing with it: its verdict says the suite was skipped and why (where it was looked for),
    never that the checkpoint passed deep verification, and the checkpoint listing does not label
    it ``(deep)``; a suite that fails on the same checkpoint fails it."""
    import yaml
    from barrierflow.cli.main import main
    from barrierflow.spec import load_spec

    from tests.pipeline_specs import spec_dict

    data = spec_dict(tmp_path, name="nosuite", source={"keys": 20, "max_records_per_batch": 200})
    data["verification"] = {"expectations": str(tmp_path / "absent-suite.json")}
    spec_path = tmp_path / "pipeline.yaml"
    spec_path.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = StreamingJob(load_spec(spec_path), spark=spark).run(checkpoints=1, duration=120).completed[-1]
    checkpoint = str(done.checkpoint_id)

    capsys.readouterr()
    assert main(["verify", str(spec_path), "--checkpoint", checkpoint, "--deep"]) == 0
    out = capsys.readouterr().out
    assert f"no expectation suite at {tmp_path / 'absent-suite.json'}: deep verification skipped" in out, out
    assert "passed deep verification" not in out and "passed (deep)" not in out, out
    assert main(["verify", str(spec_path), "--checkpoint", checkpoint, "--deep", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)["reports"]
    assert report["deep_verification"].startswith("no expectation suite at "), report
    [expectation] = [c for s in report["stages"].values() for c in s["checks"] if c["name"] == "expectation"]
    assert expectation["status"] == "skipped" and "deep verification skipped" in expectation["message"], expectation
    assert main(["checkpoints", "list", str(spec_path)]) == 0
    listing = capsys.readouterr().out
    assert "(deep)" not in listing, listing

    (tmp_path / "absent-suite.json").write_text(json.dumps({"name": "fails", "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "partition_id", "max_value": -1}}]}))
    assert main(["verify", str(spec_path), "--checkpoint", checkpoint, "--deep"]) == 1
    out = capsys.readouterr().out
    assert f"checkpoint {checkpoint}: FAILED" in out and "failed deep verification" in out, out
    assert "expect_column_values_to_be_between" in out, out
