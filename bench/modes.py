"""The checkpoint modes the ABS-overhead benchmark compares, the spec each mode runs with, and
the figures collected per mode (shared by the run-per-mode and the interleaved methods)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from barrierflow.spec.models import StageSpec


@dataclass(frozen=True)
class Mode:
    """A checkpoint mode: ABS every ``interval`` s, the synchronous baseline, or none."""

    name: str
    interval: float | None  # None: no barrierflow checkpoints
    synchronous: bool = False
    bandwidth: float | None = None  # MB/s of the link to the store; None: not throttled


#: The baseline is run twice per round, the second time half a round after the first: each mode
#: is compared with the mean of both, and the two against each other (an A/A comparison) show how
#: much two runs of the very same job differ on this machine, i.e. the noise of every ratio.
BASELINE = Mode("no checkpoints", None)
BASELINE_AGAIN = Mode("no checkpoints, again", None)

MODES = (
    BASELINE,
    Mode("ABS 1 s", 1.0),
    Mode("ABS 5 s", 5.0),
    BASELINE_AGAIN,
    Mode("sync snapshot 1 s", 1.0, synchronous=True),
)


def modes_for(bandwidths: Sequence[float] | None) -> tuple[Mode, ...]:
    """The modes a run compares: :data:`MODES`, or with ``bandwidths`` the baseline, then ABS 1 s
    and the synchronous baseline 1 s at each bandwidth (MB/s to the store), with the baseline's
    second run in the middle."""
    if not bandwidths:
        return MODES
    paired = [Mode(f"{name} @ {bw:g} MB/s", 1.0, synchronous=sync, bandwidth=bw)
              for bw in bandwidths for name, sync in (("ABS 1 s", False), ("sync snapshot 1 s", True))]
    half = len(paired) // 2
    return (BASELINE, *paired[:half], BASELINE_AGAIN, *paired[half:])


@dataclass
class Sample:
    """One mode's figures, one entry per round (``throughput``, ``checkpoints``, ``gc_seconds``,
    ``records_per_cpu_second``) or per completed checkpoint (phases, bytes)."""

    throughput: list[float] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    sync_ms: list[float] = field(default_factory=list)
    async_ms: list[float] = field(default_factory=list)
    incremental_bytes: list[int] = field(default_factory=list)
    gc_seconds: list[float] = field(default_factory=list)
    records_per_cpu_second: list[float] = field(default_factory=list)


def mode_spec(base: StageSpec, mode: Mode, work: Path, store: str | None = None) -> StageSpec:
    """``base`` with ``mode``'s checkpoint settings and its directories under ``work``; the
    checkpoint store under ``store`` (a storage URI, e.g. ``s3://bucket/prefix``) when given,
    else under ``work``."""
    checkpoint = base.checkpoint.model_copy(update={
        "storage": f"{store.rstrip('/')}/{work.name}" if store else f"file://{work / 'checkpoints'}",
        "interval": mode.interval or 3600.0,
        "synchronous_upload": mode.synchronous,
        "timeout": 600.0,
    })
    return base.model_copy(update={"work_dir": str(work / "work"), "checkpoint": checkpoint})
