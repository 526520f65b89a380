"""The alignment record: how a stage's source tells its coordinator how checkpoint n aligned.

The source's planner (a Python worker of its own) writes, when the alignment of checkpoint
``n`` completed, ``<control_dir>/alignment/chk-<n>.json`` (temp file + rename, never
rewritten)::

    {"format_version": 1, "checkpoint_id": n, "attempt": a, "mode": "aligned|unaligned|aligned-timed-out",
     "alignment_ms": 12.5, "snapshot_offsets": {"topic:0": 11, ...}, "barrier_offsets": {"topic:0": 10, ...},
     "channel_state": [{"partition": "topic:1", "start": 4, "end": 14, "records": 9, "back_edge": false}],
     "channel_state_records": 9}

The stage's coordinator completes snapshot ``n`` (writes its manifest) only once this record
exists, because under unaligned checkpoints and back-edges the channel state is known only
when the last input partition delivered barrier ``n``, after the snapshot.

An alignment that ends without completing (a newer barrier subsumed it, or it was aborted)
leaves ``{"format_version": 1, "checkpoint_id": n, "aborted": true, "reason": ..., "message":
...}`` instead, so the coordinator fails snapshot ``n`` at once rather than at its timeout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from barrierflow.atomic_files import write_atomic
from barrierflow.barriers.alignment.outcomes import AbortedAlignment, CompletedAlignment


def record_path(control_dir: str | os.PathLike[str], checkpoint_id: int) -> Path:
    return Path(control_dir) / "alignment" / f"chk-{checkpoint_id}.json"


def to_record(done: CompletedAlignment) -> dict[str, Any]:
    return {
        "format_version": 1,
        "checkpoint_id": done.checkpoint_id,
        "attempt": done.snapshot.attempt,
        "mode": done.mode.value,
        "alignment_ms": done.alignment_ms,
        "snapshot_offsets": dict(sorted(done.snapshot.offsets.items())),
        "barrier_offsets": dict(sorted(done.barrier_offsets.items())),
        "channel_state": [{"partition": r.partition, "start": r.start, "end": r.end, "records": r.records,
                           "back_edge": r.back_edge} for r in done.channel_state],
        "channel_state_records": done.channel_state_records,
    }


def _write(control_dir: str | os.PathLike[str], checkpoint_id: int, record: dict[str, Any]) -> None:
    path = record_path(control_dir, checkpoint_id)
    if path.exists():
        return
    write_atomic(path, json.dumps(record, sort_keys=True))


def write_alignment(control_dir: str | os.PathLike[str], done: CompletedAlignment) -> None:
    """Store the record of ``done`` (atomically; an existing record is kept)."""
    _write(control_dir, done.checkpoint_id, to_record(done))


def write_aborted(control_dir: str | os.PathLike[str], aborted: AbortedAlignment) -> None:
    """Store that the alignment of ``aborted.checkpoint_id`` ended without completing."""
    _write(control_dir, aborted.checkpoint_id, {
        "format_version": 1, "checkpoint_id": aborted.checkpoint_id, "aborted": True,
        "reason": aborted.reason.value, "message": f"{aborted.reason.explanation}: {aborted.message}"})


def read_alignment(control_dir: str | os.PathLike[str], checkpoint_id: int) -> dict[str, Any] | None:
    """The record of checkpoint ``checkpoint_id``, or None while the alignment is incomplete."""
    try:
        return dict(json.loads(record_path(control_dir, checkpoint_id).read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
