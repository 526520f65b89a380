"""What a run does before its first micro-batch, told as it happens (the progress display).

A restart can spend a minute before its first batch: choosing and verifying the checkpoint to
restore, copying its files back, then Spark replaying from it. :class:`StartupPhase` is one
step of that, in this order (each only when it happens):

* ``choosing``: choosing and verifying the checkpoint to restore (one stage without a local
  Spark checkpoint: the newest that passes structural verification);
* ``restoring``: restoring it (one stage: its N files; several: every stage's, as a new attempt);
* ``replaying``: the queries started from a checkpoint and read again what followed it;
* ``waiting``: the queries started from the beginning (no checkpoint to resume from);
* ``running``: the first micro-batch of every stage completed; the live progress takes over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["PhaseReport", "StartupPhase", "Step"]

Step = Literal["choosing", "restoring", "replaying", "waiting", "running"]


@dataclass(frozen=True)
class StartupPhase:
    """One step of a run's start (module docstring); ``message`` says it in words, e.g.
    ``restoring checkpoint 12: 34 files (1.2 MB)``."""

    step: Step
    message: str


#: Who is told each step (the progress display), in order.
PhaseReport = Callable[[StartupPhase], None]
