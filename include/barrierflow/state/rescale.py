"""Rescaling one stage's state offline: Spark's own offline repartition on a scratch copy.

:func:`rescale_checkpoint` materializes a completed checkpoint (a savepoint) of one stage into
a fresh scratch directory (sha256 checked; the store and the stage's live Spark checkpoint are
never touched), and runs Spark 4.2's offline repartition over that copy
(``StreamingCheckpointManager.repartition``, the JVM's ``OfflineStateRepartitionRunner``): it
adds batch V+1 to the copy's offset log, with the offsets of the barrier batch V and
``spark.sql.shuffle.partitions`` set to the new count, reads every state store at V with
Spark's ``statestore`` reader, repartitions the rows by the same partition key the stateful
operator hashes (``repartition(n, partition_key)``), writes each new partition's state as
version V+2 and commits batch V+1 with V's commit metadata. Batch V+1 reads no input and
writes no output; a query restarted over the copy continues at V+2 with the new partition
count.

What it accepts: state written with the RocksDB provider (``spark.state_store: rocksdb``, on
barrierflow's checkpoint format version 1). Spark refuses the HDFS-backed provider
(``STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER``): the rewriter reads state in
the ``statestore`` source's internal all-column-families mode (raw key and value bytes of
every column family, written back byte for byte), and the source allows that mode only when
the checkpoint's provider class is ``RocksDBStateStoreProvider``. :func:`rescale_checkpoint`
refuses such a stage first (:class:`RescaleNotSupportedError`) rather than letting Spark
write half a batch into the copy.

The result (:class:`RescaledCheckpoint`) is the copy's directory and the files a restart at
V+2 needs (:func:`~barrierflow.checkpointing.snapshot.select_files`), partitions beyond the new
count left out; the caller records them as a new savepoint.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.snapshot import select_files
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.spark import commit_log
from barrierflow.spark.session import apply_state_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec.models import SparkSpec

__all__ = ["RescaleFailedError", "RescaleNotSupportedError", "RescaledCheckpoint", "rescale_checkpoint"]


class RescaleNotSupportedError(UserInputError):
    """The stage's state cannot be rescaled by Spark's offline repartition (its provider)."""


class RescaleFailedError(BarrierflowError):
    """Spark's offline repartition failed on the scratch copy (nothing in the store changed)."""


@dataclass(frozen=True)
class RescaledCheckpoint:
    """The rewritten copy of one stage's checkpoint.

    Attributes:
        directory: the scratch Spark checkpoint (valid inside the :func:`rescale_checkpoint` block).
        batch_id: the repartition batch V+1 (a restart resumes at V+2).
        partitions: the new partition count.
        files: the relative paths a restart at ``batch_id + 1`` needs.
        state_bases: the RocksDB zip version each state partition loads from.
        repartition_seconds: the time Spark's repartition took (materializing not included).
        materialize_seconds: the time the copy took to materialize from the store.
    """

    directory: Path
    batch_id: int
    partitions: int
    files: list[str]
    state_bases: dict[str, int]
    repartition_seconds: float
    materialize_seconds: float


def _partition_of(relpath: str) -> int | None:
    """The state partition a ``state/<op>/<partition>/...`` path belongs to, else None."""
    parts = relpath.split("/")
    if len(parts) >= 4 and parts[0] == "state" and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[2])
    return None


@contextmanager
def rescale_checkpoint(spark: SparkSession, *, pipeline: str, stage: str, store: CheckpointStore,
                       manifest: Manifest, spark_spec: SparkSpec, partitions: int,
                       scratch: str | None = None) -> Iterator[RescaledCheckpoint]:
    """Materialize checkpoint ``manifest`` of ``stage`` into a scratch directory, repartition its
    state into ``partitions`` partitions with Spark's offline repartition (module docstring) and
    yield the :class:`RescaledCheckpoint`; the directory is deleted when the block ends.

    Raises:
        RescaleNotSupportedError: the stage's state store is not RocksDB (nothing is read).
        CheckpointCorruptError: a file of the checkpoint is missing or altered in the store.
        RescaleFailedError: Spark's repartition failed (its first message line is quoted).
    """
    if spark_spec.state_store != "rocksdb":
        raise RescaleNotSupportedError(
            f"stage {stage} of pipeline {pipeline} keeps its state with the {spark_spec.state_store} state store, "
            "which Spark's offline repartition does not rewrite (it reads and writes state through RocksDB column "
            "families only: STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER); rescaling it is not yet "
            "supported. Keep spark.shuffle_partitions as it is, or run a new pipeline with "
            "spark.state_store: rocksdb from the start. Nothing was changed.")
    tmp = Path(tempfile.mkdtemp(prefix=f"rescale-{stage}-{manifest.checkpoint_id}-", dir=scratch))
    try:
        started = time.perf_counter()
        done = materialize_checkpoint(store, manifest, tmp / "spark-checkpoint")
        materialized = time.perf_counter() - started
        apply_state_store(spark, spark_spec)
        _ = spark.streams  # registers the StateStoreCoordinator the statestore reader reports to
        started = time.perf_counter()
        try:
            spark._streamingCheckpointManager.repartition(str(done.directory), partitions)
        except Exception as exc:
            text = str(exc).strip()
            first = next((line for line in text.splitlines() if "Exception" in line or "Error" in line),
                         text.splitlines()[0] if text else type(exc).__name__)
            raise RescaleFailedError(
                f"Spark's offline repartition of checkpoint {manifest.checkpoint_id} of stage {stage} (pipeline "
                f"{pipeline}) into {partitions} partitions failed on a scratch copy: {first[:600]}; nothing in "
                "the checkpoint store changed") from None
        seconds = time.perf_counter() - started
        batch = manifest.spark_batch_id + 1
        if commit_log.latest_committed(done.directory) != batch:
            raise RescaleFailedError(
                f"Spark's offline repartition of checkpoint {manifest.checkpoint_id} of stage {stage} (pipeline "
                f"{pipeline}) did not commit batch {batch} in its scratch copy; nothing in the checkpoint store "
                "changed")
        for operator in (done.directory / "state").iterdir():
            if operator.name.isdigit():
                for part in operator.iterdir():
                    if part.name.isdigit() and int(part.name) >= partitions:
                        shutil.rmtree(part)  # partitions of the old count beyond the new one: never read again
        files, bases = select_files(done.directory, batch, batch)
        files = [f for f in files if (_partition_of(f) or 0) < partitions]
        yield RescaledCheckpoint(done.directory, batch, partitions, files, bases, seconds, materialized)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
