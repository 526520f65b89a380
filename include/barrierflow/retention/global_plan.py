"""Retention by cuts: a pipeline's cuts (global checkpoints) are kept or deleted whole.

:func:`retain_cuts` is one run. A pipeline of one stage has no global records: its cuts are its
checkpoints, so the run is the stage's own (retention/plan.py: kept, savepoints, verified ones
preferred, incomplete ones, shared files, ledger entries, local files). For several stages::

    savepoints   global checkpoints n any of whose stage checkpoints n is a savepoint (a
                 savepoint interrupted half-way keeps every stage; ``savepoint`` again finishes it)
    kept         the completed global checkpoints of the current timeline the policy keeps
                 (checkpoint.retained; verification.prefer_verified, where a global checkpoint
                 counts as verified when every stage's stored result passed and as failed when
                 one failed or a stage's checkpoint is gone: retention/policy.py)
    delete       global/chk-<n>/ of the other completed global checkpoints (abandoned ones
                 included), the global manifest first, then of failed and never-finished ones
                 older than the newest completed one: so no global manifest is ever left naming
                 a stage checkpoint that is gone
    per stage    the single-stage run (retention/plan.py) with its kept checkpoints forced to
                 the kept and savepoint global ids plus every id above the newest completed
                 global checkpoint (a stage snapshot of a global checkpoint still in flight);
                 it deletes the rest of the stage's checkpoints, shared files, ledger entries
                 and local files as for one stage

A run started by the running pipeline itself (``barrierflow run``: retention/run_retention.py)
knows which global checkpoints are still in flight, also older ones than the newest completed
(``checkpoint.max_concurrent`` above 1): with ``in_flight_from``, every id from that one up that
has not completed is kept as in flight, its global records and every stage's part, instead of
only those above the newest completed one.

A dry run only plans, and reports what a real run started then would delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from barrierflow.checkpointing.global_store import GlobalCheckpointStore, SingleStageCuts
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.checkpointing.store import manifest_key
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError
from barrierflow.pipeline.model import Stage
from barrierflow.retention.plan import RetainedIds, RetentionPlan, policy_of, retain
from barrierflow.retention.policy import RetentionPolicy, choose_retained
from barrierflow.storage import ObjectInfo
from barrierflow.verification.report import load_report


@dataclass
class CutRetentionPlan(RetainedIds):
    """What one run deleted (or, dry, would delete): global records and each stage's plan.

    A pipeline of one stage has no global records (``keys`` stays empty): its cuts'
    ``checkpoints`` and ``incomplete`` are its stage plan's."""

    keys: list[ObjectInfo] = field(default_factory=list)
    stages: dict[str, RetentionPlan] = field(default_factory=dict)

    @property
    def bytes_freed(self) -> int:
        return sum(i.size for i in self.keys) + sum(p.bytes_freed for p in self.stages.values())

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``retain``, one shape for every pipeline: the cuts' part (``kept``,
        ``savepoints``, ``deleted.checkpoints`` and ``deleted.incomplete``: cut ids;
        ``deleted.global_records``: how many ``global/`` objects, none for one stage),
        ``bytes_freed`` (everything) and each stage's plan under ``stages`` (its checkpoints,
        shared files, ledger entries, reservations, bytes, local files)."""
        return {**self.ids_dict(global_records=len(self.keys)),
                "bytes_freed": self.bytes_freed,
                "stages": {name: plan.as_dict() for name, plan in self.stages.items()}}


def _stage_kind(stage: Stage, cid: int) -> CheckpointKind | None:
    try:
        return stage.store.get(cid).kind
    except (CheckpointNotFoundError, CheckpointCorruptError):
        return None


def _verdict(stages: Sequence[Stage], cid: int) -> bool | None:
    """Failed when a stage's checkpoint is gone or its stored result failed; verified when
    every stage's passed; else never verified."""
    if not all(s.store.objects.exists(manifest_key(cid)) for s in stages):
        return False
    results = [load_report(s.store.objects, cid) for s in stages]
    if any(r is not None and not r.passed for r in results):
        return False
    return True if all(r is not None for r in results) else None


def plan_cuts(store: GlobalCheckpointStore, stages: Sequence[Stage], *, retained: int, policy: RetentionPolicy,
              in_flight_from: int | None = None) -> tuple[CutRetentionPlan, set[int], int]:
    """The global part of a run (reads only), the ids every stage keeps, and the id from which
    on every stage keeps every checkpoint (in flight: ``in_flight_from``, at most the newest
    completed id + 1; see the module docstring)."""
    dirs = store.objects_by_id()
    completed = sorted(c for c, infos in dirs.items() if any(store.is_manifest_key(i.key) for i in infos))
    abandoned = set(store.abandoned())
    savepoints = sorted(c for c in completed
                        if any(_stage_kind(s, c) is CheckpointKind.SAVEPOINT for s in stages))
    timeline = [c for c in completed if c not in abandoned and c not in savepoints]
    verdicts = {c: _verdict(stages, c) for c in timeline} if policy is RetentionPolicy.PREFER_VERIFIED else {}
    kept = choose_retained(timeline, retained, policy, verdicts)
    plan = CutRetentionPlan(store.pipeline, policy, True, sorted(kept), savepoints)
    newest = max(completed, default=-1)
    floor = newest + 1 if in_flight_from is None else min(in_flight_from, newest + 1)
    plan.checkpoints = [c for c in completed if c not in kept and c not in savepoints]
    plan.incomplete = [c for c in sorted(dirs) if c not in completed and c < min(newest, floor)]

    def ordered(cid: int) -> list[ObjectInfo]:  # the global manifest first
        return sorted(dirs[cid], key=lambda i: (not store.is_manifest_key(i.key), i.key))

    plan.keys = [i for c in plan.checkpoints + plan.incomplete for i in ordered(c)]
    in_flight = {c for c in dirs if c >= floor and c not in completed}
    return plan, kept | set(savepoints) | in_flight | {c for c in dirs if c > newest}, floor


def retain_cuts(cuts: GlobalCheckpointStore | SingleStageCuts, stages: Sequence[Stage], *,
                retained: int, dry_run: bool = False, in_flight_from: int | None = None,
                run_id: str | None = None) -> CutRetentionPlan:
    """One retention run over a pipeline's cuts (module docstring). ``cuts`` holds the
    pipeline's global records (and, as its root, the attempt and abandoned ids) or, for one
    stage, derives them from its store; ``retained`` is the spec's ``checkpoint.retained``; the
    policy is the stages' (they share the spec's verification). ``in_flight_from``: several
    stages, the lowest id of a global checkpoint that may still be in flight (module docstring);
    one stage needs none (a checkpoint in flight has nothing under its ``chk-<n>/`` and its
    shared files are reserved). ``run_id``: the id each stage's run is announced under (see
    :func:`barrierflow.retention.plan.retain`).

    Raises:
        StorageError: the store cannot be read or written.
        LocalRetentionError: a stage's planned local files could not be deleted.
    """
    policy = policy_of(stages[0].spec) if stages else RetentionPolicy.NEWEST
    if isinstance(cuts, SingleStageCuts):
        [stage] = stages
        own = retain(stage.spec, stage.store, dry_run=dry_run, layout=stage.layout, run_id=run_id)
        return CutRetentionPlan(stage.spec.name, own.policy, dry_run, own.kept, own.savepoints,
                                own.checkpoints, own.incomplete, stages={stage.name: own})
    store = cuts
    plan, keep, floor = plan_cuts(store, stages, retained=retained, policy=policy, in_flight_from=in_flight_from)
    plan.dry_run = dry_run
    if not dry_run:
        for info in plan.keys:
            store.objects.delete(info.key)
    for stage in stages:
        plan.stages[stage.name] = retain(stage.spec, stage.store, dry_run=dry_run, keep=keep, keep_from=floor,
                                         run_id=run_id)
    return plan
