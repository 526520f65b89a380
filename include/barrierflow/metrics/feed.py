"""The run loop's hook: each tick, every stage's figures into :class:`RunMetrics`.

:class:`MetricsFeed` is what :meth:`barrierflow.runtime.pipeline_runner.PipelineRunner.run`
holds when the spec has a ``metrics:`` block: it starts the server, hands over each stage's
counts and checkpoint coordinator state every tick (figures the driver already holds), and
recounts a stage's dead letters only when the stage completed another checkpoint (reading
only dead-letter files it has not read: :class:`~barrierflow.sources.dead_letter.DeadLetterTally`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Protocol

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.metrics.run_metrics import RunMetrics
from barrierflow.metrics.server import MetricsServer
from barrierflow.sources.dead_letter import DeadLetterTally
from barrierflow.spec.metrics import MetricsSpec

__all__ = ["FreshnessFigure", "MetricsFeed", "StageCheckpoints", "StageCounts"]

#: Figures per sink the feed looks at each tick (a tick adds one or two).
FRESHNESS_LOOKBACK = 20


class StageCheckpoints(Protocol):
    """A stage's checkpoints as the feed reads them: its coordinator in the driver that runs
    it, or what the store holds of it (a stage in a process of its own)."""

    @property
    def completed(self) -> Sequence[Manifest]: ...
    @property
    def completed_count(self) -> int: ...
    @property
    def failed(self) -> Sequence[object]: ...


class StageCounts(Protocol):
    """A stage's counts in the run (``StageStats``, or what a stage process reported)."""

    @property
    def records(self) -> int: ...
    @property
    def batches(self) -> int: ...


class FreshnessFigure(Protocol):
    """One checkpoint's freshness in one sink (``barrierflow.runtime.freshness.Freshness``)."""

    @property
    def checkpoint_id(self) -> int: ...
    @property
    def seconds(self) -> float: ...


class MetricsFeed:
    """Serves pipeline ``pipeline``'s metrics at ``spec``'s address for one run (``attempt``);
    ``dead_letter_uris``: each stage's dead-letter output."""

    def __init__(self, spec: MetricsSpec, *, pipeline: str, attempt: int, work_dir: str | os.PathLike[str],
                 dead_letter_uris: Mapping[str, str]) -> None:
        self.metrics = RunMetrics(pipeline, attempt=attempt)
        self.server = MetricsServer(self.metrics, spec, work_dir=work_dir)
        self._tallies = {stage: DeadLetterTally(uri) for stage, uri in dead_letter_uris.items()}
        self._counted: dict[str, int] = {}

    def start(self) -> MetricsFeed:
        """Serve (UserInputError when the address cannot be bound); the dead letters counted once."""
        for stage, tally in self._tallies.items():
            self.metrics.dead_letters(stage, tally.count())
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def observe(self, stage: str, counts: StageCounts, coordinator: StageCheckpoints | None, elapsed: float) -> None:
        """One tick's figures of ``stage`` (``coordinator``: None before it started)."""
        self.metrics.progress(stage, records=counts.records, batches=counts.batches, elapsed=elapsed)
        if coordinator is None:
            return
        self.metrics.checkpoints(stage, completed=coordinator.completed,
                                 completed_count=coordinator.completed_count, failed=len(coordinator.failed))
        if stage in self._tallies and self._counted.get(stage) != coordinator.completed_count:
            self._counted[stage] = coordinator.completed_count
            self.metrics.dead_letters(stage, self._tallies[stage].count())

    def keys(self, stage: str, *, started: int, expired: int, live: int | None) -> None:
        """Keys ``stage``'s keyed functions started and expired in this run so far, and the keys
        in its state now (None: unknown)."""
        self.metrics.keys(stage, started=started, expired=expired, live=live)

    def freshness(self, stage: str, figures: Mapping[str, Sequence[FreshnessFigure]]) -> None:
        """``stage``'s freshness figures per sink (oldest first); those of checkpoints newer than
        the sink's last observed one are observed into its histogram."""
        for sink, kept in figures.items():
            for figure in kept[-FRESHNESS_LOOKBACK:]:
                self.metrics.freshness(stage, sink, figure.checkpoint_id, figure.seconds)
