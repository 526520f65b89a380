"""The one thing a cluster must share with the driver as a file system: the work dir.

Spark's own checkpoint (``<work_dir>/spark-checkpoint``: offsets and commits written by the
driver, state files written by the executors) is a local path: barrierflow's synchronous phase
hard-links the state files of the barrier batch from it on the driver
(:mod:`barrierflow.checkpointing.snapshot`), and the pinned PySpark has no S3 file system for
Spark's checkpoint (no ``hadoop-aws``). On ``local[...]`` and on one host that is automatic. On a
cluster of several machines the work dir must be on a file system mounted at the same path on the
driver's and on every worker's machine (NFS, EFS, a CSI volume shared by the pods); otherwise
every executor writes its state files to its own disk and the driver's snapshots would miss them,
so no checkpoint could restore the state. :func:`check_work_dir_shared` finds that out before the
first batch instead of at the first restore.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class WorkDirNotSharedError(UserInputError):
    """Executors of a cluster do not see the driver's work dir (Spark's checkpoint and state)."""


def _sees(path: str, _task: int) -> tuple[str, bool]:
    """Executor side: this machine's host name and whether ``path`` exists here."""
    return socket.gethostname(), os.path.isfile(path)


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs the executors inside the driver's JVM (``local``, ``local[N]``...)."""
    return master.startswith("local")


def check_work_dir_shared(spark: SparkSession, work_dir: Path) -> None:
    """On a non-local master, check that the executors see the driver's ``work_dir``: the driver
    writes a probe file there and one task per default-parallelism slot looks for it (a small
    Spark job, once per run; on ``local[...]`` nothing is done).

    Raises:
        WorkDirNotSharedError: a task did not find the probe, naming the hosts and the fix.
    """
    context = spark.sparkContext
    if is_local_master(context.master):
        return
    work_dir.mkdir(parents=True, exist_ok=True)
    probe = work_dir / f".executor-probe-{uuid.uuid4().hex}"
    probe.write_text(socket.gethostname(), encoding="utf-8")
    try:
        slots = max(1, int(context.defaultParallelism))
        seen = context.parallelize(range(slots), slots).map(functools.partial(_sees, str(probe))).collect()
    finally:
        probe.unlink(missing_ok=True)
    blind = sorted({host for host, found in seen if not found})
    if blind:
        raise WorkDirNotSharedError(
            f"executors on {', '.join(blind)} do not see the work dir {work_dir} of this driver (on "
            f"{socket.gethostname()}, master {context.master}): Spark's checkpoint and the state files the "
            "executors write live there, and the driver snapshots them. Mount one file system at that same path "
            "on the driver's and every worker's machine (NFS, EFS, a shared volume), or set the spec's work_dir "
            "to such a path; the other paths executors write go to shared storage through the spec "
            "(checkpoint.storage, dead_letter_path, event_times_path, the sink's path or write_ahead_path: s3://...). "
            "See docs/deployment.md, 'What changes on a real cluster'.")
