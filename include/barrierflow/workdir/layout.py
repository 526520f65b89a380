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

A ``work_dir`` on object storage (``s3://BUCKET/PREFIX`` or ``s3a://``) holds only Spark's own
checkpoint, ``s3a://BUCKET/PREFIX/spark-checkpoint`` (:mod:`barrierflow.storage.object_dir`):
what only the driver uses (control channel, snapshots, default dead letters and event times)
stays on the driver's disk, below ``var/object-work-dirs/BUCKET/PREFIX`` under the project
home, the same folder for every process of that work dir on the driver's machine (a run and a
restore).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from barrierflow.spec.models import StageSpec
from barrierflow.spec.paths import project_home
from barrierflow.storage.object_dir import CheckpointDir, ObjectDir, is_object_uri, store_uri

#: Below the project home: the driver's local folders of work dirs on object storage.
OBJECT_WORK_DIRS = Path("var") / "object-work-dirs"


@dataclass(frozen=True)
class JobLayout:
    """A job's folders: ``work_dir`` on the driver's disk and, for a work dir on object storage,
    ``object_work_dir`` (its ``s3://`` URI), which then holds Spark's checkpoint."""

    work_dir: Path
    object_work_dir: str | None = None

    @classmethod
    def for_spec(cls, spec: StageSpec) -> JobLayout:
        if spec.work_dir and is_object_uri(spec.work_dir):
            uri = store_uri(spec.work_dir).rstrip("/")
            return cls(project_home() / OBJECT_WORK_DIRS / uri.removeprefix("s3://"), uri)
        if spec.work_dir:
            path = Path(spec.work_dir)
            return cls(path if path.is_absolute() else project_home() / path)
        return cls(project_home() / "var" / spec.name)

    @property
    def on_object_storage(self) -> bool:
        """Whether Spark's checkpoint is on object storage (``work_dir: s3://...``)."""
        return self.object_work_dir is not None

    @property
    def spark_checkpoint(self) -> CheckpointDir:
        """Spark's own checkpoint: ``<work_dir>/spark-checkpoint`` on the driver's disk, or an
        :class:`~barrierflow.storage.object_dir.ObjectDir` below the work dir on object storage
        (``str()`` of it is the ``s3a://`` URI Spark writes to)."""
        if self.object_work_dir is not None:
            return ObjectDir(f"{self.object_work_dir}/spark-checkpoint")
        return self.work_dir / "spark-checkpoint"

    @property
    def control(self) -> Path:
        return self.work_dir / "control"

    @property
    def snapshots(self) -> Path:
        return self.work_dir / "snapshots"

    def event_time_uri(self, spec: StageSpec) -> str:
        """Where executors record the event times of the Kafka ranges they read: the spec's
        ``event_times_path``, else ``<work_dir>/event-times`` (seen by executors on this host only)."""
        return spec.event_times_path or f"file://{self.work_dir / 'event-times'}"

    def dead_letter_uri(self, spec: StageSpec) -> str:
        """Where executors write malformed records: the spec's ``dead_letter_path``, else
        ``<work_dir>/dead-letter`` (seen by executors on this host only)."""
        return spec.dead_letter_path or f"file://{self.work_dir / 'dead-letter'}"
