"""Scheduling that follows the data: the Airflow Assets of a pipeline and the watcher that
updates them.

A pipeline has two assets:

* ``barrierflow/<name>/checkpoints`` (URI: the checkpoint store): updated once per newly
  completed checkpoint; for a multi-stage pipeline, per newly completed *global* checkpoint
  (its global manifest is stored, every stage's snapshot is in, no restore abandoned it). The
  verification DAG runs on it (and on its schedule).
* ``barrierflow/<name>/output`` (URI: the Parquet sink's folder): updated when an epoch's
  output was COMMITTED by the sink (2PC ledger), at most every ``batch.output_event_interval``.
  The rollup and data-quality DAGs run on it (and daily). A multi-stage pipeline has one per
  final stage with a Parquet sink, ``barrierflow/<name>/<stage>/output`` (URI: that stage's sink
  folder), on the COMMITTED epochs of the stage's own 2PC ledger; that stage's batch DAGs run on it.
* ``barrierflow/<name>/tables`` (URI: the checkpoint store; pipelines writing Iceberg or Delta
  tables): one event per cut whose tables every table-writing stage committed (its cut record
  is stored), in checkpoint order, carrying every table's version as of that cut in the event's
  payload (``extra["payload"]["tables"]``: ``<stage>/<sink>`` -> format, table, Iceberg
  snapshot id or Delta version, and the checkpoint that wrote it). A DAG scheduled on it reads
  each table at the version its triggering event names, so it never combines table A at cut n
  with table B at n - 1. A watcher that starts announces the newest cut only.

Who emits the events. The streaming job is one long-running spark-submit, not an Airflow task,
so it has no ``outlets``; making the job call Airflow's REST API (``POST /api/v2/assets/events``)
would put Airflow credentials and availability into the data path, and a periodic task with
``outlets`` could emit one event per run at most and only as often as it is scheduled.
Instead each asset has an :class:`~airflow.sdk.AssetWatcher` whose trigger,
:class:`PipelineProgressTrigger`, runs in Airflow's triggerer: it polls the checkpoint store
(a key listing, no manifest read; :mod:`barrierflow.ops.progress` decides what a completed
checkpoint is for single- and multi-stage specs) every ``BARRIERFLOW_ASSET_POLL_SECONDS`` (default 10 s) and
yields one event per new checkpoint id (payload: pipeline, id, previous id), which Airflow
turns into an asset event and the asset-scheduled DAG runs. The last announced id is kept in
Airflow's asset state store, so a triggerer restart neither repeats nor loses an
announcement; at the first start the newest existing checkpoint is announced once.
The job stays unaware of Airflow, and the store it already writes is the single source.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

#: What a watcher follows: completed checkpoints, committed output epochs, or cuts of tables.
WATCHED = ("checkpoints", "output", "tables")
_STATE_KEY = "last_announced_id"


def asset_name(pipeline: str, watched: str, stage: str | None = None) -> str:
    """``barrierflow/<pipeline>/<checkpoints|output>``; ``barrierflow/<pipeline>/<stage>/output``
    for the output of a final stage of several."""
    if watched not in WATCHED:
        raise ValueError(f"unknown asset kind {watched!r}; expected one of {WATCHED}")
    if stage is not None and watched != "output":
        raise ValueError("only the output asset is per stage")
    return f"barrierflow/{pipeline}/{stage}/{watched}" if stage else f"barrierflow/{pipeline}/{watched}"


def storage_asset_uri(uri: str, local_path: str | None = None) -> str:
    """An asset URI for a storage URI: ``file://`` with the absolute local path, ``s3://`` unchanged."""
    if uri.startswith("file://") and local_path is not None:
        return "file://" + local_path
    return uri


class PipelineProgressTrigger(BaseEventTrigger):
    """Yields an event whenever the pipeline's newest completed checkpoint (``watched="checkpoints"``)
    or newest committed epoch (``"output"``) is newer than the last one announced.

    Args:
        spec_path: the pipeline spec (absolute).
        barrierflow_home: where relative paths in the spec resolve.
        watched: ``"checkpoints"`` or ``"output"``.
        poll_seconds: time between two looks at the store.
        min_interval_seconds: at least this long between two events (the output asset).
        stage: the output of this final stage of a multi-stage pipeline (``watched="output"``).
    """

    def __init__(self, *, spec_path: str, barrierflow_home: str, watched: str, poll_seconds: float = 10.0,
                 min_interval_seconds: float = 0.0, stage: str | None = None) -> None:
        super().__init__()
        if watched not in WATCHED:
            raise ValueError(f"watched must be one of {WATCHED}, got {watched!r}")
        self.spec_path = spec_path
        self.barrierflow_home = barrierflow_home
        self.watched = watched
        self.poll_seconds = poll_seconds
        self.min_interval_seconds = min_interval_seconds
        self.stage = stage

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "spec_path": self.spec_path, "barrierflow_home": self.barrierflow_home, "watched": self.watched,
            "poll_seconds": self.poll_seconds, "min_interval_seconds": self.min_interval_seconds,
            "stage": self.stage})

    def newest(self) -> int | None:
        """The newest id in the store now (blocking I/O: run in a thread)."""
        import os

        os.environ.setdefault("BARRIERFLOW_HOME", self.barrierflow_home)
        if self.watched == "output":
            from barrierflow.ops.batch import newest_output_epoch

            return newest_output_epoch(self.spec_path, self.stage)
        if self.watched == "tables":
            from barrierflow.ops.lake import cut_ids

            ids = cut_ids(self.spec_path)
            return ids[-1] if ids else None
        from barrierflow.ops.progress import newest_completed_checkpoint

        return newest_completed_checkpoint(self.spec_path)

    async def _remembered(self) -> int | None:
        state = getattr(self, "asset_state_store", None)
        if state is None:
            return None
        try:
            value = await state.aget(_STATE_KEY)
        except Exception as exc:  # the state store is an optimisation: without it, announce from now on
            self.log.warning("cannot read the asset state store: %s", exc)
            return None
        return int(value) if value is not None else None

    async def _remember(self, announced: int) -> None:
        state = getattr(self, "asset_state_store", None)
        if state is not None:
            try:
                await state.aset(_STATE_KEY, announced)
            except Exception as exc:
                self.log.warning("cannot write the asset state store: %s", exc)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = await self._remembered()
        last_event_at = float("-inf")
        while True:
            try:
                newest = await asyncio.to_thread(self.newest)
            except Exception as exc:  # a store that is briefly unreadable must not end the watch
                self.log.warning("cannot read the %s of %s: %s", self.watched, self.spec_path, exc)
                newest = None
            now = time.monotonic()
            if newest is not None and (last is None or newest > last) \
                    and now - last_event_at >= self.min_interval_seconds:
                for announced in await asyncio.to_thread(self.to_announce, last, newest):
                    self.log.info("%s: new %s id %d (previous %s)", self.spec_path, self.watched, announced, last)
                    payload: dict[str, Any] = {"spec_path": self.spec_path, "watched": self.watched, "id": announced,
                                               "previous": last}
                    if self.watched == "tables":
                        try:
                            payload["tables"] = await asyncio.to_thread(self.cut, announced)
                        except Exception as exc:  # e.g. deleted by retention meanwhile: not announced
                            self.log.warning("cannot read the cut of checkpoint %d of %s: %s", announced,
                                             self.spec_path, exc)
                            continue
                    yield TriggerEvent(payload)
                    last, last_event_at = announced, now
                    await self._remember(announced)
            await asyncio.sleep(self.poll_seconds)

    def to_announce(self, last: int | None, newest: int) -> list[int]:
        """The ids to announce after ``last`` up to ``newest``: every cut in between, in order,
        for the tables (each cut is one consistent set of table versions); the newest only
        otherwise, and at the first start."""
        if self.watched != "tables" or last is None:
            return [newest]
        from barrierflow.ops.lake import cut_ids

        return [cid for cid in cut_ids(self.spec_path) if last < cid <= newest]

    def cut(self, checkpoint_id: int) -> dict[str, Any]:
        """Every table's version as of the cut of ``checkpoint_id`` (the event's ``tables``)."""
        from barrierflow.ops.lake import lake_cut

        return dict(lake_cut(self.spec_path, checkpoint_id).as_dict()["tables"])


def pipeline_asset(pipeline: str, watched: str, uri: str, *, spec_path: str, barrierflow_home: str,
                   poll_seconds: float, min_interval_seconds: float = 0.0, stage: str | None = None) -> Asset:
    """The asset ``barrierflow/<pipeline>/<watched>`` (with ``stage``: the output of that final
    stage, ``barrierflow/<pipeline>/<stage>/output``) at ``uri`` with its watcher."""
    trigger = PipelineProgressTrigger(spec_path=spec_path, barrierflow_home=barrierflow_home, watched=watched,
                                      poll_seconds=poll_seconds, min_interval_seconds=min_interval_seconds,
                                      stage=stage)
    watcher = f"barrierflow-{pipeline}-{stage}-{watched}" if stage else f"barrierflow-{pipeline}-{watched}"
    return Asset(name=asset_name(pipeline, watched, stage), uri=uri, group="barrierflow",
                 watchers=[AssetWatcher(name=watcher, trigger=trigger)])


def triggering_cut(triggering_asset_events: Any, asset_name_: str) -> dict[str, Any] | None:
    """The newest cut among a DAG run's ``triggering_asset_events`` (its task context's) of the
    tables asset ``asset_name_``: ``{"checkpoint_id": n, "tables": {<stage>/<sink>: version}}``,
    or None when the run was not triggered by that asset (a manual or scheduled run)."""
    cuts = []
    for asset, events in dict(triggering_asset_events or {}).items():
        if getattr(asset, "name", None) != asset_name_:
            continue
        for event in events:
            payload = (getattr(event, "extra", None) or {}).get("payload") or {}
            if "tables" in payload and payload.get("id") is not None:
                cuts.append({"checkpoint_id": int(payload["id"]), "tables": payload["tables"]})
    return max(cuts, key=lambda c: c["checkpoint_id"]) if cuts else None
