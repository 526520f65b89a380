"""How a stage's checkpoints treat in-flight records at a barrier (``checkpoint.mode``)."""

from __future__ import annotations

import enum


class CheckpointMode(enum.StrEnum):
    """``aligned``: a stage waits for a checkpoint's barrier on every input before it snapshots;
    ``unaligned``: barriers overtake buffered records, which become the checkpoint's channel state."""

    ALIGNED = "aligned"
    UNALIGNED = "unaligned"
