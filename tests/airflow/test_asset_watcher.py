"""The asset watcher's trigger (``barrierflow.airflow.assets``) on a real checkpoint store and 2PC
ledger, built without Spark (:mod:`tests.recovery.fake_pipeline`): one event per new completed
checkpoint or committed epoch, none repeated, none for what it announced before a restart."""

from __future__ import annotations

import asyncio
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
