"""``python -m bench --scenario scale``: what barrierflow's own bookkeeping costs per source
partition, without Spark.

For each partition count (default 100, 1,000 and 10,000) over synthetic offsets:

- **plan**: one call of the pure batch planner (:func:`barrierflow.barriers.planner.plan_batch`)
  with every partition advancing and a barrier requested, the start offset parsed from JSON as
  Spark hands it to ``latestOffset`` (so in another order than what is available); median over
  many calls, wall-clock and CPU time of the calling thread (the latter barely moves with the
  machine's load; the former does).
- **checkpoint**: the real :class:`CheckpointCoordinator` on a synthetic Spark checkpoint
  directory (:mod:`tests.support.synthetic_checkpoint`) and a local store: from the committed barrier
  batch to the stored manifest (reading the offset log, the synchronous snapshot, the upload,
  building and writing the manifest); median over the checkpoints taken.
- **manifest**: the size of one manifest in bytes (it lists every partition's barrier offset).
- **verify**: structural verification of one checkpoint (manifest schema, files with sha256,
  offsets against Spark's log, monotonic against the previous one); median.
- **skew**: the watermark-skew report over all the checkpoints taken (one call).

The numbers are wall-clock medians on whatever machine runs it; compare sizes within one run.
It prints what it ran (command, commit, date, cores, load average) above the table and writes
the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every checkpoint's and verification's
milliseconds besides the medians (:mod:`bench.record`), to bench/results/scale/ (the runs before
it are in bench/results/scale.md), or to ``--markdown FILE`` and ``FILE`` with ``.json``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.planner import PlanRequest, plan_batch
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.errors import UserInputError
from barrierflow.reports.skew import build_skew_report
from barrierflow.spec import parse_spec
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.verification.structural import verify_structure

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report
from tests.support.synthetic_checkpoint import SyntheticSparkCheckpoint

DEFAULT_SIZES = (100, 1_000, 10_000)
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "scale"


@dataclass(frozen=True)
class ScaleResult:
    """One partition count's figures (milliseconds unless named otherwise)."""

    partitions: int
    plan_ms: float
    plan_cpu_ms: float
    checkpoint_ms: float
    manifest_bytes: int
    verify_ms: float
    skew_ms: float
    checkpoints: int
    #: Every checkpoint's milliseconds (barrier batch -> manifest), and every verification's.
    checkpoint_ms_each: tuple[float, ...] = ()
    verify_ms_each: tuple[float, ...] = ()


class _Clock:
    """The coordinator's monotonic clock, advanced by the benchmark past every interval."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000.0


def time_planner(partitions: int, calls: int) -> tuple[float, float]:
    """Median milliseconds of one :func:`plan_batch` over ``partitions`` partitions: wall-clock,
    and CPU time of this thread."""
    # As a source's latestOffset gets them: the start offset back from Spark's offset log (JSON,
    # partitions sorted as strings: "0", "1", "10", ...), what is available in the source's order.
    start = SourceOffset.from_json(SourceOffset({str(p): 1_000 * p for p in range(partitions)}, 4, {}, 0).to_json())
    available = {str(p): 1_000 * p + 700 for p in range(partitions)}
    request = PlanRequest(start=start, available=available, max_records_per_partition=500, requested_barrier=5,
                          paused_partitions=frozenset({"0"}))
    samples, cpu_samples = [], []
    for _ in range(calls):
        began, began_cpu = time.perf_counter(), time.thread_time()
        plan_batch(request)
        samples.append(time.perf_counter() - began)
        cpu_samples.append(time.thread_time() - began_cpu)
    return _median_ms(samples), _median_ms(cpu_samples)


def time_checkpoints(partitions: int, checkpoints: int, folder: Path) -> ScaleResult:
    """Take ``checkpoints`` checkpoints over ``partitions`` partitions; see the module docstring."""
    objects = LocalObjectStore(folder / "store")
    store = CheckpointStore(objects, "scale")
    spark = SyntheticSparkCheckpoint(folder / "spark")
    clock = _Clock()
    coordinator = CheckpointCoordinator(
        pipeline="scale", options=CheckpointSpec(storage="file://unused", interval=1.0, timeout=600.0),
        store=store, spark_checkpoint_dir=spark.root, snapshot_dir=folder / "staging",
        control=ControlChannel(folder / "control"), source_names=["events"], monotonic=clock,
        now=lambda: datetime.now(UTC))
    coordinator.start()
    durations: list[float] = []
    manifests: list[Manifest] = []
    for batch in range(checkpoints):
        clock.t += 2.0
        coordinator.tick()  # triggers checkpoint batch + 1
        checkpoint_id = coordinator.current_epoch()
        offsets = {str(p): 100 * (batch + 1) + p for p in range(partitions)}
        spark.run_batch(batch, offsets, barrier=checkpoint_id)
        began = time.perf_counter()
        coordinator.tick()  # barrier seen: synchronous phase, upload starts
        for pending in list(coordinator.pending.values()):
            if pending.upload is not None:
                pending.upload.result(timeout=600)
        coordinator.tick()  # manifest written
        durations.append(time.perf_counter() - began)
        manifests.append(store.get(checkpoint_id))
    coordinator.drain(timeout=60)
    verify_samples = []
    for previous, manifest in zip([None, *manifests[:-1]], manifests, strict=True):
        began = time.perf_counter()
        _, checks = verify_structure(store, manifest.checkpoint_id, previous=previous, starts={"events": None})
        verify_samples.append(time.perf_counter() - began)
        failed = [c for c in checks if not c.passed]
        if failed:
            raise AssertionError(f"synthetic checkpoint {manifest.checkpoint_id} failed verification: {failed}")
    spec = parse_spec({"version": 1, "name": "scale", "work_dir": str(folder / "work"),
                       "sources": [{"name": "events", "type": "generator"}],
                       "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals"},
                       "sinks": [{"name": "out", "type": "discard"}],
                       "checkpoint": {"storage": f"file://{folder / 'store'}"}}, "scale benchmark")
    build_skew_report(spec, store, last=1)  # warm-up: the first call imports pandas and Great Expectations
    began = time.perf_counter()
    build_skew_report(spec, store)
    skew = time.perf_counter() - began
    return ScaleResult(partitions=partitions, plan_ms=0.0, plan_cpu_ms=0.0, checkpoint_ms=_median_ms(durations),
                       manifest_bytes=len(objects.get_bytes(manifest_key(manifests[-1].checkpoint_id))),
                       verify_ms=_median_ms(verify_samples), skew_ms=skew * 1000.0, checkpoints=checkpoints,
                       checkpoint_ms_each=tuple(d * 1000.0 for d in durations),
                       verify_ms_each=tuple(v * 1000.0 for v in verify_samples))


def run_scale_benchmark(sizes: tuple[int, ...] = DEFAULT_SIZES, *, checkpoints: int = 5, plan_calls: int = 200,
                        markdown: str | None = None, results: Path | None = RESULTS,
                        command: str | None = None) -> list[ScaleResult]:
    """Run every size and print the table; returns the figures. The run's record goes to
    ``markdown`` if given, else into ``results`` (None: no record); ``command``: the command line
    it names."""
    if not sizes or min(sizes) < 1 or checkpoints < 2 or plan_calls < 1:
        raise UserInputError(f"the scale benchmark needs partition counts >= 1, at least 2 checkpoints and 1 plan "
                             f"call (got sizes {sizes}, checkpoints {checkpoints}, plan calls {plan_calls})")
    record = RunRecord.start("scale", command)
    figures: list[ScaleResult] = []
    for partitions in sizes:
        with tempfile.TemporaryDirectory(prefix="barrierflow-scale-") as tmp:
            measured = time_checkpoints(partitions, checkpoints, Path(tmp))
        plan_ms, plan_cpu_ms = time_planner(partitions, plan_calls)
        figures.append(ScaleResult(**{**measured.__dict__, "plan_ms": plan_ms, "plan_cpu_ms": plan_cpu_ms}))
    record_run(record, figures, plan_calls=plan_calls, markdown=markdown, results=results)
    return figures


def render(results: list[ScaleResult]) -> list[str]:
    """The table's lines, one row per partition count."""
    lines = ["| partitions | plan a batch (ms) | plan a batch, CPU (ms) "
             "| checkpoint: barrier batch -> manifest (ms) | manifest (bytes) "
             "| structural verification (ms) | skew report over all (ms) | checkpoints |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.partitions:,} | {r.plan_ms:.3f} | {r.plan_cpu_ms:.3f} | {r.checkpoint_ms:.1f} "
              f"| {r.manifest_bytes:,} | {r.verify_ms:.1f} | {r.skew_ms:.1f} | {r.checkpoints} |" for r in results]
    return lines


def record_run(record: RunRecord, figures: list[ScaleResult], *, plan_calls: int, markdown: str | None,
               results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    with every partition count's figures; returns the paths written."""
    sizes = ", ".join(f"{r.partitions:,}" for r in figures)
    return report(record, f"Bookkeeping per source partition ({sizes} partitions)", 1, render(figures),
                  {"plan_calls": plan_calls, "sizes": [asdict(r) for r in figures]}, results_dir=results,
                  markdown=markdown)
