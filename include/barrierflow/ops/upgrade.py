"""The compatibility report of a spec change (``barrierflow upgrade SPEC --to NEW_SPEC --dry-run``).

Reads what a completed cut (the newest, or ``checkpoint_id``: a checkpoint or a savepoint) holds
of every stage of SPEC with the state reader (:mod:`barrierflow.state.reader`: operators, key
and value schemas, partitions, the recorded fingerprint and shuffle partitions), plans every
stage query of NEW_SPEC without starting it
(:func:`~barrierflow.runtime.state_compat.planned_fingerprint`: nothing is read, nothing
connects, nothing is written) and compares the two per stage, operator and graph
(:func:`barrierflow.state.compatibility.compare`). The store and the work dirs are only read.

Rewriting the state (a rescale, a value column added or dropped, a stage added) is not built:
without ``dry_run`` the operation refuses (:class:`UpgradeNotAvailableError`) and changes nothing.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.ops.state import session_for
from barrierflow.pipeline.model import OpenedPipeline, Stage, open_pipeline
from barrierflow.spark.session import shuffle_partitions
from barrierflow.state.compatibility import CompatibilityReport, PlannedStage, StageState, compare
from barrierflow.state.reader import has_state, open_state

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["UpgradeNotAvailableError", "upgrade"]


class UpgradeNotAvailableError(UserInputError):
    """``upgrade`` without ``--dry-run``: rewriting state is not available yet."""

    def __init__(self, spec: str, new_spec: str) -> None:
        super().__init__(
            f"barrierflow upgrade rewrites no state yet: only the compatibility report is available. Run "
            f"'barrierflow upgrade {spec} --to {new_spec} --dry-run' to see, per stage and operator, whether the "
            f"state is compatible, needs a rewrite or is incompatible. Keep running {spec} (the old spec) until "
            f"then; a change the report calls compatible can be made by running {new_spec} over the same "
            "checkpoint storage. Nothing was changed.")


def _sink(stage: Stage) -> str:
    if stage.output is not None:
        return f"channel topic {stage.output.topic}"
    return f"{stage.spec.sink.name} ({stage.spec.sink.type})"


def _sources(stage: Stage) -> dict[str, str]:
    return {stage.spec.source.name: stage.source_type}


def _channels(pipeline: OpenedPipeline) -> dict[str, tuple[str, int]]:
    return {c.name: (c.topic_for(pipeline.name), c.partitions) for c in pipeline.channels}


def upgrade(spec_path: str | os.PathLike[str], new_spec_path: str | os.PathLike[str], *, dry_run: bool,
            checkpoint_id: int | None = None, spark: SparkSession | None = None,
            scratch: str | None = None) -> CompatibilityReport:
    """The compatibility report of running ``new_spec_path`` over the state of ``spec_path``'s
    cut ``checkpoint_id`` (None: the newest completed one); see the module docstring.

    Raises:
        UpgradeNotAvailableError: ``dry_run`` is False (nothing is read or changed).
        SpecError: either spec does not load.
        CheckpointNotFoundError: no completed cut, or ``checkpoint_id`` is not one (listing them).
        CheckpointCorruptError: a file of the cut is missing or altered in the store.
    """
    if not dry_run:
        raise UpgradeNotAvailableError(str(spec_path), str(new_spec_path))
    old, new = open_pipeline(spec_path), open_pipeline(new_spec_path)
    cid = old.completed_cut(checkpoint_id)
    session = session_for(old, spark)
    states = []
    for stage in old.stages:
        manifest = stage.store.get(cid)
        with open_state(session, pipeline=old.name, stage=stage.name, store=stage.store, manifest=manifest,
                        spark_spec=stage.spec.spark, scratch=scratch, require_state=False) as snapshot:
            operators = snapshot.operators() if has_state(manifest) else []
            states.append(StageState(stage.name, operators, snapshot.fingerprint(),
                                     snapshot.recorded_shuffle_partitions(), _sources(stage), _sink(stage)))
    from barrierflow.runtime.state_compat import planned_fingerprint

    planned = []
    with tempfile.TemporaryDirectory(prefix="barrierflow-upgrade-", dir=scratch) as empty:
        for stage in new.stages:
            fingerprint = planned_fingerprint(session, stage.spec, spec_path=str(new_spec_path),
                                              source_type=stage.source_type, scratch_dir=empty)
            planned.append(PlannedStage(stage.name, fingerprint, shuffle_partitions(stage.spec.spark),
                                        _sources(stage), _sink(stage)))
    graph, stages = compare(states, planned, old_channels=_channels(old), new_channels=_channels(new),
                            old_storage=old.storage, new_storage=new.storage)
    return CompatibilityReport(old.name, str(spec_path), str(new_spec_path), cid, old.cut_noun, graph, stages)
