"""The state tools over a keyed function's state (Spark's ``transformWithState``): ``state schema``,
``state query`` and ``state stats`` read every state variable and the timers, and what they
count equals what Spark's own ``statestore`` reader gives for the same checkpoint, read here
directly; the keyed function is :mod:`tests.support.keyed_sessions` (plain PySpark).

One pipeline run (generator -> keyed function -> Parquet, RocksDB, 4 shuffle partitions) is
shared by the module's tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.ops.state import state_query, state_schema, state_stats
from barrierflow.spec import load_spec

from tests.support.in_session_runs import run_spec, write_spec

pytestmark = pytest.mark.spark

PARTITIONS, RECORDS = 2, 240
VARIABLES = {"count": "ValueState", "recent": "ListState", "parity": "MapState", "bf_last_event": "ValueState",
             "timers": "TimerState"}


def sessions_spec(tmp: Path, shuffle: int = 4, function: str = "sessions") -> dict[str, Any]:
    return {
        "version": 1,
        "name": "sessions",
        "work_dir": str(tmp / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                     "max_records_per_batch": 40, "records_per_partition": RECORDS, "keys": 50,
                     "event_time_step_ms": 100}],
        "event_time": {"column": "event_time", "watermark_delay": "500ms"},
        "transformation": {"function": f"tests.support.keyed_sessions:{function}", "output_mode": "append"},
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{tmp / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp / 'checkpoints'}", "interval": "200ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": shuffle, "state_store": "rocksdb"},
    }


@pytest.fixture(scope="module")
def sessions_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, CheckpointStore]]:
    tmp = tmp_path_factory.mktemp("keyed")
    spec = write_spec(tmp / "sessions.yaml", sessions_spec(tmp))
    run_spec(spark, spec, checkpoints=3)
    yield spec, CheckpointStore.for_spec(load_spec(spec))


def _direct(spark: Any, store: CheckpointStore, tmp: Path) -> tuple[Path, int, dict[str, Any]]:
    """The newest checkpoint materialized by hand, its barrier batch and Spark's operator properties."""
    manifest = store.latest()
    assert manifest is not None
    target = tmp / "direct"
    materialize_checkpoint(store, manifest, target)
    _ = spark.streams
    rows = spark.read.format("state-metadata").load(str(target)).collect()
    assert len(rows) == 1, rows
    return target, manifest.spark_batch_id, json.loads(rows[0]["operatorProperties"])


def _read(spark: Any, target: Path, batch: int, **options: str) -> Any:
    reader = spark.read.format("statestore").option("batchId", batch)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(target))


def test_schema_query_and_stats_read_every_variable_as_spark_does(
        spark: Any, sessions_run: tuple[Path, CheckpointStore], tmp_path: Path, capsys: Any) -> None:
    spec, store = sessions_run
    target, batch, properties = _direct(spark, store, tmp_path)
    listed = {v["stateName"]: v["stateVariableType"] for v in properties["stateVariables"]}

    schema = state_schema(spec, spark=spark)
    (op,) = schema.stages[0].operators
    assert {v.name: v.kind for v in op.variables} == VARIABLES
    assert {n: k for n, k in listed.items() if not n.startswith("$")} == {
        n: k for n, k in VARIABLES.items() if n != "timers"}
    assert op.key_schema == "struct<partition:int,session:bigint>" and op.partitions == 4
    by_name = {v.name: v for v in op.variables}
    assert by_name["parity"].stored == "map<struct<parity:string>,struct<records:bigint>>"
    assert by_name["recent"].stored == "struct<value:bigint>" and by_name["timers"].stored == "bigint"

    # every variable's rows, and the timers, as Spark's reader gives them
    frames = {name: _read(spark, target, batch, stateVarName=name) for name in VARIABLES if name != "timers"}
    frames["timers"] = _read(spark, target, batch, readRegisteredTimers="true")
    for name, frame in frames.items():
        result = state_query(spec, variable=name, limit=1000, spark=spark)
        assert result.variable == name and result.rows == frame.count(), name
    counts = {json.dumps(r.asDict(recursive=True), sort_keys=True) for r in frames["count"].collect()}
    shown = {json.dumps({"key": {"partition": r["key_partition"], "session": r["key_session"]},
                         "partition_id": r["partition_id"], "value": {"n": r["value_n"]}}, sort_keys=True)
             for r in state_query(spec, variable="count", limit=1000, spark=spark).preview}
    assert shown == counts
    with pytest.raises(Exception, match="choose one with --variable NAME"):
        state_query(spec, spark=spark)
    with pytest.raises(Exception, match="no state variable 'nope'"):
        state_query(spec, variable="nope", spark=spark)

    # stats: keys over every variable, timers, and the keys due at the state's watermark
    keys = set()
    for frame in frames.values():
        keys |= {(r["key"]["partition"], r["key"]["session"]) for r in frame.select("key").collect()}
    committed = json.loads((target / "commits" / str(batch)).read_text().splitlines()[1])
    watermark = int(committed["nextBatchWatermarkMs"])
    due = {(r["key"]["partition"], r["key"]["session"]) for r in frames["timers"].collect()
           if r["expiration_timestamp_ms"] <= watermark}
    stats = state_stats(spec, spark=spark)
    assert stats.keys == len(keys) > 0
    assert stats.timers == frames["timers"].count() and stats.watermark_ms == watermark
    assert stats.expired == len(due) and stats.live == len(keys) - len(due)
    assert {v["name"]: v["rows"] for v in stats.variables or []} == {n: f.count() for n, f in frames.items()}
    assert sum(p["keys"] for p in stats.partitions) == len(keys)
    capsys.readouterr()
    assert main(["state", "stats", str(spec)]) == 0
    out = capsys.readouterr().out
    assert f"{len(keys) - len(due)} live keys, {len(due)} expired" in out, out


def test_ttl_and_variable_findings_say_their_verdict() -> None:
    """The verdicts of a ttl change and of state variables, decided without Spark."""
    from barrierflow.state.compatibility import Verdict, keyed_findings, ttl_finding
    from barrierflow.state.reader import OperatorSchema, StateVariable

    changed = ttl_finding("b", 300.0, 600.0)
    assert changed is not None and changed.verdict is Verdict.COMPATIBLE
    assert changed.reason.startswith("ttl 300 s -> 600 s: compatible: existing keys keep their registered expiry "
                                     "(their last update + 300 s) until it fires or their next record arrives")
    assert ttl_finding("b", 300.0, 300.0) is None
    added = ttl_finding("b", None, 60.0)
    assert added is not None and added.verdict is Verdict.COMPATIBLE and "registered no expiry" in added.reason

    count = StateVariable("count", "ValueState", "struct<key:struct<k:bigint>,value:struct<n:bigint>>")
    timers = StateVariable("timers", "TimerState", "struct<key:struct<k:bigint>,expiration_timestamp_ms:bigint>")
    op = OperatorSchema(0, "transformWithStateInPySparkExec", ("default",), 4, "struct<k:bigint>", "",
                        variables=(count, timers))
    same = keyed_findings("b", [op], [[("count", "ValueState", "struct<n:bigint>")]])
    assert [f.verdict for f in same] == [Verdict.COMPATIBLE] and "unchanged: count" in same[0].reason
    unknown = keyed_findings("b", [op], [None])
    assert [f.verdict for f in unknown] == [Verdict.UNKNOWN]
    dropped = keyed_findings("b", [op], [[]])
    assert [f.verdict for f in dropped] == [Verdict.UNKNOWN] and "no longer declared" in dropped[0].reason
    assert keyed_findings("b", [op], []) [0].verdict is Verdict.UNKNOWN


def test_upgrade_dry_run_reports_each_state_variable(spark: Any, sessions_run: tuple[Path, CheckpointStore],
                                                     tmp_path: Path) -> None:
    from barrierflow.ops.upgrade import upgrade

    spec, _ = sessions_run
    base = sessions_spec(spec.parent)

    def report(function: str) -> dict[str, Any]:
        data = dict(base, transformation={"function": f"tests.support.keyed_sessions:{function}",
                                          "output_mode": "append"})
        new = write_spec(tmp_path / f"{function}.yaml", data)
        before = spark.conf.get("spark.sql.shuffle.partitions")
        try:
            return upgrade(spec, new, dry_run=True, spark=spark).as_dict()
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", before)

    same = report("sessions")
    assert same["verdict"] == "compatible", same
    reasons = [f["reason"] for f in same["stages"][0]["findings"]]
    assert any(r.startswith("state variables unchanged: count (ValueState struct<n:bigint>)") for r in reasons)

    wider = report("sessions_with_largest")
    assert wider["verdict"] == "compatible", wider
    assert any(f["reason"].startswith("new state variable largest (ValueState struct<value:bigint>): compatible")
               for f in wider["stages"][0]["findings"]), wider

    other = report("sessions_count_as_string")
    assert other["verdict"] == "incompatible", other
    (refused,) = [f for f in other["stages"][0]["findings"] if f["verdict"] == "incompatible"]
    assert refused["reason"].startswith(
        "state variable count changed type: ValueState struct<n:bigint> -> ValueState struct<n:string>"), refused
    assert "Keep count as ValueState struct<n:bigint>" in refused["reason"]


def test_rescale_4_to_8_through_upgrade_gives_the_same_output(
        spark: Any, sessions_run: tuple[Path, CheckpointStore], tmp_path: Path) -> None:
    """The last test of the module: it upgrades the shared run to 8 partitions and runs it to
    the end of its input. Every record's row and every closing row equal the independent
    expectation: the rescaled state carried every key's variables and timer."""
    from barrierflow.ops.savepoint import savepoint
    from barrierflow.ops.upgrade import UpgradeResult, upgrade

    from tests.support.keyed_sessions import expected_rows

    spec, store = sessions_run
    source = savepoint(spec).checkpoint_id
    offsets = store.get(source).barrier_offsets["events"]
    assert all(o < RECORDS for o in offsets.values()), f"no input left for the upgraded run: {offsets}"
    before_stats = state_stats(spec, checkpoint_id=source, spark=spark)
    eight = write_spec(spec.parent / "eight.yaml", sessions_spec(spec.parent, shuffle=8))
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        result = upgrade(spec, eight, dry_run=False, spark=spark, canary_checkpoints=0)
        assert isinstance(result, UpgradeResult) and result.rescaled == {"sessions": (4, 8)}
        after_stats = state_stats(eight, checkpoint_id=result.savepoint, spark=spark)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert after_stats.operator.partitions == 8 and len(after_stats.partitions) == 8
    assert (after_stats.keys, after_stats.timers) == (before_stats.keys, before_stats.timers)
    assert after_stats.variables == before_stats.variables
    run_spec(spark, eight, until_exhausted=True, duration=240)

    rows = [r.asDict() for r in spark.read.parquet(str(spec.parent / "out")).collect()]
    records = [(r["partition"], r["session"], r["offset"], r["n"]) for r in rows if r["offset"] >= 0]
    closing = [((r["partition"], r["session"]), r["n"]) for r in rows if r["offset"] < 0]
    expected, counts = expected_rows(PARTITIONS, RECORDS)
    assert len(records) == len(set(records)) and set(records) == expected
    assert len(closing) == len(dict(closing)) and all(counts[key] == n for key, n in closing)
    assert closing, "no key's timer fired"


def test_deep_expiry_check_compares_every_key_with_the_watermark(
        spark: Any, sessions_run: tuple[Path, CheckpointStore], tmp_path: Path) -> None:
    """The ttl check on the keyed function's checkpoint: passes at the watermark its barrier
    batch ran with, fails (naming the keys) at a watermark past some key's expiry."""
    from barrierflow.verification.keyed_expiry import expiry_checks

    from tests.support.keyed_sessions import GAP_MS

    _, store = sessions_run
    target, batch, _ = _direct(spark, store, tmp_path)
    (passed,) = expiry_checks(spark, target, batch, ttl_seconds=GAP_MS / 1000, watermark_delay_seconds=0.5)
    assert passed.passed and "every key has one after it" in passed.message, passed
    timers = [int(r["expiration_timestamp_ms"]) for r in
              _read(spark, target, batch, readRegisteredTimers="true").collect()]
    (failed,) = expiry_checks(spark, target, batch, ttl_seconds=GAP_MS / 1000, watermark_delay_seconds=0.5,
                              watermark_ms=min(timers))
    assert not failed.passed, failed
    assert failed.message.startswith(f"operator 0: {timers.count(min(timers))} keys hold an expiry timer at or below")
    assert expiry_checks(spark, target, batch, ttl_seconds=None, watermark_delay_seconds=0.5) == []
