"""The rewrite step of an upgrade: the new savepoint cut, each stage of the new spec given its part.

:func:`rewrite_savepoint` records cut R (the id the upgrade record planned, or the next free one
after a rewrite killed before its record) under the pipeline's lease: a rescaled stage's part is
its source part repartitioned by Spark (:func:`barrierflow.state.rescale.rescale_checkpoint`), a
stage whose value columns change its state rewritten
(:func:`barrierflow.state.value_columns.rewrite_value_columns`), a stage whose state is rebuilt
the replay's (:func:`barrierflow.upgrade.rebuild.rebuild_state`); the other stages' parts are
carried over, an assumed stage's marked, an added stage's empty, a dropped stage gets none
(:mod:`barrierflow.upgrade.cut`). The source savepoint S is never modified. Then the record's
step is ``rewritten`` (:mod:`barrierflow.upgrade.record`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.faults import crash_point
from barrierflow.lease import JobLease
from barrierflow.pipeline.model import OpenedPipeline
from barrierflow.upgrade.cut import (
    assumed_savepoint,
    carry_savepoint,
    empty_savepoint,
    next_cut_id,
    rescaled_savepoint,
)
from barrierflow.upgrade.record import UpgradeRecord, UpgradeStep, write_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.state.value_columns import ValueChange

log = logging.getLogger(__name__)

__all__ = ["rewrite_savepoint"]


def rewrite_savepoint(record: UpgradeRecord, old: OpenedPipeline, new: OpenedPipeline, session: SparkSession,
             scratch: str | None, timings: dict[str, float], values: dict[str, ValueChange],
             planned: dict[str, list[dict[str, Any]]]) -> UpgradeRecord:
    """Record the new savepoint cut (unless nothing needs a rewrite, or a killed run recorded
    it already), under the pipeline's lease: every stage of the new spec given its part (a
    rescaled stage, or one whose value columns change (``values``; ``planned``: the new
    fingerprints), its rewritten checkpoint, the others the source's carried over, an added one
    an empty one; a dropped stage none), written by the pipeline's cuts. Then ``rewritten``."""
    from barrierflow.state.rescale import rescale_checkpoint
    from barrierflow.state.value_columns import rewrite_value_columns
    from barrierflow.upgrade.rebuild import rebuild_state

    objects = new.objects
    if record.savepoint != record.source_savepoint and record.savepoint not in new.cuts.completed_ids():
        old_stages = {s.name: s for s in old.stages}
        with JobLease(Path(new.work_dir), new.name, "restore", store=objects) as lease:
            for stage in new.stages:
                stage.store.fence = lease.token
            try:
                made = next_cut_id(new.cuts, [*old.stages, *new.stages])  # a killed rewrite's parts are left unused
                if made != record.savepoint:
                    record = write_record(objects, record, UpgradeStep.REPORT, savepoint=made)
                parts: dict[str, tuple[CheckpointStore, Manifest]] = {}
                for target in new.stages:
                    was = old_stages.get(target.name)
                    if was is None:
                        parts[target.name] = (target.store, empty_savepoint(target, made))
                        continue
                    source = was.store.get(record.source_savepoint)
                    if target.name in record.rebuilt:
                        step, rewritten = "rebuild", rebuild_state(
                            session, pipeline=old.name, stage=target, store=was.store, manifest=source,
                            spec_path=new.spec_path, fingerprint=planned[target.name], scratch=scratch)
                    elif target.name in values:
                        step, rewritten = "rewrite", rewrite_value_columns(
                            session, pipeline=old.name, stage=target.name, store=was.store, manifest=source,
                            spark_spec=target.spec.spark, change=values[target.name],
                            fingerprint=planned[target.name], scratch=scratch)
                    elif target.name in record.assumed:
                        parts[target.name] = (target.store, assumed_savepoint(
                            target, source, made, planned[target.name], new_spec=new.spec_path, scratch=scratch))
                        continue
                    elif target.name in record.rescaled:
                        step, rewritten = "repartition", rescale_checkpoint(
                            session, pipeline=old.name, stage=target.name, store=was.store, manifest=source,
                            spark_spec=target.spec.spark, partitions=record.rescaled[target.name][1],
                            scratch=scratch)
                    else:
                        parts[target.name] = (target.store, carry_savepoint(target, source, made))
                        continue
                    with rewritten as copy:
                        timings["materialize"] = timings.get("materialize", 0.0) + copy.materialize_seconds
                        timings[step] = timings.get(step, 0.0) + copy.repartition_seconds
                        began = time.perf_counter()
                        parts[target.name] = (target.store, rescaled_savepoint(
                            target, source, copy.files, copy.directory, copy.batch_id, copy.state_bases,
                            checkpoint_id=made))
                        timings["record"] = timings.get("record", 0.0) + time.perf_counter() - began
                crash_point("upgrade_mid_rewrite", pipeline=old.name, savepoint=made)
                began = time.perf_counter()
                for name, (store, _) in parts.items():  # the new cut continues the source's timeline:
                    if name in old_stages:  # a stage's checkpoints after the source (a cut left
                        store.abandon([i for i in store.checkpoint_ids()  # incomplete, or newer) are not in it
                                       if record.source_savepoint < i < made])
                new.cuts.record_cut(made, parts)
                timings["record"] = timings.get("record", 0.0) + time.perf_counter() - began
            finally:
                for stage in new.stages:
                    stage.store.fence = None
        log.info("pipeline %s: savepoint %d rewritten as savepoint %d (rescaled %s, value columns %s, rebuilt %s, "
                 "added %s, dropped %s)", old.name, record.source_savepoint, made, record.rescaled,
                 record.value_columns, record.rebuilt, record.added, record.dropped)
    return write_record(objects, record, UpgradeStep.REWRITTEN)
