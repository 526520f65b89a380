"""Event-time TTL on a churning key space (30 minutes of event time, keys living two minutes):
the state stays at the live keys, the output equals a plain-Python computation of the same
semantics, and a run stopped in the middle and resumed from its checkpoint writes the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.keyed_state.figures import KeyFigures
from barrierflow.ops.state import state_stats
from barrierflow.spec import load_spec

from tests.keyed_state.churn import (
    RECORDS,
    churn_spec,
    expected_lives,
    expected_watermark,
    live_keys,
    observed_lives,
    seen_keys,
    spark_batches,
)
from tests.support.in_session_runs import run_spec

#: Two pipeline runs of 20 micro-batches each, in this process on the shared SparkSession (205 s
#: measured on a saturated two-core machine), and one stopped and resumed (97 s there).
pytestmark = [pytest.mark.spark]


def _state_keys(spark: Any, checkpoint: Path, batch: int, **options: str) -> int:
    reader = spark.read.format("statestore").option("path", str(checkpoint)).option("batchId", batch)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().count()


def _output(spark: Any, folder: Path) -> list[dict[str, Any]]:
    """The committed rows, each with ``batch``: the micro-batch in its file's name (part-<batch>-...)."""
    frame = spark.read.parquet(str(folder / "out")).selectExpr(
        "*", "CAST(regexp_extract(_metadata.file_name, '^part-([0-9]+)-', 1) AS BIGINT) AS batch")
    return [r.asDict() for r in frame.collect()]


@pytest.mark.slow(60)
def test_state_stays_at_the_live_keys_and_the_output_is_the_expected(spark: Any, tmp_path: Path) -> None:
    ttl_dir, plain_dir = tmp_path / "ttl", tmp_path / "plain"
    ttl_run = run_spec(spark, churn_spec(ttl_dir, ttl=True), until_exhausted=True)
    plain_run = run_spec(spark, churn_spec(plain_dir, ttl=False), until_exhausted=True)

    # the output: every key's state lifetimes (totals, expired or not) as computed in plain Python
    lives = expected_lives()
    assert observed_lives(_output(spark, ttl_dir)) == lives
    # the run's key figures (the metrics' source): every lifetime started once, the expired ones
    # expired once; the run without ttl plans Spark's aggregation, no keyed function to count
    (ttl_stage,), (plain_stage,) = ttl_run.stages.values(), plain_run.stages.values()
    last_batch = max(spark_batches(ttl_dir / "work" / "spark-checkpoint"))
    assert ttl_stage.keys == KeyFigures(
        started=sum(len(v) for v in lives.values()), expired=sum(1 for v in lives.values() for life in v if life[2]),
        live=_state_keys(spark, ttl_dir / "work" / "spark-checkpoint", last_batch, stateVarName="bf_last_event"))
    assert plain_stage.keys is None

    # the state, read with Spark's state reader after every third batch: the keys whose newest
    # record + ttl is after the batch's watermark (Spark's offset log), never more than 1.2x
    batches = spark_batches(ttl_dir / "work" / "spark-checkpoint")
    assert {b: w for b, (w, _) in batches.items()} == {b: expected_watermark(batches, b) for b in batches}
    counts = []
    for batch in [*sorted(batches)[::3], max(batches)]:
        watermark, end = batches[batch]
        in_state = _state_keys(spark, ttl_dir / "work" / "spark-checkpoint", batch, stateVarName="bf_last_event")
        live = live_keys(watermark, end)
        counts.append((batch, in_state, live))
        assert live <= in_state <= 1.2 * live, (batch, in_state, live)
    # ... and `barrierflow state stats` of every retained checkpoint counts what Spark's reader does
    spec = ttl_dir / "spec.yaml"
    for manifest in CheckpointStore.for_spec(load_spec(spec)).completed():
        stats = state_stats(spec, checkpoint_id=manifest.checkpoint_id, spark=spark)
        batch = stats.batch_id
        in_state = _state_keys(spark, ttl_dir / "work" / "spark-checkpoint", batch, stateVarName="bf_last_event")
        live = live_keys(*batches[batch])
        assert stats.keys == in_state and live <= stats.keys <= 1.2 * live, (manifest.checkpoint_id, stats.keys,
                                                                             in_state, live)
    # ... while without ttl the state holds every key ever seen, growing with the input
    plain = spark_batches(plain_dir / "work" / "spark-checkpoint")
    grown = [(b, _state_keys(spark, plain_dir / "work" / "spark-checkpoint", b), seen_keys(plain[b][1]))
             for b in [*sorted(plain)[::6], max(plain)]]
    assert all(in_state == seen for _, in_state, seen in grown), grown
    assert [g[1] for g in grown] == sorted(g[1] for g in grown), grown
    assert grown[-1][1] == seen_keys({0: RECORDS, 1: RECORDS}) >= 3 * max(c[1] for c in counts), (grown, counts)


@pytest.fixture(scope="module")
def resumed_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The ttl'd churn pipeline stopped after 6 checkpoints (of about 19 batches; keys have
    expired before and expire after) and resumed from its checkpoint to the end of its input:
    its spec and the second run's result."""
    folder = tmp_path_factory.mktemp("resumed")
    spec = churn_spec(folder, ttl=True, name="churn-resumed")
    first = run_spec(spark, spec, checkpoints=6)
    assert len(first.completed) == 6
    return spec, run_spec(spark, spec, until_exhausted=True)


@pytest.fixture(scope="module")
def resumed(resumed_run: tuple[Path, Any]) -> Path:
    return resumed_run[0]


@pytest.mark.slow(30)
def test_a_run_stopped_in_the_middle_and_resumed_writes_the_same(spark: Any, resumed: Path) -> None:
    """The committed output across both runs is the failure-free output (each lifetime's
    totals, expired or not, no update twice)."""
    folder = resumed.parent
    assert observed_lives(_output(spark, folder)) == expected_lives()
    # every batch, the ones after the restore too, ran with the failure-free run's watermark
    batches = spark_batches(folder / "work" / "spark-checkpoint")
    assert {b: w for b, (w, _) in batches.items()} == {b: expected_watermark(batches, b) for b in batches}


def test_the_resumed_runs_live_keys_start_from_the_restored_state(spark: Any, resumed_run: tuple[Path, Any]) -> None:
    """The second run counted the keys of the state it resumed (Spark's state reader) and its
    own starts and expiries from there: its live keys at the end are what the state holds."""
    spec, result = resumed_run
    (stage,) = result.stages.values()
    checkpoint = spec.parent / "work" / "spark-checkpoint"
    assert stage.keys is not None and stage.keys.started > 0 and stage.keys.expired > 0, stage.keys
    assert stage.keys.live == _state_keys(spark, checkpoint, max(spark_batches(checkpoint)),
                                          stateVarName="bf_last_event"), stage.keys


def test_a_ttl_change_through_upgrade_dry_run_says_its_verdict(spark: Any, resumed: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`barrierflow upgrade --dry-run` from the ttl'd pipeline's newest checkpoint to the same spec
    with ttl 60 s -> 120 s: compatible without a rewrite, saying what happens to the keys in the
    state; with no ttl (the function then plans another operator): refused (exit 2), with no ttl
    finding. Nothing is rewritten (the checkpoint list is unchanged)."""
    import yaml
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.cli.main import main
    from barrierflow.spec import load_spec

    store = CheckpointStore.for_spec(load_spec(resumed))
    before = store.checkpoint_ids()
    data = yaml.safe_load(resumed.read_text(encoding="utf-8"))

    def dry_run(ttl: str | None, exit_code: int) -> dict[str, Any]:
        changed = dict(data, transformation={k: v for k, v in data["transformation"].items()
                                             if k != "ttl" and (ttl is not None or k != "emit_on_expiry")})
        if ttl is not None:
            changed["transformation"]["ttl"] = ttl
        new = tmp_path / f"ttl-{ttl}.yaml"
        new.write_text(yaml.safe_dump(changed), encoding="utf-8")
        shuffle = spark.conf.get("spark.sql.shuffle.partitions")
        try:
            code = main(["upgrade", str(resumed), "--to", str(new), "--dry-run", "--json"])
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", shuffle)
        out = capsys.readouterr().out
        assert code == exit_code, out
        return json.loads(out)

    longer = dry_run("120s", 0)
    assert longer["verdict"] == "compatible", longer
    (finding,) = [f for f in longer["stages"][0]["findings"] if f["subject"].endswith(" ttl")]
    assert finding["verdict"] == "compatible", finding
    assert finding["reason"].startswith("ttl 60 s -> 120 s: compatible: existing keys keep their registered expiry "
                                        "(their last update + 60 s)"), finding
    # without a ttl the churn function plans Spark's aggregation instead of a keyed function: the
    # state cannot be kept, and no finding calls the ttl change compatible
    plain = dry_run(None, 2)
    assert plain["verdict"] != "compatible", plain
    subjects = [f["subject"] for f in plain["stages"][0]["findings"]]
    assert not [s for s in subjects if s.endswith(" ttl")], plain
    assert any("keyed state" in s for s in subjects), plain
    assert store.checkpoint_ids() == before
