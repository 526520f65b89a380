"""What a spec change needs of the upgrade, and what the upgrade refuses, decided from its
compatibility report (:mod:`barrierflow.upgrade.report`) before anything is recorded.

The plans: the stages rescaled (:func:`planned_rescale`), whose value columns are rewritten
(:func:`planned_value_changes`) or whose state is rebuilt from its input
(:func:`planned_rebuilds`, each replay's range checked first: :func:`refuse_uncovered_replays`).
The refusals: a stage of unknown compatibility not taken on the user's word
(:func:`refuse_unknown`), and every change the upgrade does not make
(:func:`refuse_stage_changes`). Each raises before anything is written: a refusal changes
nothing. The controller (:mod:`barrierflow.upgrade.steps`) records and makes what they plan.
"""

from __future__ import annotations

import logging
import tempfile
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.pipeline.model import OpenedPipeline
from barrierflow.pipeline.words import words
from barrierflow.spark.session import shuffle_partitions
from barrierflow.state.compatibility import CompatibilityReport, Finding, Verdict, is_rebuild

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.state.value_columns import ValueChange

log = logging.getLogger(__name__)

__all__ = ["RESCALE", "UnknownCompatibilityError", "UpgradeNotSupportedError", "is_value_change",
           "not_rewritten_fix", "planned_rebuilds", "planned_rescale", "planned_value_changes",
           "refuse_stage_changes", "refuse_uncovered_replays", "refuse_unknown"]

#: The subject suffix of the one rewrite an upgrade makes (a rescale).
RESCALE = "shuffle partitions"


class UpgradeNotSupportedError(UserInputError):
    """The change needs what ``upgrade`` does not do yet (or cannot do): the message names it.
    Nothing was changed."""


class UnknownCompatibilityError(UserInputError):
    """A stage's verdict is ``unknown`` (its state has no recorded fingerprint and Spark's state
    metadata cannot decide) and the upgrade was not told ``--assume-compatible``. Nothing was
    changed."""


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
    a stage with state rescaled (RocksDB; :func:`planned_rescale` refuses other state stores),
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


def refuse_uncovered_replays(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline,
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


def planned_value_changes(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline,
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


def planned_rescale(report: CompatibilityReport, old: OpenedPipeline, new: OpenedPipeline
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
