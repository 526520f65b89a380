"""What 1 s ABS checkpoints cost a job: the same job with and without them, alternating.

``python -m bench --scenario checkpoint-cost --job reference|kafka --rounds N``:

* ``reference``: the reference job (``include/pipelines/bench.yaml``: generator -> keyed running
  count and sum -> discard, ``local[2]``) for ``--seconds`` per mode and round;
* ``kafka``: Kafka JSON -> keyed totals with Spark's connector and the JVM JSON decoder
  (``reader: spark``, :func:`bench.kafka_source.kafka_source`) over one topic of
  ``--records`` records on the embedded broker, each run ending at the batch that read its last
  record (:class:`ReadAll`).

Both modes run barrierflow's own run loop on one SparkSession; the only difference is that
"no checkpoints" never triggers one (``trigger_limit = 0``: no barrier, no snapshot, no upload,
no manifest, no sink pre-commit or commit). A warm-up run of each mode comes first (figures
dropped), then ``--rounds`` rounds, each running both modes, the order reversed every other
round. Records/s are counted after the first batch (:mod:`bench.rates`), the same way in both
modes; the ratio of each round (with / without, the two ran back to back), their median and
spread are printed. Beside them, per run, the CPU seconds of this Python process (coordinator,
snapshot, upload, manifests) and of the driver JVM (Spark: the executors of ``local[2]`` run in
it) and its GC seconds: equal records per JVM CPU-second in both modes with a lower rate with
checkpoints say the checkpoint takes the machine's CPU or disk from Spark; fewer records per JVM
CPU-second say Spark itself does more work with checkpoints.

Beside the rates, the profile of each run: Spark's per-batch ``durationMs`` parts
(``StreamingQueryProgress``: ``addBatch``, ``commitOffsets``, ``walCommit``,
``queryPlanning``, ``latestOffset``, ``getBatch``, ``triggerExecution``) split into barrier
batches (the batch whose commit a checkpoint snapshots), the batch after each barrier batch
(during which the asynchronous phase, upload and sink pre-commit, runs) and the others, medians
per part; and the CPU seconds of this Python process (coordinator, snapshot, upload) per run.

It prints what it ran (command, commit, date, cores, load average, rounds) and writes the record
(:mod:`bench.record`) ``bench/results/checkpoint-cost/<YYYY-MM-DD-HHMM>-<job>.md`` and ``.json``
with every run's figures (or ``--markdown FILE`` and ``FILE`` with ``.json``).
The numbers are printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.rates import job_rate, records_through
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report

WITH, WITHOUT = "ABS 1 s", "no checkpoints"
#: The A/A control (``--aa``): the run without checkpoints once more in each round, so the
#: spread of two identical runs is measured beside the with / without ratio.
AGAIN = "no checkpoints, again"
#: The per-batch parts of Spark's progress reported, in this order.
PARTS = ("triggerExecution", "addBatch", "latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")
#: How often a run's recent progress reports are read (seconds): Spark keeps the newest 100.
PROGRESS_POLL = 5.0
RESULTS = RESULTS_ROOT / "checkpoint-cost"
#: How long the embedded broker may take to answer (30 s, the Kafka scenario's, was too short twice
#: at a load average of 20 on the 2-core machine; a quiet machine starts it in seconds).
BROKER_START_SECONDS = 180.0


@dataclass
class RunFigures:
    """One run of one mode: its rate (records/s after the first batch), batches, checkpoints, the
    CPU seconds of this process, and each batch's progress parts with its kind (``barrier``,
    ``after barrier``, ``other``)."""

    mode: str
    round: int
    rate: float
    records: int
    batches: int
    checkpoints: int
    driver_cpu_seconds: float
    jvm_cpu_seconds: float = 0.0
    gc_seconds: float = 0.0
    batch_parts: dict[int, dict[str, float]] = field(default_factory=dict)
    batch_kind: dict[int, str] = field(default_factory=dict)
    sync_ms: list[float] = field(default_factory=list)
    async_ms: list[float] = field(default_factory=list)
    #: CPU seconds of the JVM's child processes (Spark's Python workers) over the run.
    workers_cpu_seconds: float = 0.0
    #: Share of the machine's CPU time that was busy over the run (``/proc/stat``), 0-1.
    machine_busy: float = 0.0
    #: Wall seconds of the run.
    seconds: float = 0.0


class ProgressLog:
    """An ``on_tick`` that collects the query's progress reports (every :data:`PROGRESS_POLL` s)
    and, without checkpoints, keeps the coordinator from triggering any."""

    def __init__(self, checkpoints: bool) -> None:
        self.checkpoints = checkpoints
        self.parts: dict[int, dict[str, float]] = {}
        self._next = 0.0

    def __call__(self, job: Any) -> None:
        if not self.checkpoints and job.coordinator is not None:
            job.coordinator.trigger_limit = 0
        now = time.monotonic()
        if now >= self._next and job.query is not None:
            self._next = now + PROGRESS_POLL
            self.read(job.query)

    def read(self, query: Any) -> None:
        try:
            events = list(query.recentProgress)
        except Exception:  # the query is stopping: keep what is known
            return
        for event in events:
            rows = int(_field(event, "numInputRows"))
            if rows <= 0:
                continue
            durations = _field(event, "durationMs") or {}
            self.parts[int(_field(event, "batchId"))] = {p: float(durations.get(p, 0)) for p in PARTS}


def _field(event: Any, name: str) -> Any:
    try:
        return event[name]
    except (TypeError, KeyError):
        return getattr(event, name, None)


def classify(batches: Sequence[int], barrier_batches: Sequence[int]) -> dict[int, str]:
    """Each batch's kind: ``barrier`` (a checkpoint's barrier batch), ``after barrier`` (the
    next batch, during which that checkpoint's asynchronous phase runs) or ``other``."""
    barriers = set(barrier_batches)
    return {b: "barrier" if b in barriers else "after barrier" if b - 1 in barriers else "other" for b in batches}


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot (``/proc/stat``'s first line)."""
    with open("/proc/stat", encoding="ascii") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def _children_cpu_seconds(root: int) -> float:
    """CPU seconds (their own and their reaped children's) of the live descendants of ``root``."""
    from bench.proc_stat import descendant_ticks

    return sum(descendant_ticks(root, reaped_children=True).values()) / os.sysconf("SC_CLK_TCK")


def run_job(make_job: Callable[[], Any], mode: str, number: int, jfr_dir: Path | None = None,
            **run_args: Any) -> RunFigures:
    """One run of the job ``make_job`` builds, in ``mode``; the first batch is left out of the
    profile (it carries the query's start). With ``jfr_dir``, a JFR recording of the driver JVM
    over the run goes to ``jfr_dir/<round>-<mode>.jfr`` (:mod:`bench.jfr_profile`); the warm-up
    runs (round 0) are recorded too, so that the JVM's first recording, which starts the
    recorder and recompiles code, falls in a run whose figures are dropped."""
    from bench.jfr_profile import Recording
    from bench.jvm import JvmUsage, jvm_pid

    job = make_job()
    log = ProgressLog(mode == WITH)
    pid = jvm_pid(job.spark)
    recording = None
    if jfr_dir is not None:
        recording = Recording(pid, f"r{number}-{mode_slug(mode)}", jfr_dir / f"{number}-{mode_slug(mode)}.jfr")
        recording.start()
    before, jvm_before, workers_before = os.times(), JvmUsage.now(job.spark), _children_cpu_seconds(pid)
    machine_before, wall_before = _machine_ticks(), time.monotonic()
    result = job.run(on_tick=log, **run_args)
    after, jvm = os.times(), JvmUsage.now(job.spark).since(jvm_before)
    workers = _children_cpu_seconds(pid) - workers_before
    machine_after, wall = _machine_ticks(), time.monotonic() - wall_before
    if recording is not None:
        recording.stop()
    busy = (machine_after[0] - machine_before[0]) / max(1, machine_after[1] - machine_before[1])
    if job.query is not None:
        log.read(job.query)
    parts = {b: p for b, p in log.parts.items() if b != min(log.parts, default=-1)}
    barriers = [m.spark_batch_id for m in result.completed]
    return RunFigures(mode, number, job_rate(result), result.records, result.batches, len(result.completed),
                      (after.user + after.system) - (before.user + before.system), jvm.cpu_seconds,
                      jvm.gc_seconds, parts, classify(sorted(parts), barriers),
                      [m.sync_ms for m in result.completed], [m.async_ms for m in result.completed],
                      workers_cpu_seconds=workers, machine_busy=busy, seconds=wall)


def mode_slug(mode: str) -> str:
    """A file-name form of a mode's name."""
    return {WITH: "abs", WITHOUT: "none", AGAIN: "none-again"}.get(mode, mode.replace(" ", "-"))


class ReadAll:
    """``until`` of a Kafka run: true once the committed batches read ``records`` records. Both
    modes stop the same way (``until_exhausted`` would wait for two checkpoints at the topic's
    end, which a run without checkpoints never takes)."""

    def __init__(self, records: int) -> None:
        self.records = records
        self._batch: int | None = None
        self._done = False

    def __call__(self, job: Any) -> bool:
        batch = job.runner.latest_batch
        if batch is not None and batch != self._batch:
            self._batch = batch
            self._done = records_through(job.layout.spark_checkpoint, batch) >= self.records
        return self._done


def round_modes(aa: bool) -> tuple[str, ...]:
    """The modes of a round, in the order of odd rounds (even rounds run them reversed)."""
    return (WITHOUT, WITH, AGAIN) if aa else (WITHOUT, WITH)


def alternate(run: Callable[[str, int], RunFigures], rounds: int, aa: bool = False) -> list[RunFigures]:
    """A warm-up of both modes (dropped), then ``rounds`` rounds of each mode (with ``aa`` the
    run without checkpoints once more, :data:`AGAIN`), the order reversed every other round."""
    for mode in (WITHOUT, WITH):
        run(mode, 0)
    runs = []
    modes = round_modes(aa)
    for number in range(1, rounds + 1):
        for mode in modes if number % 2 else tuple(reversed(modes)):
            figures = run(mode, number)
            runs.append(figures)
            print(f"round {number} {mode:15} {figures.rate:>12,.0f} rec/s  {figures.batches} batches  "
                  f"{figures.checkpoints} checkpoints  this process {figures.driver_cpu_seconds:.1f} CPU-s",
                  file=sys.stderr, flush=True)
    return runs


def round_ratios(runs: Sequence[RunFigures], mode: str = WITH) -> list[float]:
    """Per round: the rate of ``mode`` (default with checkpoints) over the rate without."""
    out = []
    for number in sorted({r.round for r in runs}):
        rate = {r.mode: r.rate for r in runs if r.round == number}
        if rate.get(WITHOUT) and not math.isnan(rate.get(mode, math.nan)):
            out.append(rate[mode] / rate[WITHOUT])
    return out


def part_medians(runs: Sequence[RunFigures]) -> dict[str, dict[str, Any]]:
    """Per (mode, batch kind): batches and the median of each part in ms."""
    groups: dict[str, list[dict[str, float]]] = {}
    for r in runs:
        for batch, parts in r.batch_parts.items():
            groups.setdefault(f"{r.mode}: {r.batch_kind[batch]}", []).append(parts)
    return {key: {"batches": len(rows), **{p: statistics.median(row[p] for row in rows) for p in PARTS}}
            for key, rows in sorted(groups.items())}


def render(job: str, header: Mapping[str, Any], runs: Sequence[RunFigures]) -> str:
    ratios = round_ratios(runs)
    lines = [f"Checkpoint cost, {job} job: {header['command']}", "",
             f"commit {header['commit']}, {header['started']} UTC, {header['cores']} cores, load average (1 min) "
             f"{header['load_start']:.2f} at the start, {header['load_end']:.2f} at the end; {header['what']}", "",
             "| mode | records/s per round (after the first batch) | median | checkpoints per run "
             "| this process CPU-s per run | JVM CPU-s per run | Python workers CPU-s per run | machine busy per run "
             "| JVM GC s per run | records per JVM CPU-s (median) |",
             "|---|---|---:|---|---|---|---|---|---|---:|"]
    for mode in (WITHOUT, WITH, AGAIN):
        mine = [r for r in runs if r.mode == mode]
        if not mine:
            continue
        median = statistics.median(r.rate for r in mine)
        per_cpu = statistics.median(r.records / r.jvm_cpu_seconds if r.jvm_cpu_seconds else 0.0 for r in mine)
        lines.append(f"| {mode} | {', '.join(f'{r.rate:,.0f}' for r in mine)} "
                     f"| {median:,.0f} | {', '.join(str(r.checkpoints) for r in mine)} "
                     f"| {', '.join(f'{r.driver_cpu_seconds:.1f}' for r in mine)} "
                     f"| {', '.join(f'{r.jvm_cpu_seconds:.1f}' for r in mine)} "
                     f"| {', '.join(f'{r.workers_cpu_seconds:.1f}' for r in mine)} "
                     f"| {', '.join(f'{r.machine_busy:.0%}' for r in mine)} "
                     f"| {', '.join(f'{r.gc_seconds:.1f}' for r in mine)} "
                     f"| {per_cpu:,.0f} |")
    if ratios:
        lines += ["", f"with / without, per round (back to back): {', '.join(f'{x:.3f}' for x in ratios)}; median "
                      f"{statistics.median(ratios):.3f}, spread {min(ratios):.3f}-{max(ratios):.3f}"]
    again = round_ratios(runs, AGAIN)
    if again:
        lines += ["", f"A/A: no checkpoints again / without, per round: {', '.join(f'{x:.3f}' for x in again)}; "
                      f"median {statistics.median(again):.3f}, spread {min(again):.3f}-{max(again):.3f}"]
    lines += ["", "Spark's per-batch durations (ms, medians over the measured runs; the first batch of each run "
                  "left out):", "", "| mode: batch kind | batches | " + " | ".join(PARTS) + " |",
              "|---|---:|" + "---:|" * len(PARTS)]
    for key, row in part_medians(runs).items():
        lines.append(f"| {key} | {row['batches']} | " + " | ".join(f"{row[p]:.0f}" for p in PARTS) + " |")
    sync = [x for r in runs for x in r.sync_ms]
    asyn = [x for r in runs for x in r.async_ms]
    if sync:
        lines += ["", f"checkpoints: {len(sync)}, synchronous phase median {statistics.median(sync):.1f} ms, "
                      f"asynchronous phase median {statistics.median(asyn):.1f} ms"]
    return "\n".join(lines)


def profile_table(runs: Sequence[RunFigures], jfr_dir: Path) -> str:
    """The JFR recordings of the measured runs in ``jfr_dir``, summed per mode, side by side."""
    from bench.jfr_profile import HotMethods, hot_methods, render_profile

    by_mode: dict[str, HotMethods] = {}
    seconds: dict[str, float] = {}
    for r in runs:
        path = jfr_dir / f"{r.round}-{mode_slug(r.mode)}.jfr"
        if not path.exists():
            continue
        by_mode.setdefault(r.mode, HotMethods()).add(hot_methods(path))
        seconds[r.mode] = seconds.get(r.mode, 0.0) + r.seconds
    modes = [m for m in (WITHOUT, WITH, AGAIN) if m in by_mode]
    return render_profile(by_mode, seconds, modes) + f"\n\nRecordings: {jfr_dir}"


def reference_runs(spec_path: str, seconds: float, rounds: int, aa: bool = False,
                   jfr_dir: Path | None = None) -> tuple[list[RunFigures], str]:
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.spec import load_spec, project_home

    from bench.jvm import settle
    from bench.modes import BASELINE, Mode, mode_spec

    base = load_spec(spec_path)
    root = project_home() / "var" / "bench-checkpoint-cost"
    shutil.rmtree(root, ignore_errors=True)
    spark = StreamingJob(base).spark
    modes = {WITHOUT: BASELINE, AGAIN: BASELINE, WITH: Mode(WITH, 1.0)}

    def run(mode: str, number: int) -> RunFigures:
        work = root / f"r{number}-{mode_slug(mode)}"
        settle(spark)
        try:
            return run_job(lambda: StreamingJob(mode_spec(base, modes[mode], work), spark=spark), mode, number,
                           jfr_dir=jfr_dir, duration=seconds)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return alternate(run, rounds, aa), f"{spec_path}, {seconds:g} s per run"


def kafka_runs(records: int, batch: int, partitions: int, rounds: int, cap: float, aa: bool = False,
               jfr_dir: Path | None = None) -> tuple[list[RunFigures], str]:
    from barrierflow.kafka_io.embedded_broker import embedded_broker
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.runtime.session import build_session
    from barrierflow.spec import parse_spec
    from barrierflow.spec.models import SparkSpec

    from bench.kafka_source import kafka_source, pipeline_spec, produce

    with ExitStack() as stack:
        servers = stack.enter_context(embedded_broker(None, BROKER_START_SECONDS, 10.0))
        topic = f"kcost-{uuid.uuid4().hex[:8]}"
        produce(servers, topic, records, partitions)
        spark = build_session(SparkSpec.model_validate({"master": "local[2]", "shuffle_partitions": 2}),
                              app_name="barrierflow-checkpoint-cost", jvm_sets=["spark-kafka"])
        source = kafka_source(servers, topic, batch, reader="spark")

        def run(mode: str, number: int) -> RunFigures:
            work = Path(tempfile.mkdtemp(prefix="bf-kcost-"))
            try:
                spec = pipeline_spec(work, source)
                if mode != WITH:  # as bench.modes.mode_spec: no trigger is due before on_tick stops them
                    spec["checkpoint"]["interval"] = 3600.0
                return run_job(lambda: StreamingJob(parse_spec(spec), spark=spark), mode, number,
                               jfr_dir=jfr_dir, until=ReadAll(records), duration=cap)
            finally:
                shutil.rmtree(work, ignore_errors=True)

        try:
            return alternate(run, rounds, aa), (f"{records:,} JSON records in {partitions} partitions on the embedded "
                                            f"broker, {batch:,} per partition and batch, reader: spark")
        finally:
            spark.stop()


def run_checkpoint_cost(job: str, *, rounds: int, seconds: float, spec_path: str, records: int = 8_000_000,
                        batch: int = 100_000, partitions: int = 4, cap: float = 300.0,
                        markdown: str | None = None, aa: bool = False,
                        jfr_dir: str | None = None, results: Path | None = RESULTS) -> list[RunFigures]:
    """Run the comparison for ``job`` (``reference`` or ``kafka``), print the table and write the
    markdown and JSON records (module docstring; ``results`` None and no ``markdown``: none).
    ``aa`` adds the A/A control (:data:`AGAIN`); ``jfr_dir`` records the driver JVM of each
    measured run there and adds the modes' execution samples side by side to the record
    (:mod:`bench.jfr_profile`)."""
    command = (f"python -m bench --scenario checkpoint-cost --job {job} --rounds {rounds}"
               + (f" --seconds {seconds:g}" if job == "reference" else f" --records {records}")
               + (" --aa" if aa else "") + (f" --jfr {jfr_dir}" if jfr_dir else ""))
    record = RunRecord.start("checkpoint-cost", command)
    jfr = Path(jfr_dir) / f"{record.started:%Y%m%d-%H%M}-{job}" if jfr_dir else None
    if job == "reference":
        runs, what = reference_runs(spec_path, seconds, rounds, aa, jfr)
    else:
        runs, what = kafka_runs(records, batch, partitions, rounds, cap, aa, jfr)
    record_run(record, job, what, runs, rounds=rounds, jfr=jfr, markdown=markdown, results=results)
    return runs


def record_run(record: RunRecord, job: str, what: str, runs: Sequence[RunFigures], *, rounds: int,
               jfr: Path | None = None, markdown: str | None = None,
               results: Path | None = RESULTS) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`, with the JFR profile when ``jfr``) and
    write the record (:func:`bench.record.report`, named after ``job``) with every run's figures,
    the per-round ratios and the batch parts' medians; returns the paths written."""
    header: dict[str, Any] = {"command": record.command, "commit": record.commit,
                              "started": f"{record.started:%Y-%m-%d %H:%M}", "cores": record.cores,
                              "load_start": record.load_start, "load_end": record.end_load(), "what": what}
    table = render(job, header, runs)
    if jfr is not None:
        table += "\n\n" + profile_table(runs, jfr)
    ratios = round_ratios(runs)
    figures = {"job": job, "what": what, "ratios": ratios,
               "ratio_median": statistics.median(ratios) if ratios else None,
               "parts": part_medians(runs), "runs": [asdict(r) for r in runs]}
    return report(record, f"Checkpoint cost, {job} job", rounds, table.splitlines(), figures, results_dir=results,
                  suffix=job, markdown=markdown)
