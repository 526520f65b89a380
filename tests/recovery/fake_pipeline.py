"""A Parquet-sink pipeline with completed checkpoints, without Spark: the real coordinator
and sink over a hand-written Spark checkpoint directory in the job's work dir."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.sinks.factory import build_sink
from barrierflow.spec import StageSpec, load_spec
from barrierflow.testing import write_ahead_batch
from barrierflow.workdir.layout import JobLayout

from tests.checkpointing.fake_spark import FakeSparkCheckpoint
from tests.pipeline_specs import spec_dict, write_spec


class Clock:
    """A monotonic clock the test advances by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def parquet_pipeline(tmp_path: Path, checkpoints: int, spec_dir: Path | None = None
                     ) -> tuple[Path, StageSpec, CheckpointStore]:
    """Pipeline ``t`` (spec file in ``spec_dir``, default ``tmp_path``) with the real Parquet
    sink and ``checkpoints`` completed checkpoints of one batch each: their transactions are
    committed and record their batches' end offsets."""
    data = spec_dict(tmp_path)
    data["sinks"] = [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]
    spec_path = write_spec(spec_dir or tmp_path, data, *(["t.yaml"] if spec_dir else []))
    spec = load_spec(spec_path)
    layout = JobLayout.for_spec(spec)
    store = CheckpointStore.for_spec(spec)
    spark = FakeSparkCheckpoint(layout.spark_checkpoint)
    clock = Clock()
    coordinator = CheckpointCoordinator(
        pipeline=spec.name, options=spec.checkpoint, store=store, spark_checkpoint_dir=layout.spark_checkpoint,
        snapshot_dir=layout.snapshots, control=ControlChannel(layout.control), source_names=["events"],
        sinks=[build_sink(spec, store, layout, attempt=0)], monotonic=clock)
    coordinator.start()
    for batch in range(checkpoints):
        clock.t += 1.0
        coordinator.tick()
        write_ahead_batch(f"file://{tmp_path / 'out' / '_staging'}", batch,
                          pa.table({"key": [batch], "n": [batch * 10]}))
        spark.run_batch(batch, {"0": (batch + 1) * 10, "1": (batch + 1) * 10}, barrier=batch + 1)
        coordinator.tick()
        for pending in list(coordinator.pending.values()):
            assert pending.upload is not None
            pending.upload.exception(timeout=10)
        coordinator.tick()
        coordinator.flush_sinks()
    return spec_path, spec, store
