"""The compatibility report of a spec change (``barrierflow upgrade SPEC --to NEW_SPEC --dry-run``).

:func:`report_for` reads what a completed cut (the newest, or ``checkpoint_id``: a checkpoint
or a savepoint) holds of every stage of SPEC with the state reader
(:mod:`barrierflow.state.reader`: operators, key and value schemas, partitions, the recorded
fingerprint and shuffle partitions), plans every stage query of NEW_SPEC without starting it
(:func:`~barrierflow.runtime.state_compat.planned_fingerprint`: nothing is read, nothing
connects, nothing is written) and compares the two per stage, operator and graph
(:func:`barrierflow.state.compatibility.compare`). The store and the work dirs are only read.
The upgrade (:mod:`barrierflow.upgrade.steps`) acts on this report
(:func:`compatibility_report`, over the pipelines it opened).
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from barrierflow.pipeline.model import OpenedPipeline, Stage, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.runtime.session import session_for
from barrierflow.spark.session import shuffle_partitions
from barrierflow.state.compatibility import (
    CompatibilityReport,
    Finding,
    PlannedStage,
    StageState,
    compare,
    ttl_of,
)
from barrierflow.state.metadata_compat import PlannedOperatorState, PlannedWindow, StoredWindows, compare_by_metadata
from barrierflow.state.reader import OperatorSchema, StateSnapshot, has_state, open_state
from barrierflow.upgrade.rebuild import rebuild_refusal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["compatibility_report", "report_for"]


def _sink(stage: Stage) -> str:
    if stage.output is not None:
        return f"channel topic {stage.output.topic}"
    return ", ".join(f"{sink.name} ({sink.type})" for sink in stage.spec.sinks)


def _sources(stage: Stage) -> dict[str, str]:
    return {stage.spec.source.name: stage.source_type}


def _channels(pipeline: OpenedPipeline) -> dict[str, tuple[str, int]]:
    return {c.name: (c.topic_for(pipeline.name), c.partitions) for c in pipeline.channels}


def report_for(spec_path: str | os.PathLike[str], new_spec_path: str | os.PathLike[str], *,
               checkpoint_id: int | None = None, spark: SparkSession | None = None,
               scratch: str | None = None) -> CompatibilityReport:
    """The compatibility report (``upgrade --dry-run``): see :func:`barrierflow.ops.upgrade.upgrade`."""
    return compatibility_report(open_pipeline(spec_path), open_pipeline(new_spec_path), checkpoint_id=checkpoint_id,
                                spark=spark, scratch=scratch)


def compatibility_report(old: OpenedPipeline, new: OpenedPipeline, *, checkpoint_id: int | None = None,
                         spark: SparkSession | None = None, scratch: str | None = None) -> CompatibilityReport:
    """The compatibility report of running ``new`` over the state of ``old``'s cut
    ``checkpoint_id`` (None: the newest completed one), both pipelines opened by the caller
    (the upgrade opens each spec once). ``spark``: the session to plan and read with (None:
    built from ``old``'s spec); ``scratch``: where the state is materialized to be read.

    Raises:
        CheckpointNotFoundError: no completed cut, or ``checkpoint_id`` is not one.
        CheckpointCorruptError: a file of the cut is missing or altered in the store.
    """
    from barrierflow.runtime.state_compat import planned_fingerprint, planned_keyed_states, planned_states

    spec_path, new_spec_path = old.spec_path, new.spec_path
    cid = old.completed_cut(checkpoint_id)
    session = session_for(old, spark)
    planned, operators_of = [], {}
    with tempfile.TemporaryDirectory(prefix="barrierflow-upgrade-", dir=scratch) as empty:
        for stage in new.stages:
            fingerprint = planned_fingerprint(session, stage.spec, spec_path=str(new_spec_path),
                                              source_type=stage.source_type, scratch_dir=empty)
            operators_of[stage.name] = planned_states(session, stage.spec, spec_path=str(new_spec_path),
                                                      source_type=stage.source_type, scratch_dir=empty)
            keyed = (planned_keyed_states(session, stage.spec, spec_path=str(new_spec_path),
                                          source_type=stage.source_type, scratch_dir=empty)
                     if any(e.get("operator", "").startswith("TransformWithState") for e in fingerprint) else [])
            planned.append(PlannedStage(stage.name, fingerprint, shuffle_partitions(stage.spec.spark),
                                        _sources(stage), _sink(stage),
                                        dict(stage.spec.transformation.state_defaults), rebuild_refusal(stage),
                                        stage.spec.spark.state_store, keyed, ttl_of(stage.spec)))
    refusals = {p.stage: p.rebuild_refusal for p in planned}
    states = []
    for stage in old.stages:
        manifest = stage.store.get(cid)
        with open_state(session, pipeline=old.name, stage=stage.name, store=stage.store, manifest=manifest,
                        spark_spec=stage.spec.spark, scratch=scratch, require_state=False) as snapshot:
            operators = snapshot.operators() if has_state(manifest) else []
            fingerprint = snapshot.fingerprint()
            by_metadata = None
            if fingerprint is None and operators and stage.name in operators_of:
                by_metadata = _by_metadata(snapshot, operators, operators_of[stage.name], refusals[stage.name])
            states.append(StageState(stage.name, operators, fingerprint,
                                     snapshot.recorded_shuffle_partitions(), _sources(stage), _sink(stage),
                                     stage.spec.spark.state_store, by_metadata, ttl_of(stage.spec)))
    graph, stages = compare(states, planned, old_channels=_channels(old), new_channels=_channels(new),
                            old_storage=old.storage, new_storage=new.storage)
    return CompatibilityReport(old.name, str(spec_path), str(new_spec_path), cid, words(old).cut_noun, graph, stages)


def _by_metadata(snapshot: StateSnapshot, stored: list[OperatorSchema], planned: list[PlannedOperatorState],
                 refusal: str | None) -> list[Finding]:
    """The findings of a stage's state without a fingerprint against the new spec's plan, by
    Spark's state metadata (:func:`~barrierflow.state.metadata_compat.compare_by_metadata`)."""
    def windows(operator: OperatorSchema, window: PlannedWindow) -> StoredWindows:
        return StoredWindows(*snapshot.windows(operator, window.field, size_us=window.size_us,
                                               slide_us=window.slide_us, offset_us=window.offset_us))

    return compare_by_metadata(snapshot.stage, stored, planned, windows, refusal)
