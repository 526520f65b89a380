"""The soak scenario (docs/benchmarks.md): many checkpoints at a short interval, retention on.

The reference job (``bench.yaml``: running totals for 10,000 keys, so the state is bounded)
with a throttled generator, checkpoints every ``interval`` seconds and ``retained: 3``.
Retention runs inside the job every ``retain_every`` completed checkpoints, as the retention
DAG would, telling the job's uploader which shared files it deleted. Right after a retention
run, once ``sample_every`` more checkpoints completed, the scenario records the checkpoint
store's size and file count, the work directory's size, and, for both driver processes (the
Python driver and the JVM it talks to), resident memory, open file descriptors and threads.

What a healthy run shows (:meth:`SoakReport.problems` checks it): the store stops growing
once retention reaches steady state, resident memory stays within 10 % of its value at the
first sample (checkpoint ``sample_every``, 100 by default), descriptors and threads do not grow.

Two settings a long-running job needs, and the soak uses (:data:`LONG_RUNNING_CONF`):

* State maintenance every 5 s instead of Spark's 60 s. Each checkpoint references every state
  delta file since the state store's last snapshot, and snapshots are written by maintenance;
  at 60 s the retained checkpoints' files swing with the maintenance cycle (measured 0.5 to 13
  MiB here), at 5 s they stay within a few deltas.
* The driver JVM's heap committed and touched up front (``-Xms`` = the heap size,
  ``-XX:+AlwaysPreTouch``), as production JVM services are run: otherwise resident memory
  rises for minutes while the heap expands to its configured size (measured 700 -> 1,030 MiB
  over the first 300 checkpoints), which says nothing about leaks.

It prints what it ran (command, commit, date, cores, load average) above the table and writes
the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every sample and the verdict
(:mod:`bench.record`), to bench/results/soak/, or to ``--markdown FILE`` and ``FILE`` with
``.json``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.runtime.job import StreamingJob
from barrierflow.spec import load_spec, project_home
from barrierflow.spec.models import GeneratorSourceSpec, StageSpec, TriggerSpec

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report

#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "soak"

#: Slack on "no growth": descriptors and threads come and go with Spark's own pools (the
#: driver JVM runs about 300 threads; its pools grow on demand in the first minutes).
FD_SLACK = 16
THREAD_SLACK = 24
MEMORY_TOLERANCE = 0.10
#: The store's level (median of the later samples) against the earlier one, and the largest
#: single sample against the earlier level; see :meth:`SoakReport.problems`.
STORE_LEVEL_TOLERANCE = 0.25
STORE_SPIKE_FACTOR = 3.0
#: Spark settings of a long-running job (module docstring): frequent state maintenance, a
#: pre-sized driver heap (``spark.driver.memory`` stays Spark's default, 1g).
LONG_RUNNING_CONF = {
    "spark.sql.streaming.stateStore.maintenanceInterval": "5s",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-Xms1g -XX:+AlwaysPreTouch",
}


@dataclass(frozen=True)
class ProcessFigures:
    """Resident memory (MiB), open descriptors and threads of one process (from /proc)."""

    rss_mib: float
    fds: int
    threads: int

    @classmethod
    def of(cls, pid: int) -> ProcessFigures:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss_kib = int(fields["VmRSS"].split()[0])
        return cls(round(rss_kib / 1024, 1), len(os.listdir(f"/proc/{pid}/fd")), int(fields["Threads"]))


@dataclass(frozen=True)
class SoakSample:
    checkpoints: int
    elapsed_s: float
    store_bytes: int
    store_files: int
    work_bytes: int
    python: ProcessFigures
    jvm: ProcessFigures


@dataclass
class SoakReport:
    checkpoints: int
    interval: float
    samples: list[SoakSample] = field(default_factory=list)
    failed: int = 0

    def problems(self, warm_up: int = 0) -> list[str]:
        """What contradicts a bounded run, comparing the samples after the ``warm_up``-th
        (0-based; the default is the first) with it: resident memory within 10 %, descriptors
        and threads within their slack.

        The store is judged on its level, not on single samples: a sample falls at a random
        phase of the state store's maintenance cycle (each checkpoint references the deltas
        since the last state snapshot), so one sample can be twice the next (measured 0.7 to
        1.8 MiB with 5 s maintenance). Files that retention failed to delete would raise the
        level for good, so: the median of the later half of the samples must stay within 25 %
        of the median of the earlier half, and no sample may exceed 3 times that earlier median.
        """
        if len(self.samples) <= warm_up + 1:
            return [f"too few samples ({len(self.samples)}) to judge growth"]
        base, later = self.samples[warm_up], self.samples[warm_up + 1:]
        out = []
        sizes = [s.store_bytes for s in self.samples[warm_up:]]
        half = len(sizes) // 2
        early, late = statistics.median(sizes[:half]), statistics.median(sizes[half:])
        if late > early * (1 + STORE_LEVEL_TOLERANCE):
            out.append(f"store level grew: median {late:.0f} B over the later samples against {early:.0f} B "
                       "over the earlier ones")
        out += [f"store reached {s.store_bytes} B at checkpoint {s.checkpoints}, over {STORE_SPIKE_FACTOR:g} times "
                f"the earlier median {early:.0f} B" for s in later if s.store_bytes > early * STORE_SPIKE_FACTOR]
        for s in later:
            for name, now, then in (("python", s.python, base.python), ("jvm", s.jvm, base.jvm)):
                if now.rss_mib > then.rss_mib * (1 + MEMORY_TOLERANCE):
                    out.append(f"{name} resident memory {now.rss_mib} MiB at checkpoint {s.checkpoints}, more than "
                               f"10 % over {then.rss_mib} MiB at checkpoint {base.checkpoints}")
                if now.fds > then.fds + FD_SLACK:
                    out.append(f"{name} descriptors grew {then.fds} -> {now.fds} by checkpoint {s.checkpoints}")
                if now.threads > then.threads + THREAD_SLACK:
                    out.append(f"{name} threads grew {then.threads} -> {now.threads} by checkpoint {s.checkpoints}")
        return out


def soak_spec(base: StageSpec, work: Path, interval: float, keys: int | None = None) -> StageSpec:
    """The reference job, throttled, checkpointing every ``interval`` s into ``work`` (``keys``:
    distinct keys in the state; default the spec's)."""
    source = base.source
    assert isinstance(source, GeneratorSourceSpec), "the bench spec needs a generator source"
    source = source.model_copy(update={"rows_per_second": 5_000.0, "max_records_per_batch": 2_000,
                                       "records_per_partition": None, "keys": keys or source.keys})
    checkpoint = base.checkpoint.model_copy(update={"storage": f"file://{work / 'checkpoints'}",
                                                    "interval": interval, "retained": 3, "timeout": 120.0})
    spark = base.spark.model_copy(update={"conf": {**base.spark.conf, **LONG_RUNNING_CONF}})
    return base.model_copy(update={"work_dir": str(work / "work"), "sources": [source], "spark": spark,
                                   "trigger": TriggerSpec(interval=0.0), "checkpoint": checkpoint})


def _tree(path: Path) -> tuple[int, int]:
    sizes = [p.stat().st_size for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return sum(sizes), len(sizes)


def run_soak(spec: StageSpec, *, checkpoints: int, sample_every: int, retain_every: int = 10,
             spark: Any = None) -> SoakReport:
    """Run ``spec`` until ``checkpoints`` completed, retaining and sampling as the module says."""
    from barrierflow.retention.plan import retain

    job = StreamingJob(spec, spark=spark)
    session = job.spark
    jvm_pid = int(session._jvm.java.lang.ProcessHandle.current().pid())  # the py4j gateway
    report = SoakReport(checkpoints, spec.checkpoint.interval)
    store_root = Path(spec.checkpoint.storage.removeprefix("file://"))
    started = time.monotonic()
    state = {"retained_at": 0, "sampled_at": 0}

    def on_tick(running: StreamingJob) -> None:
        coordinator = running.coordinator
        if coordinator is None:
            return
        done = coordinator.completed_count
        if done - state["retained_at"] < retain_every:
            return
        state["retained_at"] = done
        retain(spec, running.store, forget=coordinator.uploader.forget, layout=running.layout)
        if done - state["sampled_at"] >= sample_every:  # right after a retention run: comparable
            state["sampled_at"] = done
            store_bytes, store_files = _tree(store_root)
            work_bytes, _ = _tree(Path(spec.work_dir))
            report.samples.append(SoakSample(done, round(time.monotonic() - started, 1), store_bytes, store_files,
                                             work_bytes, ProcessFigures.of(os.getpid()), ProcessFigures.of(jvm_pid)))

    result = job.run(checkpoints=checkpoints, on_tick=on_tick)
    report.failed = len(result.failed)
    return report


def render(report: SoakReport) -> str:
    lines = [
        f"Soak: {report.checkpoints} checkpoints every {report.interval:g} s, retained 3, retention every 10 "
        f"checkpoints; {report.failed} failed checkpoints.",
        "",
        "| checkpoints | elapsed s | store MiB | store files | work dir MiB | python RSS MiB | JVM RSS MiB "
        "| fds (py/jvm) | threads (py/jvm) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in report.samples:
        lines.append(f"| {s.checkpoints} | {s.elapsed_s} | {s.store_bytes / 2**20:.2f} | {s.store_files} "
                     f"| {s.work_bytes / 2**20:.1f} | {s.python.rss_mib} | {s.jvm.rss_mib} "
                     f"| {s.python.fds}/{s.jvm.fds} | {s.python.threads}/{s.jvm.threads} |")
    problems = report.problems()
    lines += ["", "Bounded: " + ("yes (store level, memory within 10 %, descriptors, threads)" if not problems
                                  else "NO: " + "; ".join(problems))]
    return "\n".join(lines)


def run_soak_benchmark(spec_path: str, *, checkpoints: int = 1000, interval: float = 0.1,
                       sample_every: int = 100, markdown: str | None = None, results: Path | None = RESULTS,
                       command: str | None = None) -> SoakReport:
    """``python -m bench --scenario soak``: run and print the table. The run's record goes to
    ``markdown`` if given, else into ``results`` (None: no record); ``command``: the command line
    it names."""
    record = RunRecord.start("soak", command)
    work = project_home() / "var" / "bench" / "soak"
    shutil.rmtree(work, ignore_errors=True)
    report = run_soak(soak_spec(load_spec(spec_path), work, interval), checkpoints=checkpoints,
                      sample_every=sample_every)
    record_run(record, report, markdown=markdown, results=results)
    return report


def record_run(record: RunRecord, soak: SoakReport, *, markdown: str | None,
               results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    with every sample and the problems found; returns the paths written."""
    figures = {**asdict(soak), "problems": soak.problems()}
    return report(record, f"Soak, {soak.checkpoints} checkpoints every {soak.interval:g} s", 1,
                  render(soak).splitlines(), figures, results_dir=results, markdown=markdown)
