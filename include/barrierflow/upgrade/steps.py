"""The upgrade's controller: it plans, records and decides; the steps do the work.

The modules of :mod:`barrierflow.upgrade`, in the order an upgrade meets them: the compatibility
report (:mod:`~barrierflow.upgrade.report`, all of ``--dry-run``), what the change needs and what
is refused (:mod:`~barrierflow.upgrade.plan`), the record of each step
(:mod:`~barrierflow.upgrade.record`), the savepoint rewrite (:mod:`~barrierflow.upgrade.rewrite`,
with :mod:`~barrierflow.upgrade.cut` and :mod:`~barrierflow.upgrade.rebuild`), the canary
(:mod:`~barrierflow.upgrade.canary`). This module holds the sequence and its decisions.

Without ``dry_run`` (:func:`change_spec`, which returns an :class:`UpgradeResult`), the change is made
from a savepoint S (``checkpoint_id``, default the newest savepoint: a cut whose every stage's
part is a savepoint, which must be the newest completed cut, since output committed after it
would be written again), with the pipeline stopped, under its lease, in steps recorded in the
checkpoint store (:mod:`barrierflow.upgrade.record`). A pipeline of one stage is the general
case with one stage: its cuts are its checkpoints (``pipeline.cuts``), and every step below is
the same for it.

* ``report``: the change is checked (:mod:`barrierflow.upgrade.plan`: ``refuse_unknown`` refuses a
  stage whose verdict is ``unknown`` unless ``assume_compatible``; ``refuse_stage_changes`` refuses
  what the upgrade cannot make). A stage of unknown compatibility taken on the user's word gets a new savepoint
  part: its source part with the new spec's fingerprint recorded, marked as assumed
  (:func:`~barrierflow.upgrade.cut.assumed_savepoint`). A change the report calls
  *compatible*, with no stage added or dropped, needs no rewrite (the new spec restores S);
  otherwise the id R of a new savepoint cut is planned.
* ``rewritten``: (a rewrite) cut R is recorded (:mod:`barrierflow.upgrade.rewrite`), each stage
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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.errors import BarrierflowError, CheckpointNotFoundError, UserInputError
from barrierflow.faults import crash_point
from barrierflow.lease import lease_holder
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.runtime.session import session_for
from barrierflow.state.compatibility import CompatibilityReport
from barrierflow.upgrade.cut import next_cut_id
from barrierflow.upgrade.plan import (
    UpgradeNotSupportedError,
    planned_rebuilds,
    planned_rescale,
    planned_value_changes,
    refuse_stage_changes,
    refuse_uncovered_replays,
    refuse_unknown,
)
from barrierflow.upgrade.record import (
    UpgradeInProgressError,
    UpgradeRecord,
    UpgradeStep,
    read_record,
    spec_digest,
    write_record,
)
from barrierflow.upgrade.report import compatibility_report
from barrierflow.upgrade.rewrite import rewrite_savepoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CANARY_CHECKPOINTS", "UpgradeInProgressError", "UpgradeRefusedError", "UpgradeResult",
           "UpgradeRolledBackError", "change_spec"]

#: How many completed checkpoints of the new spec the canary verifies by default.
DEFAULT_CANARY_CHECKPOINTS = 3


class UpgradeRefusedError(UserInputError):
    """The upgrade cannot start now: the pipeline runs, or it has no savepoint to upgrade from
    (or the one named is not the newest completed checkpoint). Nothing was changed."""


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
        report = compatibility_report(old, new, checkpoint_id=source, spark=session, scratch=scratch)
        assumed = refuse_unknown(report, assume_compatible)
        refuse_stage_changes(report, old, new, drop_stages)
        rescaled = planned_rescale(report, old, new)
        rebuilt = planned_rebuilds(report)
        refuse_uncovered_replays(report, old, new, rebuilt, source)
        values = planned_value_changes(report, old, new, session, scratch)
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
        report = compatibility_report(old, new, checkpoint_id=record.source_savepoint, spark=session,
                                      scratch=scratch)
        log.warning("pipeline %s: continuing the upgrade to %s from its recorded step %s", old.name, new_spec_path,
                    record.step.value)
        values = (planned_value_changes(report, old, new, session, scratch)
                  if record.step is UpgradeStep.REPORT and record.value_columns else {})
    if record.step in (UpgradeStep.REPORT, UpgradeStep.REWRITTEN, UpgradeStep.CANARY_RUNNING):
        if record.step is UpgradeStep.REPORT:
            planned = {v.stage: v.planned for v in report.stages}
            record = rewrite_savepoint(record, old, new, session, scratch, timings, values, planned)
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
