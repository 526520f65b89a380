"""Replaying committed epochs with their output suppressed.

Restoring checkpoint K when a sink already committed epochs newer than K (because the newer
checkpoints turned out corrupt, or an operator picked an older one) would, with a plain
replay, write those epochs' output a second time. barrierflow replays them *faithfully* and
suppresses their output instead:

* every sink transaction records the end offsets of each micro-batch it covers
  (``Transaction.batch_ends``, read from Spark's offset log at the barrier);
* the restore turns the committed batches beyond K's barrier offsets into a
  :class:`ReplayPlan`, their ordered end offsets, and stores it in the job's control channel
  (a restore to a checkpoint taken *during* a replay gets a plan for the rest of it);
* the batch planner cuts every replayed batch at exactly the recorded end offsets (same
  input per batch, hence the same watermark progression and the same state as the first
  time, for a deterministic transformation);
* the stager drops the output of every batch that ends at or before the plan's last end
  (``through``): that output is already committed. The first batch after ``through`` is new.

A batch that starts before ``through`` but ends after it means the replay diverged from the
recorded run; :meth:`ReplayPlan.covers` then raises rather than drop or duplicate output.

The plan file is ``<work_dir>/control/replay.json``; a restore rewrites (or removes) it,
starting the coordinator does not touch it, and it is inert once the source passed ``through``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from barrierflow.errors import BarrierflowError, UserInputError


class ReplayImpossibleError(UserInputError):
    """The committed epochs newer than the restored checkpoint cannot be replayed faithfully."""


class ReplayDivergedError(BarrierflowError):
    """A replayed micro-batch straddles the end of the committed output: the replay does not
    follow the recorded batches, so its output can be neither dropped nor kept safely."""


def _le(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Every partition of ``a`` is at or before its position in ``b`` (absent = 0)."""
    return all(v <= b.get(p, 0) for p, v in a.items())


def output_beyond(txn: Any, offsets: Mapping[str, int]) -> bool:
    """Whether committed transaction ``txn`` holds output of a batch that ends after
    ``offsets`` (a checkpoint's barrier offsets): restoring that checkpoint would replay it,
    so the transaction must be kept to suppress it."""
    return any(not _le(end, offsets) for end in txn.batch_ends.values())


@dataclass(frozen=True)
class ReplayPlan:
    """The batches to replay after restoring ``restored_from``, as ordered end offsets."""

    restored_from: int
    epochs: tuple[int, ...]
    ends: tuple[dict[str, int], ...]

    @property
    def through(self) -> dict[str, int]:
        """End offsets of the last already-committed batch."""
        return self.ends[-1]

    @classmethod
    def for_restore(cls, restored_from: int, start: Mapping[str, int],
                    committed: Iterable[Any]) -> ReplayPlan | None:
        """The plan for restoring checkpoint ``restored_from`` given every COMMITTED ledger
        transaction, or None when no committed output lies beyond the restored barrier.

        ``start`` is the restored checkpoint's barrier offsets (where the replay begins).
        Whether a transaction's output lies beyond is decided by its batches' end offsets,
        not by checkpoint ids: a checkpoint taken during an earlier replay has a larger id
        than epochs whose committed output is still ahead of it. A transaction without
        recorded offsets (ledger of an older barrierflow) counts when its id is newer.

        Raises :class:`ReplayImpossibleError` when such a transaction lacks batch end offsets
        or the recorded batches do not form one chain."""
        ends: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
        epochs: set[int] = set()
        for txn in committed:
            if not txn.batches:
                continue  # an empty epoch committed no output
            missing = [b for b in txn.batches if b not in txn.batch_ends]
            if missing:
                if txn.checkpoint_id <= restored_from:
                    continue
                raise ReplayImpossibleError(
                    f"committed epoch {txn.checkpoint_id} of sink {txn.sink} does not record the offsets of "
                    f"batches {missing} (ledger written by an older barrierflow), so it cannot be replayed "
                    "without writing its output again")
            for batch in txn.batches:
                end = {str(p): int(o) for p, o in txn.batch_ends[batch].items()}
                if _le(end, start):
                    continue  # at or before the restored barrier: nothing to replay
                epochs.add(txn.checkpoint_id)
                ends[tuple(sorted(end.items()))] = end
        if not ends:
            return None
        chain = sorted(ends.values(), key=lambda e: (sum(e.values()), sorted(e.items())))
        previous: Mapping[str, int] = start
        for end in chain:
            if not _le(previous, end):
                raise ReplayImpossibleError(
                    f"the committed batches after checkpoint {restored_from} do not form one chain of offsets "
                    f"({previous} then {end}); they cannot be replayed faithfully")
            previous = end
        return cls(restored_from, tuple(sorted(epochs)), tuple(chain))

    def next_end(self, start: Mapping[str, int]) -> dict[str, int] | None:
        """The end of the batch that begins at ``start``, or None once ``start`` is at or past
        ``through`` (the replay is over; plan normally)."""
        for end in self.ends:
            if not _le(end, start):
                return end
        return None

    def covers(self, start: Mapping[str, int], end: Mapping[str, int]) -> bool:
        """Whether the batch ``[start, end)`` is a replay of already-committed output.

        Raises :class:`ReplayDivergedError` for a batch that starts before ``through`` and
        ends after it."""
        if _le(end, self.through):
            return True
        if _le(self.through, start):
            return False
        raise ReplayDivergedError(
            f"replayed batch [{dict(start)}, {dict(end)}) crosses the end of the output already committed "
            f"({self.through}, epochs {list(self.epochs)}); the replay after checkpoint {self.restored_from} "
            "does not follow the recorded batches. Stop the job and restore again; if the transformation is "
            "not deterministic, restore with --accept-duplicates")

    def to_json(self) -> str:
        return json.dumps({"format_version": 1, "restored_from": self.restored_from,
                           "epochs": list(self.epochs), "ends": list(self.ends)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ReplayPlan:
        data = json.loads(text)
        return cls(int(data["restored_from"]), tuple(int(e) for e in data["epochs"]),
                   tuple({str(p): int(o) for p, o in end.items()} for end in data["ends"]))

    def summary(self) -> dict[str, Any]:
        return {"restored_from": self.restored_from, "epochs": list(self.epochs), "batches": len(self.ends),
                "through": self.through}
