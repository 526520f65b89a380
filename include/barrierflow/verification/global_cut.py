"""Verifying a pipeline's cuts (global checkpoints): one consistent cut over every stage.

The one verification of a cut, whatever the pipeline's shape. A pipeline of one stage has no
cut checks: its cut ``n`` is its checkpoint ``n``, verified by the stage's own structural
(and, asked for, deep) checks (:mod:`barrierflow.verification.runner`). A cut ``n`` of several
stages (see :mod:`barrierflow.checkpointing.global_manifest`) passes when every check below
passes::

    global-manifest     global/chk-<n>/_metadata.json parses, belongs to this pipeline and has id n
    stages-complete     it names exactly the spec's stages
    <stage>: manifest   the stage manifest it names exists, parses, has id n and the barrier batch
                        the global manifest recorded
    <stage>: ...        the stage checkpoint's own structural checks (verification.structural),
                        stored beside it as chk-<n>/_verification.json of the stage's store
    <stage>: channel-cut
                        a stage fed by channels recorded the position of barrier n in every
                        partition of every input channel (the cut crosses each channel once),
                        and its channel state lies within those partitions, back-edge ranges
                        marked as such

A damaged stage checkpoint fails its global checkpoint; a global checkpoint never passes on
fewer stages than the spec has. The stage checks are those of a single-stage pipeline, so a
stage's verdicts are the ones ``restore --latest-valid`` and retention read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.global_manifest import GlobalManifest, global_key, stage_prefix
from barrierflow.checkpointing.global_store import GlobalCheckpointStore, SingleStageCuts
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import manifest_key
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError, SourceError, UserInputError
from barrierflow.pipeline.model import Stage
from barrierflow.verification.report import CheckResult, VerificationReport
from barrierflow.verification.runner import select_ids, verify_checkpoints
from barrierflow.verification.tables import table_checks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class CutVerificationReport:
    """Every check of one cut: the cut's own checks and each stage's report.

    ``stage_checkpoint``: the cut is the only stage's own checkpoint, whose only cut checks are
    its tables' (``table <stage>/<sink>``, none without tables); with them, its one stage report
    is the verdict, and failures keep the stage's check names."""

    pipeline: str
    checkpoint_id: int
    checks: list[CheckResult]
    stages: dict[str, VerificationReport] = field(default_factory=dict)
    stage_checkpoint: bool = False

    @property
    def failures(self) -> list[CheckResult]:
        own = [c for c in self.checks if not c.passed]
        if self.stage_checkpoint:
            return own + [c for report in self.stages.values() for c in report.failures]
        return own + [c.model_copy(update={"name": f"{stage}: {c.name}"})
                      for stage, report in self.stages.items() for c in report.failures]

    @property
    def passed(self) -> bool:
        return not self.failures

    def reason(self) -> str:
        return "passed" if self.passed else "; ".join(f"{c.name}: {c.message}" for c in self.failures)

    @property
    def deep(self) -> bool:
        """Whether every stage's checks were deep (state read, expectations run)."""
        return bool(self.stages) and all(r.deep for r in self.stages.values())

    def deep_verdict(self) -> str:
        """One line of what deep verification found over every stage ("" when not deep): as
        :meth:`VerificationReport.deep_verdict`, a stage without a suite named (several stages)."""
        if not self.deep:
            return ""
        if not self.passed:
            return "failed deep verification"
        skipped = {name: r.suite_skipped for name, r in self.stages.items() if r.suite_skipped}
        if not skipped:
            return "passed deep verification"
        if self.stage_checkpoint:
            return next(iter(skipped.values()))
        return "; ".join(f"stage {name}: {why}" for name, why in skipped.items())

    @property
    def check_count(self) -> int:
        """How many checks ran: the cut's own and every stage's."""
        return len(self.checks) + sum(len(r.checks) for r in self.stages.values())

    @property
    def passed_count(self) -> int:
        """How many of them passed."""
        return sum(c.passed for c in self.checks) + sum(c.passed for r in self.stages.values() for c in r.checks)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``verify``, one shape for every pipeline: ``pipeline``, ``checkpoint_id``,
        ``passed``, ``deep``, ``deep_verification`` (:meth:`deep_verdict`, None when not deep),
        ``checks`` (the cut's own; for one stage only its tables', ``table <stage>/<sink>``) and ``stages``:
        each stage's report as it is stored (``chk-<n>/_verification.json``)."""
        return {"pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id, "passed": self.passed,
                "deep": self.deep, "deep_verification": self.deep_verdict() or None,
                "checks": [c.model_dump(mode="json") for c in self.checks],
                "stages": {name: r.model_dump(mode="json") for name, r in self.stages.items()}}


def select_cut_ids(cuts: GlobalCheckpointStore | SingleStageCuts, checkpoint_id: int | None = None,
                   latest: int | None = None) -> list[int]:
    """What ``verify`` looks at: one id (any cut that was triggered or completed), the newest
    ``latest`` completed ones of the current timeline, or all of those. One stage: its
    candidates (:func:`barrierflow.verification.runner.select_ids`: damaged checkpoints too).

    Raises:
        CheckpointNotFoundError: ``checkpoint_id`` was never a cut.
        UserInputError: ``latest`` is below 1.
    """
    if isinstance(cuts, SingleStageCuts):
        return select_ids(cuts.store, checkpoint_id, latest)
    store = cuts
    if checkpoint_id is not None:
        if not store.exists(checkpoint_id):
            raise CheckpointNotFoundError(
                f"global checkpoint {checkpoint_id} does not exist in {store.uri}; list them with "
                "'barrierflow checkpoints list SPEC'")
        return [checkpoint_id]
    completed = store.completed_ids()
    if latest is not None:
        if latest < 1:
            raise UserInputError("--latest must be a positive whole number")
        return completed[-latest:]
    return completed


def verify_cuts(cuts: GlobalCheckpointStore | SingleStageCuts, parts: Sequence[Stage], ids: Sequence[int], *,
                deep: bool = False, spark: SparkSession | None = None) -> list[CutVerificationReport]:
    """Verify cuts ``ids`` of the pipeline ``cuts`` belongs to (module docstring), in that
    order; ``parts`` are its stages. A failed check (an unreadable global manifest included) is
    a result, not an error; each stage's result is stored beside the stage's checkpoint; the
    cut's lakehouse tables are checked at the versions its cut records name
    (:mod:`barrierflow.verification.tables`, checks ``table <stage>/<sink>``). One
    stage: its structural checks only (a checkpoint deleted by retention meanwhile is left out,
    as :func:`barrierflow.verification.runner.verify_checkpoints` leaves it out).

    Raises:
        StorageError: the store cannot be read.
    """
    if isinstance(cuts, SingleStageCuts):
        [stage] = parts
        return [CutVerificationReport(stage.spec.name, r.checkpoint_id, table_checks(parts, r.checkpoint_id),
                                      {stage.name: r}, stage_checkpoint=True)
                for r in verify_checkpoints(stage.spec, stage.store, list(ids), deep=deep, spark=spark)]
    store = cuts
    starts = {p.name: unreachable_inputs(p) for p in parts}
    reports = [_verify_one(store, parts, cid, deep=deep, spark=spark, starts=starts) for cid in ids]
    for report in reports:
        if any(c.name == "global-manifest" and c.passed for c in report.checks):
            report.checks.extend(table_checks(parts, report.checkpoint_id))
    return reports


def unreachable_inputs(part: Stage) -> SourceError | None:
    """Why offline checks cannot ask ``part``'s inputs for their retained ranges (its channels
    live on the embedded broker, which runs only with its pipeline), or None (ask them)."""
    if not part.embedded_inputs:
        return None  # asked by the stage's own verification
    return SourceError(f"stage {part.name} reads channels on the embedded broker, which runs only with its "
                       "pipeline: their retained ranges are not checked")


def _verify_one(store: GlobalCheckpointStore, parts: Sequence[Stage], cid: int, *, deep: bool,
                spark: SparkSession | None, starts: dict[str, SourceError | None]) -> CutVerificationReport:
    pipeline, key = store.pipeline, global_key(cid, "_metadata")
    try:
        manifest: GlobalManifest = store.get(cid)
    except CheckpointNotFoundError:
        return CutVerificationReport(pipeline, cid, [CheckResult.fail(
            "global-manifest", f"global checkpoint {cid} has no global manifest: it never completed", key)])
    except CheckpointCorruptError as exc:
        return CutVerificationReport(pipeline, cid, [CheckResult.fail(
            "global-manifest", f"the global manifest does not parse: {exc}", key)])
    if manifest.pipeline != pipeline or manifest.checkpoint_id != cid:
        return CutVerificationReport(pipeline, cid, [CheckResult.fail(
            "global-manifest", f"the global manifest is of pipeline {manifest.pipeline!r}, checkpoint "
                               f"{manifest.checkpoint_id}, expected {pipeline!r}, {cid}", key)])
    checks = [CheckResult.ok("global-manifest", f"complete since {manifest.completion_time.isoformat()}", key)]
    expected, named = {p.name for p in parts}, set(manifest.stages)
    if named != expected:
        checks.append(CheckResult.fail(
            "stages-complete", f"names stages {sorted(named)}, the spec has {sorted(expected)} (missing: "
                               f"{sorted(expected - named)}, unknown: {sorted(named - expected)})", key))
    else:
        checks.append(CheckResult.ok("stages-complete", f"all {len(expected)} stages: {sorted(expected)}"))
    stages: dict[str, VerificationReport] = {}
    for part in parts:
        if part.name not in manifest.stages:
            continue
        snapshot = manifest.stages[part.name]
        own = _stage_manifest_check(part, cid, snapshot.manifest, snapshot.spark_batch_id)
        checks.append(own)
        if not own.passed:
            continue
        report = verify_checkpoints(part.spec, part.store, [cid], deep=deep, spark=spark,
                                    starts=starts[part.name])
        if report:
            stages[part.name] = report[0]
            if report[0].passed and part.input_partitions:
                checks.append(_channel_cut_check(part, part.store.get(cid)))
    return CutVerificationReport(pipeline, cid, checks, stages)


def _stage_manifest_check(part: Stage, cid: int, named_key: str, batch: int) -> CheckResult:
    name = f"{part.name}: manifest"
    expected_key = stage_prefix(part.name) + manifest_key(cid)
    if named_key != expected_key:
        return CheckResult.fail(name, f"the global manifest names {named_key!r}, expected {expected_key!r}")
    try:
        stage_manifest: Manifest = part.store.get(cid)
    except CheckpointNotFoundError:
        return CheckResult.fail(name, f"stage {part.name}'s checkpoint {cid} is missing from the store "
                                      "(deleted or never written): the cut is incomplete", named_key)
    except Exception as exc:  # CheckpointCorruptError, unreadable store objects
        return CheckResult.fail(name, f"stage {part.name}'s manifest {cid} is unreadable: {exc}", named_key)
    if stage_manifest.spark_batch_id != batch:
        return CheckResult.fail(name, f"stage {part.name}'s manifest has barrier batch "
                                      f"{stage_manifest.spark_batch_id}, the global manifest recorded {batch}",
                                named_key)
    return CheckResult.ok(name, f"present, barrier batch {batch}", named_key)


def _channel_cut_check(part: Stage, manifest: Manifest) -> CheckResult:
    name = f"{part.name}: channel-cut"
    alignment = manifest.alignment
    if alignment is None:
        return CheckResult.fail(name, f"stage {part.name} reads channels but its checkpoint {manifest.checkpoint_id} "
                                      "records no barrier positions")
    missing = sorted(part.input_partitions - set(alignment.barrier_offsets))
    if missing:
        return CheckResult.fail(name, f"no barrier position in input partitions {missing}: the cut does not cross "
                                      "every channel")
    problems = []
    for entry in alignment.channel_state:
        if entry.partition not in part.input_partitions:
            problems.append(f"channel state of unknown partition {entry.partition}")
        elif entry.end > alignment.barrier_offsets[entry.partition] + 1 or entry.start > entry.end:
            problems.append(f"channel state {entry.partition} [{entry.start}, {entry.end}) beyond its barrier at "
                            f"{alignment.barrier_offsets[entry.partition]}")
        elif entry.back_edge != (entry.partition in part.back_edge_partitions):
            problems.append(f"channel state {entry.partition} is {'' if entry.back_edge else 'not '}marked as a "
                            "back-edge range, but the graph says otherwise")
    if problems:
        return CheckResult.fail(name, "; ".join(problems))
    return CheckResult.ok(name, f"{alignment.mode}: barrier positions in all {len(part.input_partitions)} input "
                                f"partitions, {alignment.channel_state_records} channel-state records")


def refuse_unverifiable_cut(cuts: GlobalCheckpointStore | SingleStageCuts, parts: Sequence[Stage],
                            checkpoint_id: int, purpose: str) -> None:
    """Raise CheckpointCorruptError when cut ``checkpoint_id`` fails the checks of the cut as
    one (several stages: :func:`verify_cuts`), naming the stage and check, ``purpose`` saying
    what it cannot become. A cut of one stage has no cut checks: its stage's own checks are
    the caller's (a savepoint's promotion makes them)."""
    if isinstance(cuts, SingleStageCuts):
        return
    report = verify_cuts(cuts, parts, [checkpoint_id])[0]
    if not report.passed:
        raise CheckpointCorruptError(f"global checkpoint {checkpoint_id} cannot {purpose}: it fails "
                                     f"verification ({report.reason()})")
