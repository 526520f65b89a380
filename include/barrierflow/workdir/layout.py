"""Where a pipeline keeps its local files (the job's work directory).

``<work_dir>/spark-checkpoint``  Spark's own checkpoint (offsets, commits, state) — local
``<work_dir>/control``           coordinator <-> planner control channel
``<work_dir>/snapshots``         hard-linked snapshots of the synchronous phase
``<work_dir>/dead-letter``       default dead-letter output (spec ``dead_letter_path`` moves it)
``<work_dir>/event-times``       newest event time per range read (Kafka; sources/event_times.py);
                                 spec ``event_times_path`` moves it

Executors write the Spark checkpoint's state files, the dead letters and the event times: on a
cluster the last two belong on shared storage (the spec fields, ``s3://...``), and the work dir
on a file system mounted at the same path on the driver's and every worker's machine (the driver
hard-links the state files the executors wrote; see docs/deployment.md).

``work_dir`` defaults to ``var/<pipeline name>`` under the project home (git-ignored).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from barrierflow.spec.loader import project_home
from barrierflow.spec.models import PipelineSpec


@dataclass(frozen=True)
class JobLayout:
    work_dir: Path

    @classmethod
    def for_spec(cls, spec: PipelineSpec) -> JobLayout:
        if spec.work_dir:
            path = Path(spec.work_dir)
            return cls(path if path.is_absolute() else project_home() / path)
        return cls(project_home() / "var" / spec.name)

    @property
    def spark_checkpoint(self) -> Path:
        return self.work_dir / "spark-checkpoint"

    @property
    def control(self) -> Path:
        return self.work_dir / "control"

    @property
    def snapshots(self) -> Path:
        return self.work_dir / "snapshots"

    def event_time_uri(self, spec: PipelineSpec) -> str:
        """Where executors record the event times of the Kafka ranges they read: the spec's
        ``event_times_path``, else ``<work_dir>/event-times`` (seen by executors on this host only)."""
        return spec.event_times_path or f"file://{self.work_dir / 'event-times'}"

    def dead_letter_uri(self, spec: PipelineSpec) -> str:
        """Where executors write malformed records: the spec's ``dead_letter_path``, else
        ``<work_dir>/dead-letter`` (seen by executors on this host only)."""
        return spec.dead_letter_path or f"file://{self.work_dir / 'dead-letter'}"
