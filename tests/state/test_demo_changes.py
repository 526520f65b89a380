"""The demo pipeline changed twice, the way its user would: more shuffle partitions, then a
longer window. Each change is refused at ``run`` (exit 2 naming it), reported by ``upgrade
--dry-run``, and made by ``upgrade``.

The demo spec (``include/pipelines/demo.yaml``: generator -> per-key 10 s event-time window
counts, append -> Parquet, RocksDB state), small: its stores under the test's folder, its
generator bounded and unthrottled, 10 ms of event time between a partition's records, short
checkpoint intervals, its state suite's partition bound following the shuffle partitions. It
runs to a known offset and stops with a savepoint;

1. ``spark.shuffle_partitions`` 4 -> 8: the state is rescaled (no canary);
2. the window 10 s -> 20 s over the rescaled savepoint: a first ``upgrade`` is SIGKILLed once
   the rebuilt state is stored (``upgrade_mid_rewrite``), the same command run again rebuilds
   it anew from the input (replayed to the savepoint), the canary's checkpoints (three, or fewer once its bounded input
   ended) deep-verified and its output compared with the batch recomputation; then the pipeline
   runs to the end of its input.

The output is compared with an independent recount of the generator's records (malformed ones
skipped, as the pipeline skips them): every 10 s row (the old spec's, closed by the savepoint's
watermark) and every 20 s row (the new spec's, closed after it) holds the count and value sum of
all records of its window and key, once. A 20 s window that began before the savepoint counts
the records read before it too: the rebuilt state has them.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import IncompatibleStateError
from barrierflow.ops.savepoint import savepoint
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spark import commit_log, offset_log
from barrierflow.spec import load_spec
from barrierflow.state.compatibility import REBUILD

from tests.state.test_value_columns import _killed_in_rewrite as killed_in_rewrite
from tests.support.in_session_runs import run_spec as run
from tests.support.in_session_runs import write_spec
from tests.support.window_counts import window_recount

pytestmark = pytest.mark.spark

DEMO = Path(__file__).resolve().parents[2] / "include" / "pipelines" / "demo.yaml"
FIRST, RECORDS, STEP_MS = 3000, 8000, 10


def demo(tmp: Path, file: str, *, records: int = RECORDS, shuffle: int = 4, window: str = "10 seconds") -> Path:
    """The demo spec, small (module docstring), as ``tmp/file``."""
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["work_dir"] = str(tmp / "work")
    data["sources"][0].update({"rows_per_second": 0, "records_per_partition": records, "event_time_step_ms": STEP_MS,
                               "event_time_start": "2026-01-01T00:00:00+00:00"})
    data["transformation"]["options"]["window"] = window
    data["sinks"][0]["path"] = f"file://{tmp / 'out'}"
    data["trigger"]["interval"] = "0s"
    data["checkpoint"].update({"storage": f"file://{tmp / 'checkpoints'}", "interval": "300ms"})
    data["spark"]["shuffle_partitions"] = shuffle
    # the demo's state suite bounds partition_id by the shuffle partitions: a rescaled spec has its own
    suite = json.loads((DEMO.parents[1] / "expectations" / "demo.json").read_text(encoding="utf-8"))
    for item in suite["expectations"]:
        if item["kwargs"].get("column") == "partition_id":
            item["kwargs"]["max_value"] = shuffle - 1
    (tmp / f"suite-{shuffle}.json").write_text(json.dumps(suite), encoding="utf-8")
    data["verification"] = {"expectations": str(tmp / f"suite-{shuffle}.json")}
    return write_spec(tmp / file, data)


def watermark_of(spec_path: Path, batch: int) -> datetime:
    """The watermark batch ``batch`` of the pipeline's local Spark checkpoint ran with."""
    [stage] = open_pipeline(spec_path).stages
    millis = offset_log.read_offset_metadata(stage.layout.spark_checkpoint, batch)["batchWatermarkMs"]
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def refused_at_run(spark: Any, spec_path: Path, change: str) -> None:
    with pytest.raises(IncompatibleStateError, match=change):
        run(spark, spec_path, until_exhausted=True, duration=120)


@pytest.mark.slow(70)
def test_the_demo_is_rescaled_then_given_a_longer_window_through_upgrade(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    import pyarrow.parquet as pq

    run(spark, demo(tmp_path, "first.yaml", records=FIRST), until_exhausted=True, duration=120)
    old = demo(tmp_path, "demo.yaml")
    store = CheckpointStore.for_spec(load_spec(old))
    first = savepoint(old).checkpoint_id
    watermark = watermark_of(old, store.get(first).spark_batch_id)

    wider = demo(tmp_path, "demo-8.yaml", shuffle=8)
    refused_at_run(spark, wider, r"spark.shuffle_partitions: 4 -> 8")
    code, out, err = cli("upgrade", str(old), "--to", str(wider), "--dry-run", "--json")
    assert code == 0 and json.loads(out)["verdict"] == "needs rewrite", (out, err)
    code, out, err = cli("upgrade", str(old), "--to", str(wider), "--canary-checkpoints", "0", "--json")
    assert code == 0, err
    rescaled = json.loads(out)
    assert rescaled["rescaled"] == {"demo": {"from": 4, "to": 8}} and rescaled["savepoint"] > first, rescaled

    longer = demo(tmp_path, "demo-8-20s.yaml", shuffle=8, window="20 seconds")
    refused_at_run(spark, longer, r"Aggregate window: 10 s -> 20 s")
    code, out, err = cli("upgrade", str(wider), "--to", str(longer), "--dry-run", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verdict"] == "needs rewrite" and report["checkpoint_id"] == rescaled["savepoint"], report
    reasons = [f["reason"] for s in report["stages"] for f in s["findings"]]
    assert any("window changed: 10 s -> 20 s" in r and REBUILD in r for r in reasons), reasons
    abandoned = killed_in_rewrite(wider, longer, store, 3)  # SIGKILLed once the rebuilt state is stored
    code, out, err = cli("upgrade", str(wider), "--to", str(longer), "--json")
    assert code == 0, err
    rebuilt = json.loads(out)
    assert rebuilt["rebuilt"] == ["demo"] and rebuilt["source_savepoint"] == rescaled["savepoint"], rebuilt
    assert rebuilt["savepoint"] == abandoned, rebuilt  # rebuilt anew under the id the killed run had taken
    comparison = rebuilt["canary"]["comparison"]
    assert comparison["verdict"] == "matched" and rebuilt["canary"]["verified"], comparison  # bounded: may end sooner
    run(spark, longer, until_exhausted=True, duration=120)
    last = commit_log.latest_committed(open_pipeline(longer).stages[0].layout.spark_checkpoint)
    assert last is not None
    final = watermark_of(longer, last)

    rows = [r for part in sorted((tmp_path / "out").glob("part-*.parquet")) for r in pq.read_table(part).to_pylist()]
    by_width: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_width.setdefault(int((row["window_end"] - row["window_start"]).total_seconds()), []).append(row)
    assert set(by_width) == {10, 20}, set(by_width)
    for width, closes in ((10, lambda end: end <= watermark), (20, lambda end: watermark < end <= final)):
        written = Counter((r["key"], r["window_start"]) for r in by_width[width])
        assert max(written.values()) == 1, [k for k, n in written.items() if n > 1]  # no window twice
        counted = window_recount(load_spec(old).source, RECORDS, width)  # type: ignore[arg-type]
        expected = {k: v for k, v in counted.items() if closes(k[1] + timedelta(seconds=width))}
        assert len({k[1] for k in expected}) >= 2, (width, watermark, final)  # windows of two periods at least
        got = {(r["key"], r["window_start"]): (r["count"], r["value_sum"]) for r in by_width[width]}
        assert got == expected, (width, watermark, final, sorted(set(got) ^ set(expected))[:10])
