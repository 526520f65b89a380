"""Barrier records: how a checkpoint barrier travels in-band through a Kafka channel.

When a stage's barrier batch of checkpoint ``n`` is committed, the stage appends one barrier
record to every partition of every output channel, after every record of epoch ``n``. A
barrier record is a Kafka record marked by headers (all values ASCII):

=======================  ==================================================================
``bf-barrier``           the checkpoint id ``n`` (decimal); its presence marks the record
``bf-attempt``           the pipeline attempt (restores so far) that wrote it (decimal)
``bf-stage``             the name of the producing stage
``bf-triggered-ms``      optional: when checkpoint ``n`` was triggered (Unix epoch, ms), so a
                         downstream stage counts its ``alignment_timeout`` from the
                         checkpoint's start, as Flink does with a barrier's timestamp
=======================  ==================================================================

Its key is empty and its value a small JSON object with the same three fields, for people
reading the topic with other tools; the headers are what counts. Data records a stage writes
to a channel carry ``bf-attempt`` too (no ``bf-barrier``), so a downstream source can skip
records that an older attempt wrote after the restored barrier.

Wire format version 1 (``bf-triggered-ms`` was added later; barriers without it still read,
and readers that predate it ignore it). A record with a ``bf-barrier`` header whose values do not parse is a
:class:`BarrierRecordError` (never silently treated as data).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from barrierflow.errors import SourceError

BARRIER_HEADER = "bf-barrier"
ATTEMPT_HEADER = "bf-attempt"
STAGE_HEADER = "bf-stage"
TRIGGERED_HEADER = "bf-triggered-ms"

Headers = Sequence[tuple[str, bytes]]


class BarrierRecordError(SourceError):
    """A record is marked as a barrier (``bf-barrier`` header) but its headers are malformed."""


@dataclass(frozen=True)
class BarrierMarker:
    """Barrier ``checkpoint_id`` of ``attempt``, written by stage ``stage``; ``triggered_ms``:
    when the checkpoint was triggered (Unix epoch, ms; None when unknown). Two markers are
    the same barrier whatever their ``triggered_ms``."""

    checkpoint_id: int
    attempt: int
    stage: str
    triggered_ms: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.checkpoint_id < 1 or self.attempt < 0 or not self.stage:
            raise ValueError(f"not a barrier: checkpoint id {self.checkpoint_id} (>= 1), attempt {self.attempt} "
                             f"(>= 0), stage {self.stage!r} (non-empty)")

    def headers(self) -> list[tuple[str, bytes]]:
        out = [(BARRIER_HEADER, str(self.checkpoint_id).encode()), (ATTEMPT_HEADER, str(self.attempt).encode()),
               (STAGE_HEADER, self.stage.encode())]
        if self.triggered_ms is not None:
            out.append((TRIGGERED_HEADER, str(self.triggered_ms).encode()))
        return out

    def value(self) -> bytes:
        body: dict[str, object] = {"barrier": self.checkpoint_id, "attempt": self.attempt, "stage": self.stage}
        if self.triggered_ms is not None:
            body["triggered_ms"] = self.triggered_ms
        return json.dumps(body, separators=(",", ":")).encode()

    def precedes(self, other: BarrierMarker) -> bool:
        """Whether this barrier belongs to an older attempt, or to an older checkpoint of
        the same attempt, than ``other``."""
        return (self.attempt, self.checkpoint_id) < (other.attempt, other.checkpoint_id)


def _header(headers: Iterable[tuple[str, bytes]] | None, name: str) -> bytes | None:
    for key, value in headers or ():
        if key == name:
            return value
    return None


def decode_barrier(headers: Iterable[tuple[str, bytes]] | None, where: str = "a record") -> BarrierMarker | None:
    """The barrier carried by a record with ``headers``, or None for a data record.

    Raises:
        BarrierRecordError: the record has a ``bf-barrier`` header but the barrier headers do
            not parse (``where`` names the record in the message).
    """
    items = list(headers or ())
    raw = _header(items, BARRIER_HEADER)
    if raw is None:
        return None
    attempt, stage = _header(items, ATTEMPT_HEADER), _header(items, STAGE_HEADER)
    triggered = _header(items, TRIGGERED_HEADER)
    try:
        return BarrierMarker(int(raw.decode("ascii")), int((attempt or b"").decode("ascii")),
                             (stage or b"").decode("utf-8"),
                             int(triggered.decode("ascii")) if triggered is not None else None)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BarrierRecordError(
            f"{where} is marked as a barrier ({BARRIER_HEADER}={raw!r}) but its headers are malformed "
            f"({ATTEMPT_HEADER}={attempt!r}, {STAGE_HEADER}={stage!r}, {TRIGGERED_HEADER}={triggered!r}: {exc}); "
            f"only barrierflow stages may write records with a {BARRIER_HEADER} header to a channel") from None


def data_headers(attempt: int) -> list[tuple[str, bytes]]:
    """The headers of a data record a stage of ``attempt`` writes to a channel."""
    return [(ATTEMPT_HEADER, str(attempt).encode())]


def record_attempt(headers: Iterable[tuple[str, bytes]] | None) -> int | None:
    """The attempt that wrote a channel record (None: not written by a barrierflow stage)."""
    raw = _header(headers, ATTEMPT_HEADER)
    try:
        return int(raw.decode("ascii")) if raw is not None else None
    except (ValueError, UnicodeDecodeError):
        return None
