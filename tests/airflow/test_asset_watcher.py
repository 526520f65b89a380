"""The asset watcher's trigger (``barrierflow.airflow.assets``) on a real checkpoint store and 2PC
ledger, built without Spark (:mod:`tests.recovery.fake_pipeline`): one event per new completed
checkpoint or committed epoch, none repeated, none for what it announced before a restart."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.airflow.assets import PipelineProgressTrigger, asset_name

from tests.recovery import fake_pipeline


class MemoryState:
    """Stands in for Airflow's asset state store (``aget``/``aset``)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def events(trigger: PipelineProgressTrigger, polls: int) -> list[dict[str, Any]]:
    """The events ``trigger.run()`` yields within ``polls`` looks at the store."""
    async def collect() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        looks = 0
        original = trigger.newest

        def counted() -> int | None:
            nonlocal looks
            looks += 1
            return original()

        trigger.newest = counted  # type: ignore[method-assign]
        stream = trigger.run()
        async def drain() -> None:
            async for event in stream:
                seen.append(event.payload)

        task = asyncio.create_task(drain())
        while looks < polls:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return seen

    return asyncio.run(collect())


def test_watcher_announces_each_new_checkpoint_and_epoch_once_across_restarts(tmp_path: Path) -> None:
    spec_path, _spec, _store = fake_pipeline.parquet_pipeline(tmp_path, 2)
    state = MemoryState()

    def watcher(watched: str) -> PipelineProgressTrigger:
        trigger = PipelineProgressTrigger(spec_path=str(spec_path), barrierflow_home=str(tmp_path), watched=watched,
                                          poll_seconds=0.01)
        trigger.asset_state_store = state  # type: ignore[assignment]
        return trigger

    first = events(watcher("checkpoints"), polls=3)
    assert [(e["id"], e["previous"]) for e in first] == [(2, None)]  # the newest, once; not per poll
    assert state.values == {"last_announced_id": 2}
    assert events(watcher("checkpoints"), polls=3) == []  # a restarted triggerer does not repeat it

    state.values.clear()
    output = events(watcher("output"), polls=2)
    assert [e["id"] for e in output] == [2] and output[0]["watched"] == "output"  # epoch 2 committed


def test_watcher_serializes_for_the_triggerer() -> None:
    trigger = PipelineProgressTrigger(spec_path="/p/demo.yaml", barrierflow_home="/p", watched="checkpoints")
    path, kwargs = trigger.serialize()
    assert path == "barrierflow.airflow.assets.PipelineProgressTrigger"
    assert PipelineProgressTrigger(**kwargs).serialize() == (path, kwargs)
    assert asset_name("demo", "checkpoints") == "barrierflow/demo/checkpoints"
    with pytest.raises(ValueError, match="watched must be one of"):
        PipelineProgressTrigger(spec_path="/p/demo.yaml", barrierflow_home="/p", watched="everything")


def test_tables_watcher_announces_every_cut_once_with_every_tables_version(tmp_path: Path) -> None:
    """Two final stages, one Iceberg table each (the real sinks, built by the factory from the
    spec): one event per cut both stages recorded, in order, carrying both tables' snapshot ids
    (checked against the tables' own histories); a cut one stage has not committed yet waits."""
    import pyarrow as pa
    import yaml
    from barrierflow.pipeline.model import open_pipeline
    from barrierflow.sinks.factory import build_sink
    from barrierflow.testing import write_ahead_batch
    from pyiceberg.catalog.sql import SqlCatalog

    project = {"function": "barrierflow.transforms.projection:project"}
    source = {"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}
    spec = {"name": "cuts", "work_dir": str(tmp_path / "work"), "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
            "channels": [{"name": "ab"}],
            "stages": [{"name": "s0", "sources": [{"name": "events", "type": "generator"}], "transformation": project,
                        "sinks": [{"type": "channel", "channel": "ab"}]},
                       *({"name": stage, "sources": [source], "transformation": project,
                          "sinks": [{"type": "iceberg", "name": name, "table": f"lake.{name}"}]}
                         for stage, name in (("s1", "a"), ("s2", "b")))]}
    spec_path = tmp_path / "cuts.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    stages = {s.name: s for s in open_pipeline(spec_path).stages}
    sinks = {stage: build_sink(stages[stage].spec, stages[stage].store, stages[stage].layout, attempt=0)
             for stage in ("s1", "s2")}

    def commit(stage: str, checkpoint: int, keys: list[int]) -> None:
        sink = sinks[stage]
        write_ahead_batch(sink.write_ahead.uri, checkpoint, pa.table({"key": pa.array(keys, pa.int64())}))
        sink.pre_commit_epoch(checkpoint, checkpoint)  # type: ignore[attr-defined]
        sink.notify_checkpoint_complete(checkpoint, checkpoint)

    def snapshot_of(name: str, checkpoint: int) -> int:
        """The snapshot of table ``name`` the table's own history says holds the output up to
        ``checkpoint`` (each stage's default catalog is a SQLite file in its work dir)."""
        stage = "s1" if name == "a" else "s2"
        folder = tmp_path / "work" / "stages" / stage / "iceberg"
        catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{folder / 'catalog.db'}")
        ours = [(int(s.summary.additional_properties["barrierflow.checkpoint-id"]), s.snapshot_id)
                for s in catalog.load_table(f"lake.{name}").snapshots()]
        return max((c, sid) for c, sid in ours if c <= checkpoint)[1]

    def cut(checkpoint: int) -> dict[str, tuple[int, int]]:
        return {"s1/a": (snapshot_of("a", checkpoint), checkpoint),
                "s2/b": (snapshot_of("b", checkpoint), 3 if checkpoint == 4 else checkpoint)}

    state = MemoryState()

    def announced() -> list[tuple[int, dict[str, tuple[int, int]]]]:
        trigger = PipelineProgressTrigger(spec_path=str(spec_path), barrierflow_home=str(tmp_path), watched="tables",
                                          poll_seconds=0.01)
        trigger.asset_state_store = state  # type: ignore[assignment]
        return [(e["id"], {k: (v["version"], v["checkpoint_id"]) for k, v in e["tables"].items()})
                for e in events(trigger, polls=2)]

    for checkpoint in (1, 2):
        commit("s1", checkpoint, [checkpoint])
        commit("s2", checkpoint, [10 + checkpoint])
    assert announced() == [(2, cut(2))]  # a first start: the newest cut only
    commit("s1", 3, [3])
    commit("s2", 3, [13])
    commit("s1", 4, [4])
    commit("s2", 4, [])  # b has no rows in epoch 4: its version as of cut 4 is the one of checkpoint 3
    commit("s1", 5, [5])  # s2 has not committed checkpoint 5 yet
    assert announced() == [(3, cut(3)), (4, cut(4))]
    commit("s2", 5, [15])
    assert announced() == [(5, cut(5))]

    # A DAG run scheduled on the asset gets the events as Airflow stores a watcher's event (extra:
    # {"from_trigger": true, "payload": ...}); the newest cut of them is the one it reads.
    from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor
    from barrierflow.airflow.assets import triggering_cut

    trigger = PipelineProgressTrigger(spec_path=str(spec_path), barrierflow_home=str(tmp_path), watched="tables",
                                      poll_seconds=0.01)
    payload = events(trigger, polls=2)[0]
    name = asset_name("cuts", "tables")
    stored = [AssetEventDagRunReferenceResult(
        asset={"name": name, "uri": f"file://{tmp_path / 'chk'}/cuts", "extra": {}},
        extra={"from_trigger": True, "payload": {**payload, "id": cid}}, source_task_id=None, source_dag_id=None,
        source_run_id=None, source_map_index=None, source_aliases=[], timestamp=datetime.now(UTC))
        for cid in (payload["id"] - 1, payload["id"])]
    run_cut = triggering_cut(TriggeringAssetEventsAccessor.build(stored), name)
    assert run_cut is not None and run_cut["checkpoint_id"] == 5
    assert {k: (v["version"], v["checkpoint_id"]) for k, v in run_cut["tables"].items()} == cut(5)
    assert triggering_cut(TriggeringAssetEventsAccessor.build([]), name) is None  # a manual run
