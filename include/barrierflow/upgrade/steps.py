"""The compatibility report of a spec change (``barrierflow upgrade SPEC --to NEW_SPEC --dry-run``).

Reads what a completed cut (the newest, or ``checkpoint_id``: a checkpoint or a savepoint) holds
of every stage of SPEC with the state reader (:mod:`barrierflow.state.reader`: operators, key
and value schemas, partitions, the recorded fingerprint and shuffle partitions), plans every
stage query of NEW_SPEC without starting it
(:func:`~barrierflow.runtime.state_compat.planned_fingerprint`: nothing is read, nothing
connects, nothing is written) and compares the two per stage, operator and graph
(:func:`barrierflow.state.compatibility.compare`). The store and the work dirs are only read.

Without ``dry_run`` (:func:`change_spec`, which returns an :class:`UpgradeResult`), the change is made
from a savepoint S (``checkpoint_id``, default the newest savepoint: a cut whose every stage's
part is a savepoint, which must be the newest completed cut, since output committed after it
would be written again), with the pipeline stopped, under its lease, in steps recorded in the
checkpoint store (:mod:`barrierflow.upgrade.record`). A pipeline of one stage is the general
case with one stage: its cuts are its checkpoints (``pipeline.cuts``), and every step below is
the same for it.

* ``report``: the change is checked (:func:`refuse_unknown` refuses a stage whose verdict is
  ``unknown`` unless ``assume_compatible``; :func:`refuse_stage_changes` refuses what the upgrade
  cannot make). A stage of unknown compatibility taken on the user's word gets a new savepoint
  part: its source part with the new spec's fingerprint recorded, marked as assumed
  (:func:`~barrierflow.upgrade.cut.assumed_savepoint`). A change the report calls
  *compatible*, with no stage added or dropped, needs no rewrite (the new spec restores S);
  otherwise the id R of a new savepoint cut is planned.
* ``rewritten``: (a rewrite) cut R is recorded (:mod:`barrierflow.upgrade.cut`), each stage
  of the new spec given its part: a stage with state whose shuffle partitions changed is
  rescaled (S's part materialized into a scratch directory, Spark's offline repartition rewrites
  that copy, :func:`barrierflow.state.rescale.rescale_checkpoint`: batch V+1, no input, the
  state in the new partition count; RocksDB only), the other stages' parts carried over as they
  are, a stage whose aggregation gains or loses a value column rewritten likewise
  (:func:`barrierflow.state.value_columns.rewrite_value_columns`: batch V+1, every stored
  value converted to the new aggregation buffer, an added column's buffer set to the default
  the new spec declares in ``transformation.state_defaults``; RocksDB, one stateful operator),
  a stage whose stored keys would change meaning rebuilt from its input
  (:func:`barrierflow.upgrade.rebuild.rebuild_state`: the new spec's query replays the input to
  the savepoint's offsets, its state written into a copy of the savepoint as batch V+1; a source
  that replays its input, RocksDB: the generator from its first record, a Kafka source the
  bounded range the new state needs, refused before anything is recorded when the broker no
  longer holds it, :mod:`barrierflow.upgrade.replay_range`), a stage added behind new channels an empty part (it starts
  on empty state at the beginning of its new channels); a stage the new spec removes gets no part, and only when
  ``drop_stages`` names it. The stages fed by channels keep S's barrier positions and attempt
  cutoffs. Where the cut is recorded (the global manifest, or the one stage's own manifest) is
  the cuts' business (``record_cut``). S is never modified (Flink's NO_CLAIM).
* ``canary-running``: R (or S) is restored for the new spec as a new attempt
  (:func:`~barrierflow.recovery.pipeline_restore.restore_to_cut`) and the canary runs
  (:func:`barrierflow.upgrade.canary.run_canary`): ``canary_checkpoints`` completed cuts whose final
  sinks pre-commit but commit nothing (the channels between stages are written as usual), every
  stage's checkpoint of each deep-verified, then (unless ``canary_compare`` is off) the canary's
  output, committed lake plus held epochs, compared with a batch recomputation for every Parquet
  output the comparison applies to (:func:`barrierflow.upgrade.canary.compare_canary_output`);
* ``canary-passed``: the held epochs are committed by reconciliation against the canary's last
  cut; ``barrierflow run NEW_SPEC`` continues;
* ``rolling-back`` -> ``rolled-back``: the canary failed; the old spec is restored to S as a new
  attempt (which aborts the canary's pre-committed epochs, newer than S, abandons its cuts and,
  for several stages, records attempt cutoffs so no stage reads what the canary wrote to the
  channels) and :class:`UpgradeRolledBackError` names the failed check. Nothing of the canary
  was committed, so the old spec's output stays exactly once.

An upgrade killed at any step is continued by the same command from the recorded step: a
rewrite whose cut R was recorded is not made again (one killed before R's record takes the next
free id; the parts it wrote belong to no cut); a killed canary is restarted from R (the restore
aborts its held epochs); a passed canary's commit and a rollback's restore are made again (both
idempotent). While it is unfinished, ``barrierflow run`` refuses. Crash points:
``upgrade_after_rewrite``, ``upgrade_before_commit``, ``upgrade_mid_rollback``
(:mod:`barrierflow.faults`).

Everything else is refused, naming what is not yet supported and what to do
(:class:`UpgradeNotSupportedError`): an incompatible change (a stage with state removed counts
only when not named in ``drop_stages``), a value column added without a declared default (or one
that cannot be mapped: :func:`~barrierflow.state.value_columns.plan_value_change`), a
value-column change (or a rebuild) and a rescale of the same stage in one upgrade, a changed watermark
or a stateful operator added in a stage whose input cannot be replayed, a stage added that reads
an existing channel or a source, a channel changed, the shuffle partitions of a stage without
state, a change of shape (one stage <-> several), and a rescale or value-column change of state
kept by the HDFS-backed state store. A refusal changes nothing.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import CheckpointKind, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import BarrierflowError, CheckpointNotFoundError, UserInputError
from barrierflow.faults import crash_point
from barrierflow.lease import JobLease, lease_holder
from barrierflow.pipeline.model import OpenedPipeline, Stage, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.runtime.session import session_for
from barrierflow.spark.session import shuffle_partitions
from barrierflow.state.compatibility import (
    CompatibilityReport,
    Finding,
    PlannedStage,
    StageState,
    Verdict,
    compare,
    is_rebuild,
)
from barrierflow.state.metadata_compat import PlannedOperatorState, PlannedWindow, StoredWindows, compare_by_metadata
from barrierflow.state.reader import OperatorSchema, StateSnapshot, has_state, open_state
from barrierflow.upgrade.cut import (
    assumed_savepoint,
    carry_savepoint,
    empty_savepoint,
    next_cut_id,
    rescaled_savepoint,
)
from barrierflow.upgrade.rebuild import rebuild_refusal
from barrierflow.upgrade.record import (
    UpgradeInProgressError,
    UpgradeRecord,
    UpgradeStep,
    read_record,
    spec_digest,
    write_record,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.state.value_columns import ValueChange

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CANARY_CHECKPOINTS", "UnknownCompatibilityError", "UpgradeInProgressError",
           "UpgradeNotSupportedError", "UpgradeRefusedError",
           "UpgradeResult", "UpgradeRolledBackError", "change_spec", "report_for"]

#: The subject suffix of the one rewrite an upgrade makes (a rescale).
RESCALE = "shuffle partitions"
#: How many completed checkpoints of the new spec the canary verifies by default.
DEFAULT_CANARY_CHECKPOINTS = 3


class UpgradeRefusedError(UserInputError):
    """The upgrade cannot start now: the pipeline runs, or it has no savepoint to upgrade from
    (or the one named is not the newest completed checkpoint). Nothing was changed."""


class UpgradeNotSupportedError(UserInputError):
    """The change needs what ``upgrade`` does not do yet (or cannot do): the message names it.
    Nothing was changed."""


class UnknownCompatibilityError(UserInputError):
    """A stage's verdict is ``unknown`` (its state has no recorded fingerprint and Spark's state
    metadata cannot decide) and the upgrade was not told ``--assume-compatible``. Nothing was
    changed."""


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
        added: the stages the new spec adds (they start on empty state).
        dropped: the stages dropped with their state (named with ``drop_stages``).
        value_columns: stage -> the value columns its aggregation's rewrite added (with their
            defaults) and dropped.
        rebuilt: the stages whose state was rebuilt from their input (:mod:`barrierflow.upgrade.rebuild`).
        assumed: the stages whose ``unknown`` verdict was taken as compatible (``assume_compatible``);
            the savepoint records their fingerprint, marked as assumed.
        timings: seconds per step of this invocation (``materialize``, ``repartition``,
            ``rewrite`` (a value-column rewrite), ``rebuild`` (replay and transfer), ``record``,
            ``restore``, ``canary`` (with its comparison), ``canary_compare`` (the stream-vs-batch
            comparison alone, when one ran), ``commit``, ``total``).
        location: where the savepoint the new spec was restored from is stored.
        canary: ``checkpoints`` (asked for), ``verified`` (cut ids whose every stage's checkpoint
            passed verification, committed once it passed), ``deep_verification`` (one line: what
            deep verification checked, e.g. ``no expectation suite: deep verification skipped``),
            ``attempts`` (canaries started: more than one after a crash), ``step`` (the recorded
            step, ``canary-passed``) and ``comparison``: the stream-vs-batch comparison of its output
            (:func:`barrierflow.upgrade.canary.comparison_summary`: ``ran``, ``verdict`` - matched,
            differed, not compared or skipped - and per output its range, held epochs, rows
            compared and differences; empty when no canary ran).
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
    value_columns: dict[str, str] = field(default_factory=dict)
    rebuilt: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"report": self.report.as_dict(), "source_savepoint": self.source_savepoint,
                "savepoint": self.savepoint, "location": self.location,
                "rescaled": {s: {"from": a, "to": b} for s, (a, b) in self.rescaled.items()},
                "added": list(self.added), "dropped": list(self.dropped), "value_columns": self.value_columns,
                "rebuilt": list(self.rebuilt), "assumed": list(self.assumed),
                "attempt": self.attempt, "canary": self.canary,
                "timings": {k: round(v, 3) for k, v in self.timings.items()}}


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
    from barrierflow.runtime.state_compat import planned_fingerprint, planned_states

    old, new = open_pipeline(spec_path), open_pipeline(new_spec_path)
    cid = old.completed_cut(checkpoint_id)
    session = session_for(old, spark)
    planned, operators_of = [], {}
    with tempfile.TemporaryDirectory(prefix="barrierflow-upgrade-", dir=scratch) as empty:
        for stage in new.stages:
            fingerprint = planned_fingerprint(session, stage.spec, spec_path=str(new_spec_path),
                                              source_type=stage.source_type, scratch_dir=empty)
            operators_of[stage.name] = planned_states(session, stage.spec, spec_path=str(new_spec_path),
                                                      source_type=stage.source_type, scratch_dir=empty)
            planned.append(PlannedStage(stage.name, fingerprint, shuffle_partitions(stage.spec.spark),
                                        _sources(stage), _sink(stage),
                                        dict(stage.spec.transformation.state_defaults), rebuild_refusal(stage),
                                        stage.spec.spark.state_store))
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
                                     stage.spec.spark.state_store, by_metadata))
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


def _is_savepoint(pipeline: OpenedPipeline, checkpoint_id: int) -> bool:
    """Whether cut ``checkpoint_id`` has a part of every stage of ``pipeline`` (a cut from before
    a stage was added has none of it) and each part is a savepoint."""
    return set(pipeline.cuts.get(checkpoint_id).stages) == {s.name for s in pipeline.stages} and all(
        s.store.get(checkpoint_id).kind is CheckpointKind.SAVEPOINT for s in pipeline.stages)


def _savepoint(pipeline: OpenedPipeline, checkpoint_id: int | None) -> int:
    """The savepoint cut to upgrade from: ``checkpoint_id``, else the newest savepoint
    (:class:`UpgradeRefusedError` when there is none, or it is not the newest completed cut)."""
    completed = pipeline.cuts.completed_ids()
    noun = words(pipeline).cut_noun
    stop = f"'barrierflow stop {pipeline.spec_path} --savepoint'"
    savepoints = [c for c in completed if _is_savepoint(pipeline, c)]
    if checkpoint_id is None:
        if not savepoints:
            raise UpgradeRefusedError(
                f"pipeline {pipeline.name} has no savepoint to upgrade from; run it and stop it with {stop}, then "
                "upgrade. Nothing was changed.")
        chosen = savepoints[-1]
    else:
        if checkpoint_id not in completed:
            raise CheckpointNotFoundError(
                f"pipeline {pipeline.name} has no completed {noun} {checkpoint_id}; its savepoints: "
                f"{savepoints or 'none'} (take one with {stop})")
        if checkpoint_id not in savepoints:
            raise UpgradeRefusedError(
                f"{noun} {checkpoint_id} of pipeline {pipeline.name} is no savepoint; an upgrade starts from a "
                f"savepoint: stop the pipeline with {stop} and upgrade from the savepoint it names. Nothing was "
                "changed.")
        chosen = checkpoint_id
    newer = [c for c in completed if c > chosen]
    if newer:
        raise UpgradeRefusedError(
            f"savepoint {chosen} of pipeline {pipeline.name} is older than its completed {noun}s {newer}, whose "
            f"output is committed: an upgrade from it would write that output again. Run the old spec and stop it "
            f"with {stop}, then upgrade from the new savepoint. Nothing was changed.")
    return chosen


#: What to do instead of a rewrite ``upgrade`` does not make, by what the finding's reason names.
_FIXES = (
    ("watermark changed", "; keep the watermark definition (column and delay) as it is"),
    ("new stateful operator", "; adding a stateful operator to a stage with state is not yet supported: put it "
                              "in a stage of its own behind a new channel (a pipeline of several stages)"),
)


def not_rewritten_fix(finding: Finding) -> str:
    """The fix a refusal adds after a needs-rewrite ``finding`` that upgrade does not make
    (empty when the finding's reason already says it)."""
    return next((fix for what, fix in _FIXES if what in finding.reason), "")


def change_spec(spec_path: str | os.PathLike[str], new_spec_path: str | os.PathLike[str], *,
                checkpoint_id: int | None, spark: SparkSession | None, scratch: str | None,
                drop_stages: tuple[str, ...], canary_checkpoints: int, canary_compare: bool,
                assume_compatible: bool = False) -> UpgradeResult:
    """Make the change from a savepoint (the module docstring; :func:`barrierflow.ops.upgrade.upgrade`
    without ``dry_run``), refusing first what cannot be upgraded as it stands: a change of shape,
    of the pipeline's name, a removed stage not in ``drop_stages``, a running pipeline."""
    started = time.perf_counter()
    old, new = open_pipeline(spec_path), open_pipeline(new_spec_path)
    changed = old.layout_change(new)
    if changed:
        raise UpgradeNotSupportedError(
            f"{changed}: turning a single-stage pipeline into one of several stages (or back) is not yet supported "
            f"(their checkpoints are laid out differently). Keep the shape of {spec_path}. Nothing was changed.")
    if old.name != new.name:
        raise UpgradeNotSupportedError(
            f"{new_spec_path} names pipeline {new.name}, {spec_path} pipeline {old.name}: an upgrade keeps the "
            "pipeline's name (seeding a copy under another name is not yet supported). Nothing was changed.")
    old.refuse_drop_stages(drop_stages)
    holder = lease_holder(Path(old.work_dir), old.objects)
    if holder is not None:
        raise UpgradeRefusedError(
            f"pipeline {old.name} is running (pid {holder.get('pid')} on {holder.get('host')}, "
            f"{holder.get('purpose', 'run')}): stop it first with 'barrierflow stop {spec_path} --savepoint', then "
            "upgrade from the savepoint it names. Nothing was changed.")
    return _upgrade_steps(old, new, checkpoint_id=checkpoint_id, spark=spark, scratch=scratch,
                          drop_stages=drop_stages, canary_checkpoints=canary_checkpoints,
                          canary_compare=canary_compare, started=started, assume_compatible=assume_compatible)


def refuse_unknown(report: CompatibilityReport, assume_compatible: bool) -> list[str]:
    """The stages whose verdict is ``unknown``, to be taken as compatible (``assume_compatible``);
    without it, :class:`UnknownCompatibilityError` naming them, why, and ``--assume-compatible``."""
    unknown = report.unknown_stages
    if not unknown or assume_compatible:
        if unknown:
            log.warning("pipeline %s: stages %s of unknown compatibility taken as compatible on the user's word "
                        "(--assume-compatible)", report.pipeline, unknown)
        return unknown
    why = "; ".join(f"{f.subject}: {f.reason}" for s in report.stages if s.stage in unknown
                    for f in s.findings if f.verdict is Verdict.UNKNOWN)
    raise UnknownCompatibilityError(
        f"upgrade of pipeline {report.pipeline} to {report.new_spec}: the compatibility of stage"
        f"{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} is unknown: {why}. Unknown is not compatible, so "
        f"nothing was changed. If you know the new spec keeps the meaning of that state, proceed on your word with "
        f"'barrierflow upgrade {report.spec} --to {report.new_spec} --assume-compatible': the new savepoint records "
        "the new spec's fingerprint with the state, marked as assumed, and the canary runs as for any upgrade.")


def refuse_stage_changes(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline,
                          drop_stages: tuple[str, ...]) -> None:
    """Raise :class:`UpgradeNotSupportedError` (UserInputError for a ``drop_stages`` name that
    is not a removed stage) unless every finding is one the upgrade makes, whatever the shape:
    a stage with state rescaled (RocksDB; :func:`_planned_rescale` refuses other state stores),
    a stage added behind new channels, a stage named in ``drop_stages`` removed, a channel added
    or removed, a sink changed (compatible)."""
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
        rebuilt = any(is_rebuild(f) for f in verdict.findings)
        for finding in verdict.findings:
            if finding.verdict in (Verdict.COMPATIBLE, Verdict.UNKNOWN):  # unknown: refuse_unknown's
                continue
            if rebuilt and finding.verdict is Verdict.NEEDS_REWRITE and not finding.subject.endswith(RESCALE):
                continue  # the replay computes the new definition's state whatever else changed in it
            if rebuilt and finding.subject.endswith(RESCALE):
                problems.append(
                    f"{finding.subject}: {finding.reason}, and stage {verdict.stage}'s state is rebuilt from its input "
                    "too; a rebuild and a rescale of the same stage in one upgrade is not yet supported: upgrade "
                    "twice, once with the old shuffle partitions, then with the new")
                continue
            if finding.verdict is Verdict.NEEDS_REWRITE and is_value_change(finding):
                if "no default is declared" in finding.reason:
                    problems.append(f"{finding.subject}: {finding.reason}")
                elif any(f.subject.endswith(RESCALE) for f in verdict.findings):
                    problems.append(
                        f"{finding.subject}: {finding.reason}, and stage {verdict.stage}'s shuffle partitions change "
                        "too; a value-column rewrite and a rescale of the same stage in one upgrade is not yet "
                        "supported: upgrade twice, once with the old shuffle partitions and the new value columns, "
                        "then with the new shuffle partitions")
                continue
            if finding.verdict is Verdict.NEEDS_REWRITE and finding.subject.endswith(RESCALE):
                if not verdict.operators:
                    problems.append(
                        f"{finding.subject}: stage {verdict.stage} keeps no state, but its offset log records its old "
                        "shuffle partitions, which Spark would keep; recording the new value over a stateless "
                        f"checkpoint is not yet supported: give stage {verdict.stage} its old value "
                        f"({words(new).shuffle_partitions_field})")
                continue
            problems.append(f"{finding.subject}: {finding.reason}{not_rewritten_fix(finding)}")
    if problems:
        raise UpgradeNotSupportedError(
            f"upgrade of pipeline {old.name} to {new_spec} needs what it does not do (yet): {'; '.join(problems)}. "
            f"Keep running {spec}; 'barrierflow upgrade {spec} --to {new_spec} --dry-run' shows the whole report. "
            "Nothing was changed.")


def planned_rebuilds(report: CompatibilityReport) -> list[str]:
    """The stages whose state the upgrade rebuilds from their input (a finding
    :func:`~barrierflow.state.compatibility.is_rebuild`), in the report's order."""
    return [v.stage for v in report.stages if any(is_rebuild(f) for f in v.findings)]


def _refuse_uncovered_replays(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline,
                              rebuilt: list[str], source: int) -> None:
    """Before anything is recorded: every stage in ``rebuilt`` whose input a broker retains
    (Kafka) can be replayed from savepoint ``source``, else
    :class:`~barrierflow.upgrade.replay_range.RetentionNotCoveredError` names per partition the offset
    needed and the oldest retained, and the alternative (:func:`~barrierflow.upgrade.replay_range.plan_replay`)."""
    from barrierflow.sources.registry import kind_named
    from barrierflow.upgrade.replay_range import plan_replay

    planned = {v.stage: v.planned for v in report.stages}
    old_stages = {s.name: s for s in old.stages}
    for target in new.stages:
        was = old_stages.get(target.name)
        if target.name in rebuilt and was is not None and kind_named(target.source_type).retained_input:
            plan_replay(target, was.store, was.store.get(source), planned[target.name], pipeline=old.name)


def is_value_change(finding: Finding) -> bool:
    """Whether ``finding`` is a value column added to or dropped from an aggregation."""
    return finding.reason.startswith(("value column added:", "value column dropped:", "value columns dropped:"))


def _planned_value_changes(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline,
                           session: SparkSession, scratch: str | None) -> dict[str, ValueChange]:
    """stage -> the :class:`~barrierflow.state.value_columns.ValueChange` of every stage whose
    aggregation gains or loses a value column, its stored buffer mapped onto the new one by
    planning both specs' stage queries (nothing read or started). Raises
    :class:`~barrierflow.state.value_columns.ValueColumnsNotSupportedError` (naming the column and
    the fix) for a change it cannot map or a state store it cannot rewrite."""
    from barrierflow.runtime.state_compat import planned_buffers
    from barrierflow.state.value_columns import ValueColumnsNotSupportedError, plan_value_change

    old_stages = {s.name: s for s in old.stages}
    verdicts = {v.stage: v for v in report.stages}
    changes: dict[str, ValueChange] = {}
    with tempfile.TemporaryDirectory(prefix="barrierflow-upgrade-", dir=scratch) as empty:
        for target in new.stages:
            verdict, was = verdicts.get(target.name), old_stages.get(target.name)
            if (was is None or verdict is None or not any(is_value_change(f) for f in verdict.findings)
                    or any(is_rebuild(f) for f in verdict.findings)):  # a rebuilt stage's values are the replay's
                continue
            where = f"stage {was.name} of pipeline {old.name}"
            if was.spec.spark.state_store != "rocksdb":
                raise ValueColumnsNotSupportedError(
                    f"{where} keeps its state with the {was.spec.spark.state_store} state store, whose stored values "
                    "Spark's state rewriter does not rewrite (RocksDB column families only); changing its "
                    "aggregation's value columns is not yet supported: keep them as they are. Nothing was changed.")
            before = planned_buffers(session, was.spec, spec_path=old.spec_path, source_type=was.source_type,
                                     scratch_dir=empty)
            after = planned_buffers(session, target.spec, spec_path=new.spec_path, source_type=target.source_type,
                                    scratch_dir=empty)
            if len(verdict.operators) != 1 or len(before) != 1 or len(after) != 1:
                raise ValueColumnsNotSupportedError(
                    f"{where} keeps {len(verdict.operators)} stateful operators: a value-column rewrite converts "
                    "every operator's state, so it is made for a stage whose one stateful operator is the "
                    "aggregation; keep its value columns. Nothing was changed.")
            operator = verdict.operators[0]
            changes[target.name] = plan_value_change(
                operator.operator_id, operator.value_schema, before[0], after[0],
                dict(target.spec.transformation.state_defaults), where=f"{where}, operator {operator.operator_id}")
    return changes


def _planned_rescale(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline
                     ) -> dict[str, tuple[int, int]]:
    """stage -> (old, new) shuffle partitions of every stage the change rescales (its state
    rewritten by Spark's offline repartition), refusing a rescale of state the HDFS-backed state
    store keeps (:class:`~barrierflow.state.rescale.RescaleNotSupportedError`); a rescale of a
    stage without state was refused by :func:`refuse_stage_changes`."""
    from barrierflow.state.rescale import RescaleNotSupportedError

    old_stages = {s.name: s for s in old.stages}
    verdicts = {v.stage: v for v in report.stages}
    rescale: dict[str, tuple[int, int]] = {}
    for target in new.stages:
        verdict, was = verdicts.get(target.name), old_stages.get(target.name)
        if was is None or verdict is None or not any(f.subject.endswith(RESCALE) for f in verdict.findings):
            continue
        if was.spec.spark.state_store != "rocksdb":
            raise RescaleNotSupportedError(
                f"stage {was.name} of pipeline {old.name} keeps its state with the {was.spec.spark.state_store} "
                "state store, which Spark's offline repartition does not rewrite "
                "(STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER); rescaling it is not yet supported. "
                f"Keep stage {was.name}'s shuffle partitions as they are. Nothing was changed.")
        rescale[target.name] = (min(o.partitions for o in verdict.operators),
                                int(shuffle_partitions(target.spec.spark)))
    return rescale


def _continued(record: UpgradeRecord | None, digest: str, old: OpenedPipeline, new: OpenedPipeline
               ) -> UpgradeRecord | None:
    """The recorded upgrade this command continues (or whose final step it repeats), else None
    (a new upgrade starts). An unfinished upgrade to another NEW_SPEC is refused."""
    if record is None:
        return None
    if not record.step.final:
        if record.new_spec_sha256 != digest:
            raise UpgradeInProgressError(
                f"pipeline {old.name} has an unfinished upgrade to {record.new_spec} (step {record.step.value}, "
                f"from savepoint {record.source_savepoint}), and {new.spec_path} is not that spec as it was: "
                f"continue it first with 'barrierflow upgrade {record.spec} --to {record.new_spec}' (with the "
                "spec it was started with), then upgrade again. Nothing was changed.")
        return record
    if record.new_spec_sha256 != digest or Path(record.spec).resolve() != Path(old.spec_path).resolve():
        return None
    completed = old.cuts.completed_ids()
    if record.step is UpgradeStep.ROLLED_BACK:
        # the same command again, while the old spec still stands where the rollback left it
        return record if completed and completed[-1] == record.source_savepoint else None
    newer = [c for c in new.cuts.completed_ids() if c > record.savepoint and _is_savepoint(new, c)]
    return None if newer else record


def _upgrade_steps(old: OpenedPipeline, new: OpenedPipeline, *, checkpoint_id: int | None,
                   spark: SparkSession | None, scratch: str | None, drop_stages: tuple[str, ...],
                   canary_checkpoints: int, canary_compare: bool, started: float,
                   assume_compatible: bool = False) -> UpgradeResult:
    """The upgrade's steps (module docstring), each recorded before or after it as
    :mod:`barrierflow.upgrade.record` says, continuing from the recorded step."""
    from barrierflow.recovery.pipeline_restore import restore_to_cut

    spec_path, new_spec_path = old.spec_path, new.spec_path
    objects = new.objects
    digest = spec_digest(new_spec_path)
    record = _continued(read_record(objects), digest, old, new)
    session = session_for(old, spark)
    timings: dict[str, float] = {}
    if record is None:
        source = _savepoint(old, checkpoint_id)
        report = report_for(spec_path, new_spec_path, checkpoint_id=source, spark=session, scratch=scratch)
        assumed = refuse_unknown(report, assume_compatible)
        refuse_stage_changes(report, old, new, drop_stages)
        rescaled = _planned_rescale(report, old, new)
        rebuilt = planned_rebuilds(report)
        _refuse_uncovered_replays(report, old, new, rebuilt, source)
        values = _planned_value_changes(report, old, new, session, scratch)
        added = [s.name for s in new.stages if s.name not in {o.name for o in old.stages}]
        rewrite = bool(rescaled or added or drop_stages or values or rebuilt or assumed)
        both = sorted(set(assumed) & (set(rescaled) | set(values) | set(rebuilt)))
        if both:
            raise UpgradeNotSupportedError(
                f"stage {', '.join(both)} of pipeline {old.name}: its compatibility is assumed (--assume-compatible) "
                "and its state is rewritten too; both in one upgrade is not yet supported: upgrade twice, first to "
                "a spec that changes nothing else (recording the assumption), then to the new one. Nothing was "
                "changed.")
        record = write_record(objects, UpgradeRecord(
            pipeline=old.name, spec=spec_path, new_spec=new_spec_path, new_spec_sha256=digest,
            step=UpgradeStep.REPORT, source_savepoint=source,
            savepoint=next_cut_id(new.cuts, [*old.stages, *new.stages]) if rewrite else source,
            rescaled={k: list(v) for k, v in rescaled.items()}, added=added, dropped=list(drop_stages),
            value_columns={k: v.describe() for k, v in values.items()}, rebuilt=rebuilt, assumed=assumed,
            canary_checkpoints=canary_checkpoints, canary_compare=canary_compare), UpgradeStep.REPORT)
    else:
        report = report_for(spec_path, new_spec_path, checkpoint_id=record.source_savepoint, spark=session,
                            scratch=scratch)
        log.warning("pipeline %s: continuing the upgrade to %s from its recorded step %s", old.name, new_spec_path,
                    record.step.value)
        values = (_planned_value_changes(report, old, new, session, scratch)
                  if record.step is UpgradeStep.REPORT and record.value_columns else {})
    if record.step in (UpgradeStep.REPORT, UpgradeStep.REWRITTEN, UpgradeStep.CANARY_RUNNING):
        if record.step is UpgradeStep.REPORT:
            planned = {v.stage: v.planned for v in report.stages}
            record = _rewrite(record, old, new, session, scratch, timings, values, planned)
            crash_point("upgrade_after_rewrite", pipeline=old.name, savepoint=record.savepoint)
        # a canary killed before it passed restarts from the savepoint: the restore aborts its
        # pre-committed epochs and abandons its cuts (nothing of it was committed)
        record = write_record(objects, record, UpgradeStep.CANARY_RUNNING, canary_attempts=record.canary_attempts + 1)
        began = time.perf_counter()
        restored = restore_to_cut(new, record.savepoint, chosen=True)
        record = write_record(objects, record, UpgradeStep.CANARY_RUNNING, attempt=restored.attempt)
        timings["restore"] = time.perf_counter() - began
        record = _canary(record, new, session, timings)
    if record.step in (UpgradeStep.ROLLING_BACK, UpgradeStep.ROLLED_BACK):
        _roll_back(record, old, new)
    began = time.perf_counter()
    crash_point("upgrade_before_commit", pipeline=old.name)
    _commit_canary(new)
    timings["commit"] = time.perf_counter() - began
    timings["total"] = time.perf_counter() - started
    rescaled = {k: (v[0], v[1]) for k, v in record.rescaled.items()}
    return UpgradeResult(report, record.source_savepoint, record.savepoint, rescaled, record.attempt or 0, timings,
                         new.cut_location(record.savepoint), tuple(record.added), tuple(record.dropped),
                         canary={"checkpoints": record.canary_checkpoints, "verified": record.verified,
                                 "deep_verification": record.deep_verification,
                                 "attempts": record.canary_attempts, "step": record.step.value,
                                 "comparison": record.comparison},
                         value_columns=dict(record.value_columns), rebuilt=tuple(record.rebuilt),
                         assumed=tuple(record.assumed))


def _rewrite(record: UpgradeRecord, old: OpenedPipeline, new: OpenedPipeline, session: SparkSession,
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


def _canary(record: UpgradeRecord, new: OpenedPipeline, session: SparkSession,
            timings: dict[str, float]) -> UpgradeRecord:
    """Run the canary of the restored new spec and record its outcome (``canary-passed``, or
    ``rolling-back`` naming the failed check)."""
    from barrierflow.upgrade.canary import comparison_summary, run_canary

    if record.canary_checkpoints == 0:
        return write_record(new.objects, record, UpgradeStep.CANARY_PASSED, verified=[], comparison={})
    began = time.perf_counter()
    outcome = run_canary(new, session, record.canary_checkpoints, compare=record.canary_compare,
                         rebuilt=frozenset(record.rebuilt))
    timings["canary"] = time.perf_counter() - began
    compared = sum(c.seconds for c in outcome.comparisons)
    if compared:
        timings["canary_compare"] = compared
    comparison = (comparison_summary(outcome.comparisons, skipped=not record.canary_compare)
                  if outcome.comparisons or not record.canary_compare else {})
    if outcome.passed:
        return write_record(new.objects, record, UpgradeStep.CANARY_PASSED, verified=outcome.verified,
                            comparison=comparison, deep_verification=outcome.deep_verification)
    log.error("pipeline %s: the canary of %s failed, rolling back: %s", record.pipeline, new.spec_path,
              outcome.failure)
    return write_record(new.objects, record, UpgradeStep.ROLLING_BACK, verified=outcome.verified,
                        failure=outcome.failure, comparison=comparison, deep_verification=outcome.deep_verification)


def _roll_back(record: UpgradeRecord, old: OpenedPipeline, new: OpenedPipeline) -> None:
    """Restore the old spec to the source savepoint cut (aborting the canary's pre-committed
    epochs, abandoning its cuts and the rewritten savepoint; for several stages the attempt
    cutoffs make the stages skip what the canary wrote to the channels), record
    ``rolled-back`` and raise :class:`UpgradeRolledBackError`."""
    from barrierflow.recovery.pipeline_restore import restore_to_cut

    if record.step is UpgradeStep.ROLLING_BACK:
        crash_point("upgrade_mid_rollback", pipeline=record.pipeline)
        attempt = restore_to_cut(old, record.source_savepoint, chosen=True).attempt
        record = write_record(old.objects, record, UpgradeStep.ROLLED_BACK, attempt=attempt)
    spec_path, new_spec_path = old.spec_path, new.spec_path
    raise UpgradeRolledBackError(
        f"upgrade of pipeline {record.pipeline} to {new_spec_path} rolled back: its canary failed: {record.failure}. "
        f"{spec_path} is restored from savepoint {record.source_savepoint} as attempt {record.attempt} (the canary's "
        f"pre-committed epochs aborted, nothing of its output committed); continue it with 'barrierflow run "
        f"{spec_path}', or fix {new_spec_path} and run 'barrierflow upgrade {spec_path} --to {new_spec_path}' again "
        "(a changed spec starts a new upgrade from the same savepoint).", record)


def _commit_canary(pipeline: OpenedPipeline) -> None:
    """Commit the passed canary's pre-committed epochs: every stage's 2PC sink against the newest
    completed cut (the canary's last), idempotently (a rerun finds them committed)."""
    from barrierflow.recovery.reconcile import apply_reconciliation, plan_reconciliation

    apply_reconciliation(pipeline, plan_reconciliation(pipeline))
