"""Verifying global checkpoints of a multi-stage pipeline: one consistent cut over every stage.

Global checkpoint ``n`` (see :mod:`barrierflow.checkpointing.global_manifest`) passes when
every check below passes::

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
from barrierflow.checkpointing.global_store import GlobalCheckpointStore
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError, SourceError, UserInputError
from barrierflow.spec.models import PipelineSpec
from barrierflow.verification.report import CheckResult, VerificationReport
from barrierflow.verification.runner import verify_checkpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class StagePart:
    """One stage as the global checks see it: its derived single-stage spec and store, the
    input partitions (``topic:p``) of the channels it reads, which of them close a cycle,
    and whether its channels live on the embedded broker (which runs only with its pipeline,
    so offline checks cannot ask it for retained ranges)."""

    name: str
    spec: PipelineSpec
    store: CheckpointStore
    input_partitions: frozenset[str] = frozenset()
    back_edge_partitions: frozenset[str] = frozenset()
    embedded_inputs: bool = False


@dataclass(frozen=True)
class GlobalVerificationReport:
    """Every check of one global checkpoint: the global ones and each stage's report."""

    pipeline: str
    checkpoint_id: int
    checks: list[CheckResult]
    stages: dict[str, VerificationReport] = field(default_factory=dict)

    @property
    def failures(self) -> list[CheckResult]:
        own = [c for c in self.checks if not c.passed]
        return own + [c.model_copy(update={"name": f"{stage}: {c.name}"})
                      for stage, report in self.stages.items() for c in report.failures]

    @property
    def passed(self) -> bool:
        return not self.failures

    def reason(self) -> str:
        return "passed" if self.passed else "; ".join(f"{c.name}: {c.message}" for c in self.failures)

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id, "passed": self.passed,
                "checks": [c.model_dump(mode="json") for c in self.checks],
                "stages": {name: r.model_dump(mode="json") for name, r in self.stages.items()}}


def select_global_ids(store: GlobalCheckpointStore, checkpoint_id: int | None = None,
                      latest: int | None = None) -> list[int]:
    """What ``verify`` looks at: one id (any global checkpoint that was triggered or completed),
    the newest ``latest`` completed ones of the current timeline, or all of those.

    Raises:
        CheckpointNotFoundError: ``checkpoint_id`` was never a global checkpoint.
        UserInputError: ``latest`` is below 1.
    """
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


def verify_global(store: GlobalCheckpointStore, parts: Sequence[StagePart], ids: Sequence[int], *,
                  deep: bool = False, spark: SparkSession | None = None) -> list[GlobalVerificationReport]:
    """Verify global checkpoints ``ids`` of the pipeline ``store`` belongs to (module docstring),
    in that order. A failed check (an unreadable global manifest included) is a result, not an
    error; each stage's result is stored beside the stage's checkpoint.

    Raises:
        StorageError: the store cannot be read.
    """
    starts = {p.name: _embedded_starts(p) for p in parts}
    return [_verify_one(store, parts, cid, deep=deep, spark=spark, starts=starts) for cid in ids]


def _embedded_starts(part: StagePart) -> SourceError | None:
    if not part.embedded_inputs:
        return None  # asked by the stage's own verification
    return SourceError(f"stage {part.name} reads channels on the embedded broker, which runs only with its "
                       "pipeline: their retained ranges are not checked")


def _verify_one(store: GlobalCheckpointStore, parts: Sequence[StagePart], cid: int, *, deep: bool,
                spark: SparkSession | None, starts: dict[str, SourceError | None]) -> GlobalVerificationReport:
    pipeline, key = store.pipeline, global_key(cid, "_metadata")
    try:
        manifest: GlobalManifest = store.get(cid)
    except CheckpointNotFoundError:
        return GlobalVerificationReport(pipeline, cid, [CheckResult.fail(
            "global-manifest", f"global checkpoint {cid} has no global manifest: it never completed", key)])
    except CheckpointCorruptError as exc:
        return GlobalVerificationReport(pipeline, cid, [CheckResult.fail(
            "global-manifest", f"the global manifest does not parse: {exc}", key)])
    if manifest.pipeline != pipeline or manifest.checkpoint_id != cid:
        return GlobalVerificationReport(pipeline, cid, [CheckResult.fail(
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
    return GlobalVerificationReport(pipeline, cid, checks, stages)


def _stage_manifest_check(part: StagePart, cid: int, named_key: str, batch: int) -> CheckResult:
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


def _channel_cut_check(part: StagePart, manifest: Manifest) -> CheckResult:
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
