"""The compatibility report of a spec change (``barrierflow upgrade SPEC --to NEW_SPEC --dry-run``).

Reads what a completed cut (the newest, or ``checkpoint_id``: a checkpoint or a savepoint) holds
of every stage of SPEC with the state reader (:mod:`barrierflow.state.reader`: operators, key
and value schemas, partitions, the recorded fingerprint and shuffle partitions), plans every
stage query of NEW_SPEC without starting it
(:func:`~barrierflow.runtime.state_compat.planned_fingerprint`: nothing is read, nothing
connects, nothing is written) and compares the two per stage, operator and graph
(:func:`barrierflow.state.compatibility.compare`). The store and the work dirs are only read.

Without ``dry_run`` (:func:`upgrade` then returns an :class:`UpgradeResult`), the change is made
from a savepoint (``checkpoint_id``, default the newest savepoint, which must be the newest
completed checkpoint: output committed after it would be written again), with the pipeline
stopped, under its lease:

* a change the report calls *compatible*: nothing is rewritten; the savepoint is restored for
  the new spec as a new attempt;
* a change whose only rewrite is a rescale (a single-stage pipeline's shuffle partitions):
  the savepoint is materialized into a scratch directory, Spark's offline repartition rewrites
  that copy (:func:`barrierflow.state.rescale.rescale_checkpoint`: batch V+1, no input, the state
  in the new partition count), and the copy's files are recorded as a NEW savepoint (a new
  checkpoint id; the source savepoint is never modified: Flink's NO_CLAIM), which is then
  restored for the new spec as a new attempt, which runs its canary (below);
* a pipeline of several stages (the savepoint a global checkpoint whose every stage's part is a
  savepoint): a new cut is recorded under a new id (:mod:`barrierflow.ops.upgrade_cut`), each
  stage of the new spec given its part: a stage with state whose shuffle partitions changed
  rescaled as above (RocksDB), the other stages' parts carried over as they are, a stage added
  behind new channels an empty part (it starts on empty state at the beginning of its new
  channels); a stage the new spec removes gets no part, and only when ``drop_stages`` names it.
  The stages fed by channels keep the source cut's barrier positions and attempt cutoffs. The
  new cut is then restored for the new spec as a new attempt (:func:`refuse_stage_changes`
  first refuses what it cannot make).

An upgrade of several stages killed at any step leaves the old savepoint as it was and is run
again by the same command: before the new cut is recorded nothing in the store refers to the
files already uploaded; after it, the rewritten savepoint is the newest, the report over it is
*compatible*, and the command restores it. It runs no canary yet.

A pipeline of one stage is upgraded in steps recorded in the checkpoint store
(:mod:`barrierflow.ops.upgrade_record`):

* ``report``: a change the report calls *compatible* needs no rewrite (the new spec restores S);
  a change whose only rewrite is a rescale (a single-stage pipeline's shuffle partitions) plans
  the id R of a new savepoint;
* ``rewritten``: (a rescale) S is materialized into a scratch directory, Spark's offline
  repartition rewrites that copy (:func:`barrierflow.state.rescale.rescale_checkpoint`: batch
  V+1, no input, the state in the new partition count), and the copy's files are recorded as
  savepoint R (S is never modified: Flink's NO_CLAIM);
* ``canary-running``: R (or S) is restored for the new spec as a new attempt and the canary runs
  (:func:`barrierflow.ops.canary.run_canary`): ``canary_checkpoints`` completed checkpoints whose
  sinks pre-commit but commit nothing, each deep-verified;
* ``canary-passed``: the held epochs are committed by reconciliation against the canary's last
  checkpoint; ``barrierflow run NEW_SPEC`` continues;
* ``rolling-back`` -> ``rolled-back``: the canary failed; the old spec is restored from S as a new
  attempt (which aborts the canary's pre-committed epochs, newer than S) and
  :class:`UpgradeRolledBackError` names the failed check. Nothing of the canary was committed,
  so the old spec's output stays exactly once.

An upgrade killed at any step is continued by the same command from the recorded step: a
rewrite whose manifest R was written is not made again; a killed canary is restarted from R
(the restore aborts its held epochs); a passed canary's commit and a rollback's restore are
made again (both idempotent). Crash points: ``upgrade_after_rewrite``, ``upgrade_before_commit``,
``upgrade_mid_rollback`` (:mod:`barrierflow.faults`).

Everything else is refused, naming what is not yet supported and what to do
(:class:`UpgradeNotSupportedError`): an incompatible change (a stage with state removed counts
only when not named in ``drop_stages``), a value column added or dropped (Spark has no schema
evolution for its built-in aggregations' state, and barrierflow does not rewrite stored values),
a changed watermark, a stateful operator added, a stage added that reads an existing channel or
a source, a channel changed, the shuffle partitions of a stage without state, a change of shape
(one stage <-> several), and a rescale of state kept by the HDFS-backed state store. A refusal
changes nothing.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import CheckpointKind, Manifest
from barrierflow.errors import BarrierflowError, CheckpointNotFoundError, UserInputError
from barrierflow.faults import crash_point
from barrierflow.lease import JobLease, lease_holder
from barrierflow.ops.state import session_for
from barrierflow.ops.upgrade_cut import carry_savepoint, empty_savepoint, next_cut_id, record_cut, record_savepoint
from barrierflow.ops.upgrade_record import (
    UpgradeInProgressError,
    UpgradeRecord,
    UpgradeStep,
    read_record,
    spec_digest,
    write_record,
)
from barrierflow.pipeline.model import OpenedPipeline, Stage, open_pipeline
from barrierflow.spark.session import shuffle_partitions
from barrierflow.state.compatibility import (
    CompatibilityReport,
    Finding,
    PlannedStage,
    StageState,
    Verdict,
    compare,
)
from barrierflow.state.reader import has_state, open_state

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CANARY_CHECKPOINTS", "UpgradeInProgressError", "UpgradeNotSupportedError", "UpgradeRefusedError",
           "UpgradeResult", "UpgradeRolledBackError", "upgrade"]

#: The subject suffix of the one rewrite :func:`upgrade` makes (a rescale).
RESCALE = "shuffle partitions"
#: How many completed checkpoints of the new spec the canary verifies by default.
DEFAULT_CANARY_CHECKPOINTS = 3


class UpgradeRefusedError(UserInputError):
    """The upgrade cannot start now: the pipeline runs, or it has no savepoint to upgrade from
    (or the one named is not the newest completed checkpoint). Nothing was changed."""


class UpgradeNotSupportedError(UserInputError):
    """The change needs what ``upgrade`` does not do yet (or cannot do): the message names it.
    Nothing was changed."""


class UpgradeRolledBackError(BarrierflowError):
    """The canary of the new spec failed (the message names the failed check) and the upgrade
    rolled back: the old spec was restored from the source savepoint, the canary's pre-committed
    epochs were aborted, nothing of it was committed. ``report``: the upgrade record."""

    def __init__(self, message: str, record: UpgradeRecord) -> None:
        super().__init__(message)
        self.report = record


@dataclass(frozen=True)
class UpgradeResult:
    """A completed upgrade.

    Attributes:
        report: the compatibility report it acted on.
        source_savepoint: the savepoint it started from (never modified).
        savepoint: the savepoint the new spec was restored from: the rewritten one (a new id),
            or ``source_savepoint`` when nothing needed a rewrite.
        rescaled: stage -> (old, new) partitions of each rescaled stage.
        attempt: the attempt the restore began (the next run of the new spec writes it).
        added: the stages the new spec adds (several stages; they start on empty state).
        dropped: the stages dropped with their state (named with ``drop_stages``).
        timings: seconds per step of this invocation (``materialize``, ``repartition``,
            ``record``, ``restore``, ``canary``, ``commit``, ``total``).
        location: where the savepoint the new spec was restored from is stored.
        canary: (one stage) ``checkpoints`` (asked for), ``verified`` (ids that passed deep
            verification, committed once it passed), ``attempts`` (canaries started: more than
            one after a crash) and ``step`` (the recorded step, ``canary-passed``); {} for several.
    """

    report: CompatibilityReport
    source_savepoint: int
    savepoint: int
    rescaled: dict[str, tuple[int, int]]
    attempt: int
    timings: dict[str, float]
    location: str
    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    canary: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"report": self.report.as_dict(), "source_savepoint": self.source_savepoint,
                "savepoint": self.savepoint, "location": self.location,
                "rescaled": {s: {"from": a, "to": b} for s, (a, b) in self.rescaled.items()},
                "added": list(self.added), "dropped": list(self.dropped),
                "attempt": self.attempt, "canary": self.canary,
                "timings": {k: round(v, 3) for k, v in self.timings.items()}}


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
            scratch: str | None = None, drop_stages: Sequence[str] = (),
            canary_checkpoints: int = DEFAULT_CANARY_CHECKPOINTS) -> CompatibilityReport | UpgradeResult:
    """With ``dry_run``: the compatibility report of running ``new_spec_path`` over the state of
    ``spec_path``'s cut ``checkpoint_id`` (None: the newest completed one). Without: make the
    change from a savepoint (module docstring) and return the :class:`UpgradeResult`.
    ``drop_stages`` names the stages of ``spec_path`` the change removes (a removed stage is
    refused unless named: its state, and its part of the cut, are dropped).

    Raises:
        SpecError: either spec does not load.
        CheckpointNotFoundError: no completed cut, or ``checkpoint_id`` is not one (listing them).
        CheckpointCorruptError: a file of the cut is missing or altered in the store.
        UpgradeRefusedError: (not ``dry_run``) the pipeline runs, has no savepoint, or the
            savepoint is not its newest completed checkpoint.
        UpgradeNotSupportedError: (not ``dry_run``) the change is not one ``upgrade`` makes yet.
        UpgradeInProgressError: (not ``dry_run``) an unfinished upgrade of the pipeline to another
            NEW_SPEC (or a changed one) is recorded: only its own command continues it.
        UpgradeRolledBackError: (not ``dry_run``, one stage) the canary failed (the message names
            the check) and the old spec was restored from the source savepoint; also on a rerun
            after that.
        RescaleFailedError: Spark's repartition failed on the scratch copy.
    """
    if not dry_run:
        if canary_checkpoints < 0:
            raise UserInputError(f"--canary-checkpoints must be 0 (no canary) or more, not {canary_checkpoints}")
        return _upgrade(spec_path, new_spec_path, checkpoint_id=checkpoint_id, spark=spark, scratch=scratch,
                        drop_stages=tuple(drop_stages), canary_checkpoints=canary_checkpoints)
    return report_for(spec_path, new_spec_path, checkpoint_id=checkpoint_id, spark=spark, scratch=scratch)


def report_for(spec_path: str | os.PathLike[str], new_spec_path: str | os.PathLike[str], *,
               checkpoint_id: int | None = None, spark: SparkSession | None = None,
               scratch: str | None = None) -> CompatibilityReport:
    """The compatibility report (``upgrade --dry-run``): see :func:`upgrade`."""
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


def _savepoint(pipeline: OpenedPipeline, spec_path: str, checkpoint_id: int | None) -> Manifest:
    """The savepoint to upgrade from (:class:`UpgradeRefusedError` when there is none, or it is
    not the newest completed checkpoint)."""
    stage = pipeline.stages[0]
    completed = stage.store.completed()
    savepoints = [m for m in completed if m.kind is CheckpointKind.SAVEPOINT]
    stop = f"'barrierflow stop {spec_path} --savepoint'"
    if checkpoint_id is None:
        if not savepoints:
            raise UpgradeRefusedError(
                f"pipeline {pipeline.name} has no savepoint to upgrade from; run it and stop it with {stop}, then "
                "upgrade. Nothing was changed.")
        chosen = savepoints[-1]
    else:
        chosen = next((m for m in completed if m.checkpoint_id == checkpoint_id), None)
        if chosen is None:
            raise CheckpointNotFoundError(
                f"pipeline {pipeline.name} has no completed checkpoint {checkpoint_id}; its savepoints: "
                f"{[m.checkpoint_id for m in savepoints] or 'none'} (take one with {stop})")
        if chosen.kind is not CheckpointKind.SAVEPOINT:
            raise UpgradeRefusedError(
                f"checkpoint {checkpoint_id} of pipeline {pipeline.name} is no savepoint; an upgrade starts from a "
                f"savepoint: stop the pipeline with {stop} and upgrade from the savepoint it names. Nothing was "
                "changed.")
    newer = [m.checkpoint_id for m in completed if m.checkpoint_id > chosen.checkpoint_id]
    if newer:
        raise UpgradeRefusedError(
            f"savepoint {chosen.checkpoint_id} of pipeline {pipeline.name} is older than its completed checkpoints "
            f"{newer}, whose output is committed: an upgrade from it would write that output again. Run the old spec "
            f"and stop it with {stop}, then upgrade from the new savepoint. Nothing was changed.")
    return chosen


def _refuse_unsupported(report: CompatibilityReport, spec_path: str, new_spec_path: str) -> None:
    """Raise UpgradeNotSupportedError unless every finding is compatible or a rescale."""
    if report.verdict is Verdict.INCOMPATIBLE:
        named = "; ".join(f"{f.subject}: {f.reason}" for f in report.graph + [f for s in report.stages
                                                                               for f in s.findings]
                          if f.verdict is Verdict.INCOMPATIBLE)
        raise UpgradeNotSupportedError(
            f"{new_spec_path} is incompatible with the state of {spec_path}: {named}. Dropping state is not "
            f"supported; see 'barrierflow upgrade {spec_path} --to {new_spec_path} --dry-run'. Nothing was changed.")
    other = [f for s in report.stages for f in s.findings
             if f.verdict is Verdict.NEEDS_REWRITE and not f.subject.endswith(RESCALE)]
    other += [f for f in report.graph if f.verdict is Verdict.NEEDS_REWRITE]
    if other:
        named = "; ".join(f"{f.subject}: {f.reason}{not_rewritten_fix(f)}" for f in other)
        raise UpgradeNotSupportedError(
            f"upgrade rewrites only shuffle partitions (a rescale) of a single-stage pipeline so far; this change "
            f"needs a rewrite that is not yet supported: {named}. Keep running {spec_path}. Nothing was changed.")


#: What to do instead of a rewrite ``upgrade`` does not make, by what the finding's reason names.
_FIXES = (
    ("value column", "; Spark has no schema evolution for the state of its built-in aggregations (only "
                     "transformWithState with the Avro state encoding has one), and rewriting every stored value "
                     "with a declared default is not yet supported: keep the aggregation's value columns, or start "
                     "the changed pipeline on empty state (a new work_dir and checkpoint.storage)"),
    ("watermark changed", "; keep the watermark definition (column and delay) as it is"),
    ("new stateful operator", "; adding a stateful operator to a stage with state is not yet supported: put it "
                              "in a stage of its own behind a new channel (a pipeline of several stages)"),
)


def not_rewritten_fix(finding: Finding) -> str:
    """The fix a refusal adds after a needs-rewrite ``finding`` that upgrade does not make
    (empty when the finding's reason already says it)."""
    return next((fix for what, fix in _FIXES if what in finding.reason), "")


def _upgrade(spec_path: str | os.PathLike[str], new_spec_path: str | os.PathLike[str], *,
             checkpoint_id: int | None, spark: SparkSession | None, scratch: str | None,
             drop_stages: tuple[str, ...], canary_checkpoints: int) -> UpgradeResult:
    started = time.perf_counter()
    old, new = open_pipeline(spec_path), open_pipeline(new_spec_path)
    if old.single_stage != new.single_stage:
        several = spec_path if not old.single_stage else new_spec_path
        raise UpgradeNotSupportedError(
            f"{several} has several stages and the other spec one: turning a single-stage pipeline into one of "
            "several stages (or back) is not yet supported (their checkpoints are laid out differently). Keep the "
            f"shape of {spec_path}. Nothing was changed.")
    if old.name != new.name:
        raise UpgradeNotSupportedError(
            f"{new_spec_path} names pipeline {new.name}, {spec_path} pipeline {old.name}: an upgrade keeps the "
            "pipeline's name (seeding a copy under another name is not yet supported). Nothing was changed.")
    holder = lease_holder(Path(old.work_dir), old.objects)
    if holder is not None:
        raise UpgradeRefusedError(
            f"pipeline {old.name} is running (pid {holder.get('pid')} on {holder.get('host')}, "
            f"{holder.get('purpose', 'run')}): stop it first with 'barrierflow stop {spec_path} --savepoint', then "
            "upgrade from the savepoint it names. Nothing was changed.")
    if not old.single_stage:
        return _upgrade_stages(old, new, checkpoint_id=checkpoint_id, spark=spark, scratch=scratch,
                               drop_stages=drop_stages, started=started)
    if drop_stages:
        raise UserInputError(f"--drop-stage applies to pipelines of several stages; {spec_path} has one stage")
    return _upgrade_stage(old, new, checkpoint_id=checkpoint_id, spark=spark, scratch=scratch,
                          canary_checkpoints=canary_checkpoints, started=started)


def _cut_savepoint(pipeline: OpenedPipeline, spec_path: str, checkpoint_id: int | None) -> int:
    """The savepoint cut (every stage's part a savepoint) to upgrade a pipeline of several
    stages from; refused as :func:`_savepoint` refuses."""
    completed = pipeline.cuts.completed_ids()

    def is_savepoint(cid: int) -> bool:  # of every stage (a cut from before a stage was added has none of it)
        return set(pipeline.cuts.get(cid).stages) == {s.name for s in pipeline.stages} and all(
            s.store.get(cid).kind is CheckpointKind.SAVEPOINT for s in pipeline.stages)

    stop = f"'barrierflow stop {spec_path} --savepoint'"
    if checkpoint_id is None:
        savepoints = [c for c in completed if is_savepoint(c)]
        if not savepoints:
            raise UpgradeRefusedError(
                f"pipeline {pipeline.name} has no savepoint to upgrade from; run it and stop it with {stop}, then "
                "upgrade. Nothing was changed.")
        chosen = savepoints[-1]
    else:
        if checkpoint_id not in completed:
            raise CheckpointNotFoundError(
                f"pipeline {pipeline.name} has no completed global checkpoint {checkpoint_id}; completed: "
                f"{completed or 'none'} (take a savepoint with {stop})")
        if not is_savepoint(checkpoint_id):
            raise UpgradeRefusedError(
                f"global checkpoint {checkpoint_id} of pipeline {pipeline.name} is no savepoint; an upgrade starts "
                f"from a savepoint: stop the pipeline with {stop} and upgrade from the savepoint it names. Nothing "
                "was changed.")
        chosen = checkpoint_id
    newer = [c for c in completed if c > chosen]
    if newer:
        raise UpgradeRefusedError(
            f"savepoint {chosen} of pipeline {pipeline.name} is older than its completed global checkpoints {newer}, "
            f"whose output is committed: an upgrade from it would write that output again. Run the old spec and stop "
            f"it with {stop}, then upgrade from the new savepoint. Nothing was changed.")
    return chosen


def refuse_stage_changes(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline,
                          drop_stages: tuple[str, ...]) -> None:
    """Raise unless every finding is one the rewrite of a cut makes: a stage with state rescaled
    (RocksDB), a stage added behind new channels, a stage named in ``drop_stages`` removed, a
    channel added or removed, a sink changed (compatible)."""
    spec, new_spec = old.spec_path, new.spec_path
    old_names, new_names = {s.name for s in old.stages}, {s.name for s in new.stages}
    for name in drop_stages:
        if name not in old_names:
            raise UserInputError(f"--drop-stage {name}: {spec} has no stage {name!r}; its stages: "
                                 f"{sorted(old_names)}. Nothing was changed.")
        if name in new_names:
            raise UserInputError(f"--drop-stage {name}: {new_spec} still has stage {name}; name only the stages it "
                                 "removes. Nothing was changed.")
    removed = sorted(old_names - new_names - set(drop_stages))
    if removed:
        named = " ".join(f"--drop-stage {n}" for n in removed)
        raise UpgradeNotSupportedError(
            f"{new_spec} removes stage{'s' if len(removed) > 1 else ''} {', '.join(removed)} of pipeline {old.name}: "
            f"its state and its part of the cut would be dropped, which upgrade does only when told: add {named} "
            "(or keep the stage in the new spec). Nothing was changed.")
    old_topics = {c.topic_for(old.name) for c in old.channels}
    for stage in new.stages:
        if stage.name in old_names:
            continue
        known = sorted(p for p in stage.input_partitions if p.rsplit(":", 1)[0] in old_topics)
        if known or not stage.input_partitions:
            what = (f"reads channels the old pipeline already has ({', '.join(known)})" if known
                    else "reads a source other than channels")
            raise UpgradeNotSupportedError(
                f"stage {stage.name} is new in {new_spec} and {what}: a stage added by an upgrade starts on empty "
                "state and reads only new channels, from their beginning (positioning it in an existing channel or "
                "source at the cut is not yet supported). Add it behind a new channel, or start it as a pipeline of "
                "its own. Nothing was changed.")
    dropped = set(drop_stages)
    problems: list[str] = []
    for finding in report.graph:
        if finding.verdict is Verdict.INCOMPATIBLE or (finding.verdict is Verdict.NEEDS_REWRITE and not (
                finding.reason.startswith(f"{finding.subject} is new")
                or finding.reason.startswith(f"{finding.subject} is removed"))):
            problems.append(f"{finding.subject}: {finding.reason}")
    for verdict in report.stages:
        if verdict.stage in dropped or verdict.stage not in old_names:
            continue
        for finding in verdict.findings:
            if finding.verdict is Verdict.COMPATIBLE:
                continue
            if finding.verdict is Verdict.NEEDS_REWRITE and finding.subject.endswith(RESCALE):
                if not verdict.operators:
                    problems.append(
                        f"{finding.subject}: stage {verdict.stage} keeps no state, but its offset log records its old "
                        "shuffle partitions, which Spark would keep; recording the new value over a stateless "
                        f"checkpoint is not yet supported: give stage {verdict.stage} its old value "
                        "(stages[].shuffle_partitions)")
                continue
            problems.append(f"{finding.subject}: {finding.reason}{not_rewritten_fix(finding)}")
    if problems:
        raise UpgradeNotSupportedError(
            f"upgrade of pipeline {old.name} to {new_spec} needs what it does not do (yet): {'; '.join(problems)}. "
            f"Keep running {spec}; 'barrierflow upgrade {spec} --to {new_spec} --dry-run' shows the whole report. "
            "Nothing was changed.")


def _upgrade_stages(old: OpenedPipeline, new: OpenedPipeline, *, checkpoint_id: int | None,
                    spark: SparkSession | None, scratch: str | None, drop_stages: tuple[str, ...],
                    started: float) -> UpgradeResult:
    """The upgrade of a pipeline of several stages (module docstring): a new cut, then its restore."""
    from barrierflow.checkpointing.global_store import GlobalCheckpointStore
    from barrierflow.recovery.pipeline_restore import restore_to_cut
    from barrierflow.state.rescale import RescaleNotSupportedError, rescale_checkpoint

    spec_path, new_spec_path = old.spec_path, new.spec_path
    source_id = _cut_savepoint(old, spec_path, checkpoint_id)
    session = session_for(old, spark)
    report = report_for(spec_path, new_spec_path, checkpoint_id=source_id, spark=session, scratch=scratch)
    refuse_stage_changes(report, old, new, drop_stages)
    old_stages = {s.name: s for s in old.stages}
    verdicts = {v.stage: v for v in report.stages}
    rescale: dict[str, tuple[int, int]] = {}
    for target in new.stages:
        verdict = verdicts.get(target.name)
        if target.name in old_stages and verdict is not None and any(
                f.subject.endswith(RESCALE) for f in verdict.findings):
            was = old_stages[target.name]
            if was.spec.spark.state_store != "rocksdb":
                raise RescaleNotSupportedError(
                    f"stage {was.name} of pipeline {old.name} keeps its state with the {was.spec.spark.state_store} "
                    "state store, which Spark's offline repartition does not rewrite "
                    "(STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER); rescaling it is not yet supported. "
                    f"Keep stage {was.name}'s shuffle partitions as they are. Nothing was changed.")
            rescale[target.name] = (min(o.partitions for o in verdict.operators),
                                    int(shuffle_partitions(target.spec.spark)))
    assert isinstance(new.cuts, GlobalCheckpointStore)
    timings: dict[str, float] = {"materialize": 0.0, "repartition": 0.0}
    added = tuple(s.name for s in new.stages if s.name not in old_stages)
    if not (rescale or added or drop_stages):  # compatible: the source savepoint is restored as it is
        began = time.perf_counter()
        restored = restore_to_cut(new, source_id, chosen=True)
        timings["restore"] = time.perf_counter() - began
        timings["total"] = time.perf_counter() - started
        return UpgradeResult(report, source_id, source_id, {}, restored.attempt, timings,
                             new.cut_location(source_id))
    with JobLease(Path(new.work_dir), new.name, "restore", store=new.objects) as lease:
        for stage in new.stages:
            stage.store.fence = lease.token
        try:
            made = next_cut_id(new.cuts, [*old.stages, *new.stages])
            parts: dict[str, tuple[Stage, Manifest]] = {}
            for target in new.stages:
                if target.name not in old_stages:
                    parts[target.name] = (target, empty_savepoint(target, made))
                    continue
                source = old_stages[target.name].store.get(source_id)
                if target.name not in rescale:
                    parts[target.name] = (target, carry_savepoint(target, source, made))
                    continue
                with rescale_checkpoint(session, pipeline=old.name, stage=target.name,
                                        store=old_stages[target.name].store, manifest=source,
                                        spark_spec=target.spec.spark, partitions=rescale[target.name][1],
                                        scratch=scratch) as copy:
                    timings["materialize"] += copy.materialize_seconds
                    timings["repartition"] += copy.repartition_seconds
                    began = time.perf_counter()
                    parts[target.name] = (target, record_savepoint(
                        target, source, copy.files, copy.directory, copy.batch_id, copy.state_bases,
                        checkpoint_id=made, write=False))
                    timings["record"] = timings.get("record", 0.0) + time.perf_counter() - began
            began = time.perf_counter()
            record_cut(new.cuts, new.name, made, parts)
            timings["record"] = timings.get("record", 0.0) + time.perf_counter() - began
        finally:
            for stage in new.stages:
                stage.store.fence = None
    log.info("pipeline %s: savepoint %d rewritten as savepoint %d (rescaled %s, added %s, dropped %s)", old.name,
             source_id, made, rescale, list(added), list(drop_stages))
    began = time.perf_counter()
    restored = restore_to_cut(new, made, chosen=True)
    timings["restore"] = time.perf_counter() - began
    timings["total"] = time.perf_counter() - started
    return UpgradeResult(report, source_id, made, rescale, restored.attempt, timings, new.cut_location(made),
                         added, drop_stages)


def _continued(record: UpgradeRecord | None, digest: str, old: OpenedPipeline, spec_path: str,
               new_spec_path: str) -> UpgradeRecord | None:
    """The recorded upgrade this command continues (or whose final step it repeats), else None
    (a new upgrade starts). An unfinished upgrade to another NEW_SPEC is refused."""
    if record is None:
        return None
    if not record.step.final:
        if record.new_spec_sha256 != digest:
            raise UpgradeInProgressError(
                f"pipeline {old.name} has an unfinished upgrade to {record.new_spec} (step {record.step.value}, "
                f"from savepoint {record.source_savepoint}), and {new_spec_path} is not that spec as it was: "
                f"continue it first with 'barrierflow upgrade {record.spec} --to {record.new_spec}' (with the "
                "spec it was started with), then upgrade again. Nothing was changed.")
        return record
    if record.new_spec_sha256 != digest:
        return None
    completed = old.stages[0].store.checkpoint_ids()
    if record.step is UpgradeStep.ROLLED_BACK:
        # the same command again, while the old spec still stands where the rollback left it
        return record if completed and completed[-1] == record.source_savepoint else None
    newer_savepoints = [m.checkpoint_id for m in old.stages[0].store.completed()
                        if m.kind is CheckpointKind.SAVEPOINT and m.checkpoint_id > record.savepoint]
    return None if newer_savepoints else record


def _restore(stage: Stage, checkpoint_id: int) -> int:
    """Restore ``stage``'s spec from ``checkpoint_id`` as a new attempt (the caller holds the
    lease); returns the attempt."""
    from barrierflow.recovery.restore import restore_pipeline

    return restore_pipeline(stage.spec, checkpoint_id, store=stage.store, layout=stage.layout,
                            check_running=False).attempt


def _upgrade_stage(old: OpenedPipeline, new: OpenedPipeline, *, checkpoint_id: int | None,
                   spark: SparkSession | None, scratch: str | None, canary_checkpoints: int,
                   started: float) -> UpgradeResult:
    """The upgrade of a single-stage pipeline's steps (module docstring), each recorded before
    or after it as :mod:`barrierflow.ops.upgrade_record` says, continuing from the recorded step."""
    from barrierflow.state.rescale import rescale_checkpoint

    spec_path, new_spec_path = old.spec_path, new.spec_path
    stage, target = old.stages[0], new.stages[0]
    objects = target.store.objects
    digest = spec_digest(new_spec_path)
    record = _continued(read_record(objects), digest, old, str(spec_path), str(new_spec_path))
    session = session_for(old, spark)
    timings: dict[str, float] = {}
    if record is None:
        source = _savepoint(old, str(spec_path), checkpoint_id)
        report = report_for(spec_path, new_spec_path, checkpoint_id=source.checkpoint_id, spark=session,
                            scratch=scratch)
        _refuse_unsupported(report, str(spec_path), str(new_spec_path))
        rescaled = _planned_rescale(report, stage, target, source, old.name, str(new_spec_path))
        record = write_record(objects, UpgradeRecord(
            pipeline=old.name, spec=str(spec_path), new_spec=str(new_spec_path), new_spec_sha256=digest,
            step=UpgradeStep.REPORT, source_savepoint=source.checkpoint_id,
            savepoint=stage.store.highest_used_id() + 1 if rescaled else source.checkpoint_id,
            rescaled={k: list(v) for k, v in rescaled.items()}, canary_checkpoints=canary_checkpoints),
            UpgradeStep.REPORT)
    else:
        report = report_for(spec_path, new_spec_path, checkpoint_id=record.source_savepoint, spark=session,
                            scratch=scratch)
        log.warning("pipeline %s: continuing the upgrade to %s from its recorded step %s", old.name, new_spec_path,
                    record.step.value)
    if record.step in (UpgradeStep.REPORT, UpgradeStep.REWRITTEN, UpgradeStep.CANARY_RUNNING):
        with JobLease(Path(target.layout.work_dir), new.name, "restore", store=objects) as lease:
            target.store.fence = lease.token
            try:
                if record.step is UpgradeStep.REPORT:
                    if record.rescaled and record.savepoint not in target.store.checkpoint_ids():
                        source = stage.store.get(record.source_savepoint)
                        wanted = record.rescaled[stage.name][1]
                        with rescale_checkpoint(session, pipeline=old.name, stage=stage.name, store=stage.store,
                                                manifest=source, spark_spec=target.spec.spark, partitions=wanted,
                                                scratch=scratch) as copy:
                            timings["materialize"] = copy.materialize_seconds
                            timings["repartition"] = copy.repartition_seconds
                            began = time.perf_counter()
                            record_savepoint(target, source, copy.files, copy.directory, copy.batch_id,
                                             copy.state_bases, checkpoint_id=record.savepoint)
                            timings["record"] = time.perf_counter() - began
                        log.info("pipeline %s: savepoint %d rescaled to %d partitions as savepoint %d", old.name,
                                 source.checkpoint_id, wanted, record.savepoint)
                    record = write_record(objects, record, UpgradeStep.REWRITTEN)
                    crash_point("upgrade_after_rewrite", pipeline=old.name, savepoint=record.savepoint)
                # a canary killed before it passed restarts from the savepoint: the restore aborts
                # its pre-committed epochs and abandons its checkpoints (nothing of it was committed)
                record = write_record(objects, record, UpgradeStep.CANARY_RUNNING,
                                      canary_attempts=record.canary_attempts + 1)
                began = time.perf_counter()
                record = write_record(objects, record, UpgradeStep.CANARY_RUNNING,
                                      attempt=_restore(target, record.savepoint))
                timings["restore"] = time.perf_counter() - began
            finally:
                target.store.fence = None
        record = _canary(record, target, str(new_spec_path), session, timings)
    if record.step in (UpgradeStep.ROLLING_BACK, UpgradeStep.ROLLED_BACK):
        _roll_back(record, stage, objects, str(spec_path), str(new_spec_path))
    began = time.perf_counter()
    crash_point("upgrade_before_commit", pipeline=old.name)
    _commit_canary(new_spec_path)
    timings["commit"] = time.perf_counter() - began
    timings["total"] = time.perf_counter() - started
    rescaled = {k: (v[0], v[1]) for k, v in record.rescaled.items()}
    return UpgradeResult(report, record.source_savepoint, record.savepoint, rescaled, record.attempt or 0, timings,
                         new.cut_location(record.savepoint),
                         canary={"checkpoints": record.canary_checkpoints, "verified": record.verified,
                                 "attempts": record.canary_attempts, "step": record.step.value})


def _planned_rescale(report: CompatibilityReport, stage: Stage, target: Stage, source: Manifest, pipeline: str,
                     new_spec_path: str) -> dict[str, tuple[int, int]]:
    """stage -> (old, new) partitions when the change is a rescale, else {} (refusing a rescale
    of a stage without state)."""
    wanted = int(shuffle_partitions(target.spec.spark))
    held = {o.partitions for s in report.stages for o in s.operators}
    if not any(f.subject.endswith(RESCALE) for s in report.stages for f in s.findings):
        return {}
    if not has_state(source):
        raise UpgradeNotSupportedError(
            f"stage {stage.name} of pipeline {pipeline} keeps no state, but its offset log records its old "
            f"spark.shuffle_partitions, which Spark would keep; recording the new value over a stateless checkpoint "
            f"is not yet supported. Keep spark.shuffle_partitions as it is in {new_spec_path}. Nothing was changed.")
    return {stage.name: (min(held) if held else 0, wanted)}


def _canary(record: UpgradeRecord, target: Stage, new_spec_path: str, session: SparkSession,
            timings: dict[str, float]) -> UpgradeRecord:
    """Run the canary of the restored new spec and record its outcome (``canary-passed``, or
    ``rolling-back`` naming the failed check)."""
    from barrierflow.ops.canary import run_canary

    objects = target.store.objects
    if record.canary_checkpoints == 0:
        return write_record(objects, record, UpgradeStep.CANARY_PASSED, verified=[])
    began = time.perf_counter()
    outcome = run_canary(target, new_spec_path, session, record.canary_checkpoints)
    timings["canary"] = time.perf_counter() - began
    if outcome.passed:
        return write_record(objects, record, UpgradeStep.CANARY_PASSED, verified=outcome.verified)
    log.error("pipeline %s: the canary of %s failed, rolling back: %s", record.pipeline, new_spec_path,
              outcome.failure)
    return write_record(objects, record, UpgradeStep.ROLLING_BACK, verified=outcome.verified,
                        failure=outcome.failure)


def _roll_back(record: UpgradeRecord, stage: Stage, objects: Any, spec_path: str, new_spec_path: str) -> None:
    """Restore the old spec from the source savepoint (aborting the canary's pre-committed
    epochs, abandoning its checkpoints and the rewritten savepoint), record ``rolled-back`` and
    raise :class:`UpgradeRolledBackError`."""
    if record.step is UpgradeStep.ROLLING_BACK:
        crash_point("upgrade_mid_rollback", pipeline=record.pipeline)
        with JobLease(Path(stage.layout.work_dir), record.pipeline, "restore", store=objects) as lease:
            stage.store.fence = lease.token
            try:
                attempt = _restore(stage, record.source_savepoint)
            finally:
                stage.store.fence = None
        record = write_record(objects, record, UpgradeStep.ROLLED_BACK, attempt=attempt)
    raise UpgradeRolledBackError(
        f"upgrade of pipeline {record.pipeline} to {new_spec_path} rolled back: its canary failed: {record.failure}. "
        f"{spec_path} is restored from savepoint {record.source_savepoint} as attempt {record.attempt} (the canary's "
        f"pre-committed epochs aborted, nothing of its output committed); continue it with 'barrierflow run "
        f"{spec_path}', or fix {new_spec_path} and run 'barrierflow upgrade {spec_path} --to {new_spec_path}' again "
        "(a changed spec starts a new upgrade from the same savepoint).", record)


def _commit_canary(new_spec_path: str | os.PathLike[str]) -> None:
    """Commit the passed canary's pre-committed epochs: every stage's 2PC sink against the newest
    completed checkpoint (the canary's last), idempotently (a rerun finds them committed)."""
    from barrierflow.recovery.reconcile import apply_reconciliation, plan_reconciliation

    pipeline = open_pipeline(new_spec_path)
    apply_reconciliation(pipeline, plan_reconciliation(pipeline))
