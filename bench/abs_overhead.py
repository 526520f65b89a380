"""ABS overhead on the reference job (shared/design/BENCHMARKS.md), measured side by side.

Modes, run in one process on one SparkSession, alternating order per round so drift
cancels out: no barrierflow checkpoints; ABS every 1 s; ABS every 5 s; and the paper's
synchronous baseline (every 1 s, processing held until the snapshot is uploaded).
Throughput counts records after each run's first batch (start-up excluded). Each mode
runs on fresh local directories under ``var/bench``, from a settled JVM (the previous run's
state stores unloaded, a full collection: :func:`bench.jvm.settle`); each run also
reports the seconds the JVM spent collecting and its records per JVM CPU-second, to tell a
mode's cost from noise inside the JVM.

With ``bandwidths`` (MB/s; an S3 store only) the checkpoint store is reached through a
:class:`~bench.throttled_link.ThrottledLink` in front of the S3 endpoint, to
emulate an object store farther away than loopback, and the modes are: no checkpoints, then
ABS every 1 s and the synchronous baseline every 1 s at each bandwidth. The paper's claim is
then visible: the baseline holds processing for the upload, so its share of throughput lost
grows as the upload takes longer, while ABS uploads beside processing.

With ``interleave`` each round is one query whose mode changes every few seconds instead
(:mod:`bench.interleaved`): separate runs of one job differ on this machine by more
than ABS costs, and a shared query takes that noise out of the ratios.

It prints what it ran (command, commit, date, cores, load average, rounds) above the table and
writes the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every round's figures per mode
(:mod:`bench.record`), to bench/results/abs-overhead/ (abs-overhead-s3/ with an ``s3://``
store), or to ``--markdown FILE`` and ``FILE`` with ``.json``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.runtime.job import StreamingJob
from barrierflow.spec import load_spec, project_home
from barrierflow.spec.models import GeneratorSourceSpec, StageSpec

from bench.jvm import JvmUsage, settle
from bench.modes import BASELINE, BASELINE_AGAIN, MODES, Mode, Sample, mode_spec, modes_for
from bench.rates import job_rate
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report
from bench.spread import median_spread, per_round, rounds_note
from bench.throttled_link import ThrottledLink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: The throttled link's relay threads run at this nice value: they stand for network hardware,
#: which takes no CPU from processing on a real deployment (like moto, which the documented
#: commands start at ``nice -n 19``). bench/results/abs-overhead-s3/.
LINK_NICE = 19

#: Where each run's record goes: a local store's runs, an S3 store's.
RESULTS, RESULTS_S3 = RESULTS_ROOT / "abs-overhead", RESULTS_ROOT / "abs-overhead-s3"


@contextmanager
def throttled_store_endpoint(bandwidths: Sequence[float] | None) -> Iterator[ThrottledLink | None]:
    """With ``bandwidths``: a throttled link in front of ``AWS_ENDPOINT_URL_S3``, which points at
    the link while the benchmark runs (every store created meanwhile goes through it)."""
    if not bandwidths:
        yield None
        return
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        raise UserInputError("--store-bandwidth throttles the S3 endpoint given by AWS_ENDPOINT_URL_S3; set it "
                             "(e.g. a moto server: http://127.0.0.1:5056) or drop --store-bandwidth")
    previous = os.environ.get("AWS_ENDPOINT_URL_S3")
    with ThrottledLink(endpoint, nice=LINK_NICE) as link:
        os.environ["AWS_ENDPOINT_URL_S3"] = link.url
        try:
            yield link
        finally:
            if previous is None:
                os.environ.pop("AWS_ENDPOINT_URL_S3", None)
            else:
                os.environ["AWS_ENDPOINT_URL_S3"] = previous


def run_benchmark(spec_path: str, *, seconds: float, rounds: int, markdown: str | None = None,
                  store: str | None = None, keys: int | None = None,
                  bandwidths: Sequence[float] | None = None, interleave: float | None = None,
                  results: Path | None = RESULTS, command: str | None = None) -> dict[str, Sample]:
    """Run every mode ``rounds`` times (see the module docstring). ``store``: the checkpoint
    store's URI (``s3://bucket/prefix`` against the endpoint of the standard AWS variables;
    default a local directory); ``keys``: distinct keys of the state (default the spec's), to
    make each checkpoint's upload large enough to matter; ``bandwidths``: MB/s of a throttled
    link to the S3 store, one pair of modes (ABS, synchronous) per value; ``interleave``: run each
    round as one query whose mode changes every ``interleave`` seconds
    (:mod:`bench.interleaved`) instead of one query per mode and round. The run's record goes
    to ``markdown`` if given, else into ``results`` (:data:`RESULTS_S3` instead of the default
    for an S3 store; None: no record); ``command``: the command line it names."""
    if bandwidths and not (store or "").startswith("s3://"):
        raise UserInputError("--store-bandwidth throttles the link to an S3 checkpoint store: give --store "
                             "s3://bucket/prefix too")
    if results is RESULTS and (store or "").startswith("s3://"):
        results = RESULTS_S3
    record = RunRecord.start("abs-overhead", command)
    base = load_spec(spec_path)
    store = run_prefix(store, datetime.now(UTC)) if store else None
    if keys is not None:
        source = base.source
        if not isinstance(source, GeneratorSourceSpec):
            raise UserInputError(f"--state-keys needs a generator source; {spec_path} reads {source.type}")
        # The state store keeps the loaded map (and recent versions) on the driver's heap.
        spark = base.spark.model_copy(update={"conf": {"spark.driver.memory": "4g", **base.spark.conf}})
        base = base.model_copy(update={"sources": [source.model_copy(update={"keys": keys})], "spark": spark})
    root = project_home() / "var" / "bench"
    shutil.rmtree(root, ignore_errors=True)
    modes = modes_for(bandwidths)
    samples = {m.name: Sample() for m in modes}
    spark = StreamingJob(base).spark
    warmup = max(seconds, 45.0)  # until the JIT has settled: throughput still climbs before that
    print(f"warm-up ({warmup:.0f} s) ...", file=sys.stderr)
    StreamingJob(mode_spec(base, modes[0], root / "warmup", store), spark=spark).run(duration=warmup)
    with throttled_store_endpoint(bandwidths) as link:
        if interleave:
            from bench.interleaved import run_interleaved_rounds

            run_interleaved_rounds(base, modes, samples, root, spark, seconds=seconds, rounds=rounds, store=store,
                                   link=link, segment=interleave)
        else:
            _run_rounds(base, modes, samples, root, spark, seconds=seconds, rounds=rounds, store=store, link=link)
    record_run(record, samples, base, seconds=seconds, rounds=rounds, store=store, modes=modes,
               interleave=interleave, bandwidths=bandwidths, markdown=markdown, results=results)
    return samples


def record_run(record: RunRecord, samples: dict[str, Sample], spec: StageSpec, *, seconds: float, rounds: int,
               store: str | None, modes: tuple[Mode, ...], interleave: float | None,
               bandwidths: Sequence[float] | None, markdown: str | None,
               results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    with every round's figures of every mode; returns the paths written."""
    figures = {"pipeline": spec.name, "seconds": seconds, "store": store,
               "keys": spec.source.keys if isinstance(spec.source, GeneratorSourceSpec) else None,
               "bandwidths": list(bandwidths or []), "interleave": interleave,
               "modes": {m.name: {"interval": m.interval, "synchronous": m.synchronous, "bandwidth": m.bandwidth,
                                  **asdict(samples[m.name])} for m in modes}}
    table = render(samples, spec, seconds, rounds, store, modes, interleave)
    return report(record, f"ABS overhead, pipeline {spec.name}", rounds, table.splitlines(), figures,
                  results_dir=results, markdown=markdown)


def run_prefix(store: str, now: datetime) -> str:
    """The store prefix of one benchmark run: ``store`` plus the run's UTC start time, so that
    no run finds an earlier run's checkpoints under its modes' prefixes (a job restores from the
    latest checkpoint it finds, which would start a mode from an earlier run's state)."""
    return f"{store.rstrip('/')}/{now.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def _run_rounds(base: StageSpec, modes: tuple[Mode, ...], samples: dict[str, Sample], root: Path,
                spark: SparkSession, *, seconds: float, rounds: int, store: str | None,
                link: ThrottledLink | None) -> None:
    for r in range(rounds):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        for mode in order:
            if link is not None:
                link.set_rate(mode.bandwidth)
            work = root / f"r{r}-{mode.name.replace(' ', '_').replace('/', '')}"
            job = StreamingJob(mode_spec(base, mode, work, store), spark=spark)
            settle(spark)
            before = JvmUsage.now(spark)
            if mode.interval is None:
                job_run = job.run(duration=seconds, checkpoints=None, on_tick=no_checkpoints)
            else:
                job_run = job.run(duration=seconds)
            used = JvmUsage.now(spark).since(before)
            s = samples[mode.name]
            s.gc_seconds.append(used.gc_seconds)
            s.records_per_cpu_second.append(job_run.records / used.cpu_seconds if used.cpu_seconds else 0.0)
            s.throughput.append(job_rate(job_run))
            s.checkpoints.append(len(job_run.completed))
            s.sync_ms += [m.sync_ms for m in job_run.completed]
            s.async_ms += [m.async_ms for m in job_run.completed]
            s.incremental_bytes += [m.incremental_bytes for m in job_run.completed]
            print(f"round {r + 1} {mode.name:28} {s.throughput[-1]:>12,.0f} rec/s  "
                  f"{len(job_run.completed)} checkpoints  JVM {used.cpu_seconds:.1f} CPU-s, "
                  f"GC {used.gc_seconds:.1f} s, {s.records_per_cpu_second[-1]:,.0f} records per CPU-s",
                  file=sys.stderr)
            shutil.rmtree(work, ignore_errors=True)


def no_checkpoints(job: StreamingJob) -> None:
    """``on_tick`` of a run without barrierflow checkpoints: the coordinator never triggers."""
    if job.coordinator is not None:
        job.coordinator.trigger_limit = 0


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def render(samples: dict[str, Sample], spec: StageSpec, seconds: float, rounds: int,
           store: str | None = None, modes: tuple[Mode, ...] = MODES, interleave: float | None = None) -> str:
    """The table; records/s are the median over the rounds with the lowest and highest round;
    ratios are per round (each mode against the mean of the round's two no-checkpoint runs, so
    drift between rounds cancels), listed, with their median; below it the
    A/A line: per round, the second no-checkpoint run over the first. ``interleave``: the rounds
    ran interleaved in segments of that many seconds (said in the heading)."""
    first, again = samples[BASELINE.name].throughput, samples[BASELINE_AGAIN.name].throughput
    baseline_runs = [(a + b) / 2 for a, b in zip(first, again, strict=True)]
    keys = f"{spec.source.keys:,}" if isinstance(spec.source, GeneratorSourceSpec) else "?"
    lines = [
        f"Benchmark {datetime.now(UTC).isoformat(timespec='seconds')}: pipeline {spec.name}, "
        f"{spec.spark.master}, {spec.spark.shuffle_partitions} shuffle partitions, {keys} keys, "
        f"checkpoint store {store or 'local directory'}, "
        f"{seconds:.0f} s per mode, {rounds} round(s), "
        + (f"interleaved: one query per round, modes alternating in {interleave:g} s segments in orders "
           "balanced for carry-over, each "
           "checkpointing segment ending after its last checkpoint completed" if interleave else
           "one query per mode and round") + rounds_note(rounds),
        "",
        "| mode | records/s: median (lowest-highest) | ratio to no checkpoints (median of per-round ratios) "
        "| per-round ratios "
        "| checkpoints | sync phase median ms "
        "| async phase median ms | uploaded bytes median | JVM GC s per run | records per JVM CPU-s (median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in modes:
        s = samples[mode.name]
        ratios = [t / b for t, b in zip(s.throughput, baseline_runs, strict=True)]
        per_cpu = f"{statistics.median(s.records_per_cpu_second):,.0f}" if s.records_per_cpu_second else "-"
        lines.append(
            f"| {mode.name} | {median_spread(s.throughput)} | {statistics.median(ratios):.3f} | {per_round(ratios)} "
            f"| {sum(s.checkpoints)} | {_median(s.sync_ms)} "
            f"| {_median(s.async_ms)} | {statistics.median(s.incremental_bytes) if s.incremental_bytes else '-'} "
            f"| {', '.join(f'{x:.1f}' for x in s.gc_seconds) or '-'} | {per_cpu} |"
        )
    aa = [b / a for a, b in zip(first, again, strict=True)]
    second = "mode" if interleave else "run"
    lines += ["", f"A/A (the same job twice per round, second {second} / first): {', '.join(f'{x:.2f}' for x in aa)}: "
                  "ratios closer to 1.00 than these differ by are within this machine's noise"]
    return "\n".join(lines)
