"""``python -m bench --compare flink-sql``: the reference job on barrierflow and on Flink SQL,
side by side in one command (docs/benchmarks.md).

Per round, six runs, alternating which system goes first (A B, then B A) so that drift of the
shared machine falls on both: barrierflow's reference job (``include/pipelines/bench.yaml``:
10,000 keys, running count and sum, discard sink, ``local[2]``) without checkpoints and with
ABS every 1 s, each for ``seconds`` in this process's SparkSession (records/s after the first
batch, :mod:`bench.rates`); and the same logical job on Flink SQL (:mod:`bench.flink_sql_job`,
run by the Python of the Flink virtual environment) in two configurations, alternating which
goes first as the systems do: **untuned** (Flink's defaults) and **tuned** as Flink's
performance-tuning guide prescribes for a group aggregation (mini-batch and two-phase
aggregation, :data:`bench.flink_sql_job.TUNED`), each without checkpoints and with checkpoints
every 1 s, over as many rows as that configuration processes in about ``seconds`` (sized from
its previous run). Printed: both Flink configurations, records/s per run, then per system and
configuration the median over the rounds with the lowest and highest round, each system's 1
s-checkpoint ratio to its own no-checkpoint run per round, and barrierflow / Flink tuned as the
ratio of the medians and per round (the comparison to cite), with barrierflow / Flink untuned
beside it. Cite a run of at least three rounds (:mod:`bench.spread`).

Flink lives in its own virtual environment (``make flink``: ``.venv-flink`` with
requirements-flink.txt), never in the main requirements; ``BARRIERFLOW_FLINK_PYTHON`` names
another interpreter that has apache-flink.

It prints what it ran (command, commit, date, cores, load average, rounds) above the table and
writes the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every round's records/s of each
system and configuration (:mod:`bench.record`), to bench/results/flink-sql/, or to
``--markdown FILE`` and ``FILE`` with ``.json``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.errors import UserInputError
from barrierflow.runtime.job import StreamingJob
from barrierflow.spec import load_spec, project_home

from bench.abs_overhead import no_checkpoints
from bench.modes import MODES, mode_spec
from bench.rates import BatchEnd, job_rate, rate_after_first_batch
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report
from bench.spread import median, median_spread, per_round, ratios, rounds_note

FLINK_PYTHON_ENV = "BARRIERFLOW_FLINK_PYTHON"
#: Rows of Flink's first run per measured second (later runs are sized from the one before).
FLINK_FIRST_RATE = 2_000_000
JOB_SCRIPT = Path(__file__).with_name("flink_sql_job.py")
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "flink-sql"


@dataclass
class Runs:
    """Records/s per round, one list per system and checkpoint setting."""

    barrierflow_none: list[float] = field(default_factory=list)
    barrierflow_1s: list[float] = field(default_factory=list)
    flink_none: list[float] = field(default_factory=list)
    flink_1s: list[float] = field(default_factory=list)
    flink_tuned_none: list[float] = field(default_factory=list)
    flink_tuned_1s: list[float] = field(default_factory=list)
    flink_version: str = "?"
    #: The settings of each Flink configuration beyond parallelism, state backend and checkpoints.
    flink_config: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The machine's 1-minute load average when the comparison started and ended.
    load: tuple[float, float] | None = None


def flink_python() -> Path:
    """The interpreter with apache-flink.

    Raises:
        UserInputError: there is none (the message says to run ``make flink``).
    """
    given = os.environ.get(FLINK_PYTHON_ENV)
    path = Path(given) if given else project_home() / ".venv-flink" / "bin" / "python"
    if not path.is_file():
        raise UserInputError(f"bench --compare flink-sql needs Flink in its own virtual environment, but {path} "
                             "does not exist: run `make flink` (installs requirements-flink.txt into .venv-flink), "
                             f"or set {FLINK_PYTHON_ENV} to a Python that has apache-flink")
    return path


def run_flink_job(python: Path, rows: int, interval: float, *, tuned: bool) -> dict[str, Any]:
    """One run of the Flink SQL job (``tuned``: with Flink's documented tuning); its JSON result line.

    Raises:
        UserInputError: the job failed (the message holds the end of its output).
    """
    command = [str(python), str(JOB_SCRIPT), "--rows", str(rows), "--checkpoint-interval", str(interval),
               *(["--tuned"] if tuned else [])]
    return run_flink_script(command)


def kafka_job_command(python: Path, *, bootstrap: str, topic: str, partitions: int, records: int, interval: float,
                      tuned: bool, jars: list[str]) -> list[str]:
    """The command of one Kafka-mode run of :mod:`bench.flink_sql_job` (``--kafka``): the job over
    ``topic``'s ``records`` records on ``bootstrap``, with Flink's Kafka connector ``jars``."""
    if not jars:
        raise UserInputError("the Flink SQL job on Kafka needs Flink's Kafka connector: run `make install` "
                             "(JVM artifact set 'flink-kafka')")
    return [str(python), str(JOB_SCRIPT), "--kafka", bootstrap, "--topic", topic, "--partitions", str(partitions),
            "--rows", str(records), "--checkpoint-interval", str(interval), "--jars", ",".join(jars),
            *(["--tuned"] if tuned else [])]


def run_flink_script(command: list[str]) -> dict[str, Any]:
    """Run one Flink SQL job script; its JSON result line.

    Raises:
        UserInputError: the job failed (the message holds the end of its output).
    """
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        output = (done.stderr or done.stdout)[-2000:]
        raise UserInputError(f"the Flink SQL job failed (exit {done.returncode}): {output}")
    return dict(json.loads(lines[-1]))


def flink_rate(result: dict[str, Any]) -> float:
    """Records/s of one Flink SQL run counted as :mod:`bench.rates` counts barrierflow's: the short
    run (``first_rows`` in ``first_seconds``) takes the place of the first batch, so the job's
    start is left out (see :mod:`bench.flink_sql_job`)."""
    return rate_after_first_batch(BatchEnd(float(result["first_seconds"]), int(result["first_rows"])),
                                  BatchEnd(float(result["seconds"]), int(result["rows"])))


def run_flink_comparison(spec_path: str, *, seconds: float, rounds: int, markdown: str | None = None,
                         results: Path | None = RESULTS, command: str | None = None) -> Runs:
    """Run the comparison (see the module docstring); print the header and the table and write
    the record to ``markdown`` if given, else into ``results`` (None: no record); ``command``:
    the command line the record names.

    Raises:
        UserInputError: there is no Flink (:func:`flink_python`), or a Flink SQL job failed.
    """
    python = flink_python()
    base = load_spec(spec_path)
    root = project_home() / "var" / "bench"
    shutil.rmtree(root, ignore_errors=True)
    record = RunRecord.start("flink-sql", command)
    spark = StreamingJob(base).spark
    runs = Runs()
    warmup = max(seconds, 30.0)
    print(f"barrierflow warm-up ({warmup:.0f} s) ...", file=sys.stderr)
    StreamingJob(mode_spec(base, MODES[0], root / "warmup"), spark=spark).run(duration=warmup)
    rates = {False: float(FLINK_FIRST_RATE), True: float(FLINK_FIRST_RATE)}  # per configuration: tuned?

    def barrierflow(r: int) -> None:
        for mode, into in ((MODES[0], runs.barrierflow_none), (MODES[1], runs.barrierflow_1s)):
            work = root / f"r{r}-{mode.name.replace(' ', '_')}"
            job = StreamingJob(mode_spec(base, mode, work), spark=spark)
            result = (job.run(duration=seconds, on_tick=no_checkpoints) if mode.interval is None
                      else job.run(duration=seconds))
            into.append(job_rate(result))
            print(f"round {r + 1} barrierflow {mode.name:16} {into[-1]:>12,.0f} rec/s  "
                  f"{len(result.completed)} checkpoints", file=sys.stderr)
            shutil.rmtree(work, ignore_errors=True)

    def flink(r: int) -> None:
        configurations = ((False, runs.flink_none, runs.flink_1s), (True, runs.flink_tuned_none, runs.flink_tuned_1s))
        for tuned, none, checkpointed in configurations if r % 2 == 0 else reversed(configurations):
            name = "tuned" if tuned else "untuned"
            for interval, into in ((0.0, none), (1.0, checkpointed)):
                result = run_flink_job(python, max(1_000_000, int(rates[tuned] * seconds)), interval, tuned=tuned)
                into.append(flink_rate(result))
                if math.isfinite(into[-1]) and into[-1] > 0:  # sizes the next run of this configuration
                    rates[tuned] = into[-1]
                runs.flink_version = str(result.get("flink_version", "?"))
                runs.flink_config[name] = dict(result.get("config") or {})
                label = "no checkpoints" if interval == 0 else "checkpoints 1 s"
                print(f"round {r + 1} Flink SQL {name:7} {label:16} {into[-1]:>12,.0f} rec/s  "
                      f"({result['rows']:,} rows in {result['seconds']} s, the first "
                      f"{result['first_rows']:,} in {result['first_seconds']} s)", file=sys.stderr)

    for r in range(rounds):
        for step in ((barrierflow, flink) if r % 2 == 0 else (flink, barrierflow)):
            step(r)
    record_run(record, runs, base.name, base.spark.master, seconds=seconds, rounds=rounds, markdown=markdown,
               results=results)
    return runs


def record_run(record: RunRecord, runs: Runs, pipeline: str, master: str, *, seconds: float, rounds: int,
               markdown: str | None, results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    with every round's records/s of each system and configuration, the Flink version and both
    configurations' settings; ``runs.load`` becomes the record's load average at the start and
    the end. Returns the paths written."""
    runs.load = (record.load_start, record.end_load())
    figures = {"pipeline": pipeline, "master": master, "seconds": seconds, **asdict(runs)}
    return report(record, f"barrierflow and Flink SQL side by side, pipeline {pipeline}", rounds,
                  render(runs, master, seconds, rounds).splitlines(), figures, results_dir=results,
                  markdown=markdown)


def _config(settings: dict[str, str]) -> str:
    return ", ".join(f"`{k}={v}`" for k, v in settings.items()) or "Flink's defaults"


def _versus(a: list[float], b: list[float]) -> str:
    """``a / b``: the ratio of the medians, then per round."""
    return f"{median(a) / median(b):.2f} (per round {per_round(ratios(a, b), sep=' / ')})"


def render(runs: Runs, master: str, seconds: float, rounds: int) -> str:
    """The table: per system and configuration the median records/s over the rounds (lowest-highest)
    without and with 1 s checkpoints and the per-round ratio of the two; below it barrierflow /
    Flink (tuned, then untuned): the ratio of the medians and each round's; above it, the
    settings of both Flink configurations."""
    lines = [
        f"Comparison {datetime.now(UTC).isoformat(timespec='seconds')}: the reference job (10,000 keys, running "
        f"count and sum), barrierflow on Spark {master} vs Flink SQL {runs.flink_version} (MiniCluster, "
        f"parallelism 2, heap state), about {seconds:.0f} s per run, {rounds} round(s), alternating order"
        + (f"; load average (1 min) {runs.load[0]:.1f} at the start, {runs.load[1]:.1f} at the end"
           if runs.load else "") + rounds_note(rounds),
        "",
        f"Flink untuned: {_config(runs.flink_config.get('untuned', {}))}. "
        f"Flink tuned: {_config(runs.flink_config.get('tuned', {}))}.",
        "",
        "| system | no checkpoints, records/s: median (lowest-highest) "
        "| 1 s checkpoints, records/s: median (lowest-highest) | 1 s / none, per round |",
        "|---|---|---|---|",
    ]
    for name, none, checkpointed in (("barrierflow (ABS)", runs.barrierflow_none, runs.barrierflow_1s),
                                     ("Flink SQL, tuned", runs.flink_tuned_none, runs.flink_tuned_1s),
                                     ("Flink SQL, untuned", runs.flink_none, runs.flink_1s)):
        lines.append(f"| {name} | {median_spread(none)} | {median_spread(checkpointed)} "
                     f"| {per_round(ratios(checkpointed, none), sep=' / ')} |")
    lines += [
        "",
        f"barrierflow / Flink tuned, ratio of the medians: no checkpoints "
        f"{_versus(runs.barrierflow_none, runs.flink_tuned_none)}; 1 s checkpoints "
        f"{_versus(runs.barrierflow_1s, runs.flink_tuned_1s)}",
        f"barrierflow / Flink untuned, ratio of the medians: no checkpoints "
        f"{_versus(runs.barrierflow_none, runs.flink_none)}; 1 s checkpoints "
        f"{_versus(runs.barrierflow_1s, runs.flink_1s)}",
    ]
    return "\n".join(lines)
