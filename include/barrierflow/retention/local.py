"""Retention of the job's local work directory (``<work_dir>``, see :mod:`barrierflow.workdir.layout`).

Restores never read the local Spark checkpoint (they materialize it from the checkpoint
store), so only the running or restarting job needs it: retention may delete exactly what
Spark can never need again to resume from its own latest committed batch ``L``, plus the
leftovers barrierflow itself leaves in the work directory. Spark may be running against
the directory while this runs, so every rule errs on the side of keeping a file.

Inputs: ``L`` (``commits/`` of the local Spark checkpoint), ``M`` = Spark's
``spark.sql.streaming.minBatchesToRetain`` (:func:`min_batches_to_retain`) and the
*reference* checkpoints from the store (the newest completed one of the current timeline,
which the job's coordinator builds on, and the newest one this retention run keeps), with
``B`` the smallest of their barrier batches.

``spark-checkpoint/offsets/<V>``, ``commits/<V>`` (category ``spark_logs``)
    deleted for ``V < min(B, L - M)``, each with its ``.<V>.crc`` sidecar, commits before
    offsets and in ascending order (an interrupted run never leaves a commit without its
    offsets). Spark itself purges ``V < L' - M`` after batch ``L' >= L``, so this is never
    more aggressive than Spark's own purge; it never touches ``L``, ``L - 1`` (read on
    restart) or anything newer, and never a batch at or after a reference checkpoint's
    barrier (an in-flight checkpoint's synchronous phase links batches after the last
    barrier batch, which is at least ``B``). Without a reference checkpoint or a committed
    batch nothing is deleted.

``spark-checkpoint/state/**/<v>.delta|<v>.snapshot`` (category ``spark_state``)
    HDFSBackedStateStore: batch ``V`` commits state version ``V + 1``; version ``w`` loads
    from the newest ``<k>.snapshot`` ``<= w`` plus ``<k+1..w>.delta``. Per state directory,
    with ``S`` the newest snapshot version ``<= L + 1 - M`` (the version Spark's own
    maintenance keeps as the base of its retained window), and ``R`` the smallest state base
    the reference checkpoints record for that directory (``Manifest.state_bases``: the
    job's next synchronous phase may extend that chain), files of versions ``v < min(S, R)``
    are deleted (with their ``.<name>.crc``), oldest first. A directory is left alone when
    there is no such snapshot, when a reference checkpoint has no base for it, or when the
    deltas ``S+1 .. L+1`` are not all present (the chain Spark loads would not be the one
    reasoned about). So every version ``>= min(S, R)`` stays loadable exactly as before.
    RocksDB state directories (``spark.state_store: rocksdb``: ``<v>.zip``, ``<v>.changelog``,
    ``SSTs/``) are left to Spark's own maintenance, which keeps the newest
    ``minBatchesToRetain`` versions loadable and deletes SST files no kept version names;
    the snapshot directories hold hard links, so a file Spark deletes stays readable there.
    Other files (``_metadata``, schemas, ``sources/``, ``metadata``, temporary files) are
    never touched.

``spark-checkpoint.replaced`` (category ``replaced``)
    the copy a restore moves aside: deleted when every reference checkpoint was completed
    by the current attempt (after the latest restore) and after the directory tree last
    changed (newest mtime/ctime of any entry), i.e. the restored job has moved on.

``snapshots/chk-<n>`` (category ``staging``)
    the synchronous-phase snapshot of checkpoint ``n``: deleted when the store has a manifest or
    a failure record for ``n`` and ``n`` is older than the newest such id, or the tree last
    changed more than ``checkpoint.timeout`` ago (a checkpoint replayed by a restarted job
    reuses its id, which may be the newest recorded one). The snapshot of an in-flight
    checkpoint (id newer than every recorded one) is always kept.

Directories are deleted by first renaming them to a unique name and checking that the
renamed directory is the one that was planned (device, inode, mtime), so a directory a
concurrent restore or job put in its place is never deleted (an interrupted deletion leaves
``<name>.deleting-<id>``, which nothing reads and may be removed by hand). A missing work directory
(retention run from another machine) or Spark checkpoint is a note in the plan, not an
error. The plan lists every file with its size; a dry run reports the same numbers and
deletes nothing.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.errors import BarrierflowError
from barrierflow.spark import commit_log, offset_log
from barrierflow.spark import state_files as spark_state
from barrierflow.workdir.layout import JobLayout

log = logging.getLogger(__name__)

MIN_BATCHES_KEY = "spark.sql.streaming.minBatchesToRetain"
#: Spark's default, and the value barrierflow's sessions always set (barrierflow.spark.session).
DEFAULT_MIN_BATCHES_TO_RETAIN = 100
CATEGORIES = ("spark_logs", "spark_state", "replaced", "staging")
_SNAPSHOT_DIR = re.compile(r"^chk-(\d+)$")


class LocalRetentionError(BarrierflowError):
    """Files of the local work directory that retention planned to delete could not be deleted."""


@dataclass(frozen=True)
class LocalFile:
    """A regular file to delete (or counted inside a directory to delete), with its size."""

    path: Path
    size: int


@dataclass(frozen=True)
class LocalTree:
    """A directory to delete as a whole; ``identity`` is (device, inode, mtime_ns) at planning."""

    path: Path
    identity: tuple[int, int, int]
    files: tuple[LocalFile, ...]


@dataclass
class LocalRetentionPlan:
    """What retention deletes (or, in a dry run, would delete) in the job's work directory."""

    work_dir: Path
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)
    min_batches_to_retain: int | None = None
    latest_committed: int | None = None
    barrier_batch: int | None = None
    #: offsets/commits entries of batches below this are deleted (None: none)
    prune_below: int | None = None
    offsets: list[int] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)
    state_files: int = 0
    replaced: bool = False
    staging: list[int] = field(default_factory=list)
    #: single files in deletion order (categories spark_logs, spark_state)
    files: dict[str, list[LocalFile]] = field(default_factory=dict)
    #: whole directories (categories replaced, staging)
    trees: dict[str, list[LocalTree]] = field(default_factory=dict)

    def _category_files(self, category: str) -> list[LocalFile]:
        return [*self.files.get(category, []), *(f for t in self.trees.get(category, []) for f in t.files)]

    @property
    def bytes(self) -> dict[str, int]:
        return {c: sum(f.size for f in self._category_files(c)) for c in CATEGORIES}

    @property
    def bytes_freed(self) -> int:
        return sum(self.bytes.values())

    @property
    def file_count(self) -> int:
        return sum(len(self._category_files(c)) for c in CATEGORIES)

    def as_dict(self) -> dict[str, Any]:
        return {
            "work_dir": str(self.work_dir), "skipped": self.skipped, "notes": self.notes,
            "min_batches_to_retain": self.min_batches_to_retain, "latest_committed_batch": self.latest_committed,
            "barrier_batch": self.barrier_batch, "prune_below_batch": self.prune_below,
            "deleted": {"offsets": len(self.offsets), "commits": len(self.commits), "state_files": self.state_files,
                        "replaced": self.replaced, "staging": self.staging},
            "files": self.file_count, "bytes": self.bytes, "bytes_freed": self.bytes_freed,
        }

    def summary(self) -> str:
        """One line for the CLI's text output."""
        if self.skipped:
            return f"skipped ({self.skipped})"
        return (f"{len(self.offsets)} offsets and {len(self.commits)} commits entries, {self.state_files} state "
                f"files, replaced copy: {'yes' if self.replaced else 'no'}, staging {self.staging}; "
                f"{self.file_count} files, {self.bytes_freed} bytes")


def min_batches_to_retain(conf: Mapping[str, str]) -> int | None:
    """The number of batches Spark keeps, as far as retention may assume: the larger of
    barrierflow's required value and the spec's ``spark.conf`` value (the session applies
    the required one over the spec's, a session built elsewhere may use the spec's; the
    larger is never more aggressive than either). None if the spec's value is not a
    positive integer (then nothing of the Spark checkpoint is deleted)."""
    raw = conf.get(MIN_BATCHES_KEY)
    if raw is None:
        return DEFAULT_MIN_BATCHES_TO_RETAIN
    try:
        value = int(str(raw).strip())
    except ValueError:
        return None
    return max(value, DEFAULT_MIN_BATCHES_TO_RETAIN) if value >= 1 else None


def _file(path: Path) -> LocalFile | None:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    return LocalFile(path, st.st_size)


def _with_sidecar(directory: Path, name: str) -> list[LocalFile]:
    """``name`` and its Hadoop checksum ``.<name>.crc`` (if present), in deletion order."""
    return [f for f in (_file(directory / name), _file(directory / f".{name}.crc")) if f is not None]


def spark_log_files(spark_dir: Path, below: int) -> tuple[list[int], list[int], list[LocalFile]]:
    """Batch ids of ``commits/`` and ``offsets/`` entries ``< below`` and their files (with
    sidecars) in deletion order: per batch ascending, the commit before the offsets."""
    commits = [b for b in commit_log.committed_batches(spark_dir) if b < below]
    offsets = [b for b in offset_log.planned_batches(spark_dir) if b < below]
    files: list[LocalFile] = []
    for batch in sorted(set(commits) | set(offsets)):
        if batch in commits:
            files += _with_sidecar(spark_dir / "commits", str(batch))
        if batch in offsets:
            files += _with_sidecar(spark_dir / "offsets", str(batch))
    return offsets, commits, files


def _state_versions(directory: Path) -> tuple[dict[int, list[str]], set[int], set[int]]:
    names: dict[int, list[str]] = {}
    deltas: set[int] = set()
    snapshots: set[int] = set()
    for name in os.listdir(directory):
        found = spark_state.versioned(name)
        if found is not None and (directory / name).is_file():
            version, kind = found
            names.setdefault(version, []).append(name)
            (deltas if kind == "delta" else snapshots).add(version)
    return names, deltas, snapshots


def spark_state_files(spark_dir: Path, latest_committed: int, min_batches: int,
                      bases: Mapping[str, int]) -> tuple[list[LocalFile], int, list[str]]:
    """State store files no loadable version needs (module docstring): the files in deletion
    order (with sidecars), how many of them are ``.delta``/``.snapshot`` files, and notes
    about directories left alone. ``bases`` maps a state directory relative to ``spark_dir``
    (``state/0/3``) to the smallest base version the reference checkpoints record."""
    state_root = spark_dir / "state"
    if not state_root.is_dir():
        return [], 0, []
    window_start = latest_committed + 1 - min_batches  # oldest state version Spark keeps loadable
    loaded = latest_committed + 1  # the version the next batch loads
    files: list[LocalFile] = []
    count = 0
    notes: list[str] = []
    for dirpath, dirnames, _files in os.walk(state_root):
        dirnames.sort()
        directory = Path(dirpath)
        names, deltas, snapshots = _state_versions(directory)
        if not names:
            continue
        key = directory.relative_to(spark_dir).as_posix()
        base_s = max((s for s in snapshots if s <= window_start), default=None)
        if base_s is None:
            continue  # no snapshot old enough: Spark may still load every version from its files
        if key not in bases:
            notes.append(f"{key}: no state base in the reference checkpoints; kept")
            continue
        if not spark_state.chains(base_s, loaded, deltas, snapshots):
            notes.append(f"{key}: deltas {base_s + 1}..{loaded} are not all present; kept")
            continue
        limit = min(base_s, bases[key])
        for version in sorted(v for v in names if v < limit):
            for name in sorted(names[version]):
                found = _with_sidecar(directory, name)
                if found:
                    count += 1
                    files += found
    return files, count, notes


def _tree(path: Path) -> tuple[LocalTree, datetime] | None:
    """The directory ``path`` with its files, and when anything in it last changed."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    newest = max(st.st_mtime, st.st_ctime)
    files: list[LocalFile] = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in [*dirnames, *sorted(filenames)]:
            try:
                entry = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            newest = max(newest, entry.st_mtime, entry.st_ctime)
            if name in filenames:
                files.append(LocalFile(Path(dirpath) / name, entry.st_size))
    identity = (st.st_dev, st.st_ino, st.st_mtime_ns)
    return LocalTree(path, identity, tuple(files)), datetime.fromtimestamp(newest, UTC)


def _reference_bases(references: Sequence[Manifest]) -> dict[str, int]:
    keys = set.intersection(*(set(m.state_bases) for m in references)) if references else set()
    return {k: min(m.state_bases[k] for m in references) for k in keys}


def plan_local_retention(
    layout: JobLayout,
    references: Sequence[Manifest],
    recorded: Iterable[int],
    *,
    min_batches: int | None,
    attempt: int,
    timeout: timedelta,
    now: datetime,
) -> LocalRetentionPlan:
    """Decide what to delete in ``layout.work_dir`` (module docstring); reads only.

    ``references``: the reference checkpoints (empty: nothing of the Spark checkpoint and
    no ``.replaced`` copy is deleted); ``recorded``: ids with a manifest or failure record
    in the store; ``min_batches``: :func:`min_batches_to_retain` (None: unknown, keep the
    Spark checkpoint); ``attempt``: the store's current attempt; ``now``: timezone-aware.
    Never raises for the work directory's sake: a missing or unreadable work directory
    gives a plan that deletes nothing and says why in ``skipped``."""
    plan = _empty_plan(layout, min_batches)
    if not layout.work_dir.is_dir():
        plan.skipped = f"work directory {layout.work_dir} does not exist on this machine"
        return plan
    try:
        _plan_work_dir(plan, layout, references, set(recorded), attempt=attempt, timeout=timeout, now=now)
    except OSError as exc:
        log.warning("cannot plan the retention of %s: %s", layout.work_dir, exc)
        plan = _empty_plan(layout, min_batches)
        plan.skipped = f"work directory {layout.work_dir} could not be read: {exc}"
    return plan


def _empty_plan(layout: JobLayout, min_batches: int | None) -> LocalRetentionPlan:
    plan = LocalRetentionPlan(layout.work_dir, min_batches_to_retain=min_batches)
    plan.files = {"spark_logs": [], "spark_state": []}
    plan.trees = {"replaced": [], "staging": []}
    return plan


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _plan_work_dir(plan: LocalRetentionPlan, layout: JobLayout, references: Sequence[Manifest],
                   recorded_ids: set[int], *, attempt: int, timeout: timedelta, now: datetime) -> None:
    spark_dir = layout.spark_checkpoint
    if isinstance(spark_dir, Path):
        _plan_spark_checkpoint(plan, spark_dir, references, plan.min_batches_to_retain)
        aside = spark_dir.with_name(f"{spark_dir.name}.replaced")
    else:
        # On object storage Spark's own maintenance prunes its checkpoint (minBatchesToRetain);
        # a restore replaces it in place (nothing is moved aside). Snapshots are local.
        plan.notes.append(f"Spark checkpoint on object storage ({spark_dir}): pruned by Spark's maintenance")
        aside = layout.work_dir / "spark-checkpoint.replaced"
    found = _tree(aside) if _real_dir(aside) else None
    if found is not None:
        tree, changed = found
        moved_on = bool(references) and all(m.attempt >= attempt and m.completion_time > changed
                                            for m in references)
        if moved_on:
            plan.replaced = True
            plan.trees["replaced"].append(tree)
        else:
            plan.notes.append(f"{aside.name} kept: no checkpoint of the current attempt completed after "
                              f"it was moved aside ({changed.isoformat(timespec='seconds')})")

    newest_recorded = max(recorded_ids, default=None)
    try:
        names = os.listdir(layout.snapshots)
    except FileNotFoundError:
        names = []
    snapshots = sorted((int(m.group(1)), m.group(0)) for m in map(_SNAPSHOT_DIR.match, names) if m)
    for cid, name in snapshots:
        if cid not in recorded_ids:
            continue  # in flight: kept
        found = _tree(layout.snapshots / name) if _real_dir(layout.snapshots / name) else None
        if found is None or newest_recorded is None:
            continue
        tree, changed = found
        if cid < newest_recorded or now - changed > timeout:
            plan.staging.append(cid)
            plan.trees["staging"].append(tree)


def _plan_spark_checkpoint(plan: LocalRetentionPlan, spark_dir: Path, references: Sequence[Manifest],
                           min_batches: int | None) -> None:
    if not spark_dir.is_dir():
        plan.notes.append(f"no local Spark checkpoint at {spark_dir}")
        return
    if min_batches is None:
        plan.notes.append(f"{MIN_BATCHES_KEY} in the spec is not a positive integer: Spark checkpoint kept")
        return
    plan.latest_committed = commit_log.latest_committed(spark_dir)
    if not references:
        plan.notes.append("no completed checkpoint to build on: Spark checkpoint kept")
        return
    plan.barrier_batch = min(m.spark_batch_id for m in references)
    if plan.latest_committed is None:
        return
    plan.prune_below = min(plan.barrier_batch, plan.latest_committed - min_batches)
    plan.offsets, plan.commits, plan.files["spark_logs"] = spark_log_files(spark_dir, plan.prune_below)
    state, plan.state_files, notes = spark_state_files(spark_dir, plan.latest_committed, min_batches,
                                                       _reference_bases(references))
    plan.files["spark_state"] = state
    plan.notes += notes


def _remove_tree(tree: LocalTree) -> None:
    """Delete ``tree`` if the directory at its path is still the planned one (see the
    module docstring); a different one is put back (or left under its unique name)."""
    tomb = tree.path.with_name(f"{tree.path.name}.deleting-{uuid.uuid4().hex[:12]}")
    try:
        os.rename(tree.path, tomb)
    except FileNotFoundError:
        return
    st = tomb.lstat()
    if (st.st_dev, st.st_ino, st.st_mtime_ns) != tree.identity:
        log.warning("%s changed since retention planned to delete it; kept", tree.path)
        if not os.path.lexists(tree.path):
            os.rename(tomb, tree.path)
        else:
            log.warning("%s is now at %s", tree.path, tomb)
        return
    shutil.rmtree(tomb)


def apply_local_retention(plan: LocalRetentionPlan) -> None:
    """Delete the plan's files and directories in order (idempotent: files already gone,
    e.g. purged by Spark meanwhile, are fine).

    Raises:
        LocalRetentionError: some planned files or directories could not be deleted
            (everything else was deleted).
    """
    if plan.skipped:
        return
    failures: list[str] = []
    for category in ("spark_logs", "spark_state"):
        for f in plan.files.get(category, []):
            try:
                f.path.unlink(missing_ok=True)
            except OSError as exc:
                failures.append(f"{f.path}: {exc}")
    for category in ("replaced", "staging"):
        for tree in plan.trees.get(category, []):
            try:
                _remove_tree(tree)
            except OSError as exc:
                failures.append(f"{tree.path}: {exc}")
    if failures:
        raise LocalRetentionError(f"retention could not delete {len(failures)} path(s) in {plan.work_dir}: "
                                  + "; ".join(failures[:5]) + ("; ..." if len(failures) > 5 else ""))
    log.info("local retention in %s: %s", plan.work_dir, plan.summary())


__all__ = ["LocalRetentionError", "LocalRetentionPlan", "apply_local_retention", "min_batches_to_retain",
           "plan_local_retention", "spark_log_files", "spark_state_files"]
