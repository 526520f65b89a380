"""Rescaling a large state with ``barrierflow upgrade`` (``python -m bench --scenario upgrade``).

The reference job (running count and sum per key, :mod:`bench.restore_time`'s state: ``keys``
distinct keys, default 3.4 M, 54 MB in RocksDB when built in steady-state batches) as a single-stage pipeline that
writes its updates to Parquet, RocksDB state store (what the rescale needs), one working
directory and checkpoint store for every spec below:

1. ``build-4.yaml`` (4 shuffle partitions, the feed's batches: a twentieth of the keys each)
   runs as ``barrierflow run`` in a process of its own until a checkpoint holds every key;
   ``stop --savepoint`` (:func:`barrierflow.ops.stop.stop`) is timed from the request to the
   savepoint, so it waits behind a steady-state batch, as a stop of a running pipeline does (one
   batch touching all 3.4 M keys took 146 s to end, and the stop with it);
2. ``upgrade build-4 -> feed-16`` (16 partitions, small batches): a dry run, then for real with
   the default canary (:func:`barrierflow.ops.upgrade.upgrade` in this process, its
   :attr:`UpgradeResult.timings` per step); ``feed-16`` runs on for two checkpoints and is
   stopped with a savepoint; ``upgrade feed-16 -> feed-4`` (dry run, then for real);
   ``feed-4`` runs on for two checkpoints and is stopped with a savepoint; ``upgrade feed-4 ->
   max-4`` gives the state a new value column (``max(value)``, declared default 0: the
   value-column rewrite, dry run then for real); ``final-4.yaml`` (``max-4``, its generator
   bounded) runs to the end of its input;
3. the headline of each upgrade: from the stop request to the first checkpoint of the new shape
   whose deep verification was stored (``chk-<n>/_verification.json`` appearing in the store,
   watched every 0.1 s; the canary verifies each checkpoint once it completed, while it runs on);
4. ``state query`` (keys, count and sum over the whole state, written to Parquet) over the first
   savepoint and ``state diff`` from it to the second savepoint (4 and 16 partitions), timed.

Checked independently of barrierflow's reading code, failing loudly (:class:`UpgradeBenchError`):
the final totals, read from both sinks' Parquet files with pyarrow, equal those of a run of the
same input (``reference``: its own directories, never upgraded) key by key, and both equal a
recount of the generator's input with numpy; the query's figures and the diff's counts equal a
recount of the input up to the checkpoints' barrier offsets; every key's final ``value_max``
equals the largest of the default and its values after the value-column savepoint's barrier
(numpy). Every figure is printed with the load average (1 min) at its end.

It prints what it ran (command, commit, date, cores, load average) above the table and writes the
record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every step's seconds and load, the checks and the
problems found (:mod:`bench.record`), to bench/results/upgrade/, or to ``--markdown FILE`` and
``FILE`` with ``.json``; also when the scenario stopped early or found a wrong result.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml
from barrierflow.errors import BarrierflowError
from barrierflow.spec import load_spec, project_home
from barrierflow.spec.models import GeneratorSourceSpec, ParquetSinkSpec, StageSpec

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report
from bench.restore_time import state_spec

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

#: Source partitions of the generator (the reference job's).
SOURCE_PARTITIONS = 4
#: Shuffle partitions before the first upgrade, after it, and after the second.
SHAPES = (4, 16, 4)
#: Checkpoints the rescaled pipeline runs after its canary before it is stopped again.
FEED_CHECKPOINTS = 2
#: Batches of input the final run reads beyond the newest checkpoint's barrier offsets.
FINAL_BATCHES = 5
#: The transformation the value-column case upgrades to, and the default of its new column.
WITH_MAX = "barrierflow.transforms.aggregations:keyed_running_totals_with_max"
MAX_DEFAULT = 0
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "upgrade"


class UpgradeBenchError(BarrierflowError):
    """The upgrade scenario could not measure (a run failed) or found wrong results."""


@dataclass(frozen=True)
class Figure:
    """One measured step: ``seconds`` (nan when not measured), the 1-minute load average at its end."""

    phase: str
    step: str
    seconds: float
    load: float
    note: str = ""


@dataclass
class UpgradeBenchReport:
    keys: int
    figures: list[Figure] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    state_mb: float = float("nan")
    session_seconds: float = float("nan")

    def add(self, phase: str, step: str, seconds: float, note: str = "") -> Figure:
        figure = Figure(phase, step, seconds, os.getloadavg()[0], note)
        self.figures.append(figure)
        print(f"{phase}: {step} {seconds:.2f} s (load {figure.load:.1f}){' - ' + note if note else ''}",
              file=sys.stderr)
        return figure


# -- the specs -------------------------------------------------------------------------------


def build_batch(keys: int) -> int:
    """Records per source partition that touch every key (the generator's keys go round), and per
    batch of the never-upgraded reference run."""
    return -(-keys // SOURCE_PARTITIONS)


def feed_batch(keys: int) -> int:
    """Records per source partition and batch after the state was built (a twentieth of a build batch)."""
    return max(1, -(-build_batch(keys) // 20))


def expectations(keys: int, partitions: int, with_max: bool = False) -> dict[str, Any]:
    """The deep verification suite of the scenario's state (what ``include/expectations/bench.json``
    checks, with this scenario's key range and ``partitions`` shuffle partitions; ``with_max``: the
    state's aggregation buffer also holds ``max``)."""
    columns = ["partition_id", "operator_id", "key_key", "value_count", "value_sum"]
    columns += ["value_max"] if with_max else []
    return {"name": f"bench-upgrade-{partitions}", "expectations": [
        {"type": "expect_table_columns_to_match_set", "kwargs": {"column_set": columns, "exact_match": True}},
        {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["operator_id", "key_key"]}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_count", "min_value": 1}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_sum", "min_value": 0}},
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "key_key", "min_value": 0, "max_value": keys - 1}},
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "partition_id", "min_value": 0, "max_value": partitions - 1}},
    ]}


def scenario_spec(base: StageSpec, work: Path, *, keys: int, per_partition_batch: int, partitions: int,
                  records_per_partition: int | None = None, with_max: bool = False) -> StageSpec:
    """:func:`bench.restore_time.state_spec` of ``base`` (RocksDB) with ``partitions`` shuffle
    partitions, a Parquet sink ``work/out``, the suite of :func:`expectations` (written under
    ``work``), given ``records_per_partition`` a bounded generator and, ``with_max``, the
    transformation :data:`WITH_MAX` with its new column's default declared."""
    spec = state_spec(base, work, keys, per_partition_batch, "rocksdb")
    suite = work / f"expectations-{partitions}{'-max' if with_max else ''}.json"
    suite.parent.mkdir(parents=True, exist_ok=True)
    suite.write_text(json.dumps(expectations(keys, partitions, with_max), indent=1), encoding="utf-8")
    source = spec.source.model_copy(update={"records_per_partition": records_per_partition})
    sink = ParquetSinkSpec(name="totals", type="parquet", path=f"file://{work / 'out'}")
    transformation = spec.transformation
    if with_max:
        transformation = transformation.model_copy(update={"function": WITH_MAX,
                                                           "state_defaults": {"value_max": MAX_DEFAULT}})
    return spec.model_copy(update={
        "sources": [source], "sinks": [sink], "transformation": transformation,
        "spark": spec.spark.model_copy(update={"shuffle_partitions": partitions}),
        "verification": spec.verification.model_copy(update={"expectations": str(suite)})})


def write_spec(spec: StageSpec, path: Path) -> Path:
    """``spec`` as YAML at ``path``, loaded back (validated as ``barrierflow`` loads it)."""
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False),
                    encoding="utf-8")
    load_spec(str(path))
    return path


# -- the independent checks ------------------------------------------------------------------


def input_totals(offsets: Mapping[Any, int], keys: int,
                 start: Mapping[Any, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per key (index), the record count and value sum of the generator's records ``start[p]``
    (default 0) to ``offsets[p]`` (exclusive) of every partition ``p``, recomputed from the
    generator's definition (docs: ``key = (i * P + p) % keys``, ``value = ((i * P + p) *
    2654435761) % 1000``) with numpy, not with barrierflow's code."""
    counts = np.zeros(keys, dtype=np.int64)
    sums = np.zeros(keys, dtype=np.int64)
    for p_raw, end in offsets.items():
        p = int(p_raw)
        begin = int(start.get(p_raw, 0)) if start is not None else 0
        for lo in range(begin, int(end), 4_000_000):
            g = np.arange(lo, min(int(end), lo + 4_000_000), dtype=np.int64) * SOURCE_PARTITIONS + p
            k = g % keys
            counts += np.bincount(k, minlength=keys)
            sums += np.bincount(k, weights=(g * 2654435761) % 1000, minlength=keys).astype(np.int64)
    return counts, sums


def final_totals(directory: Path) -> pd.DataFrame:
    """The last update of every key in the Parquet files of ``directory`` (``part-*.parquet``, read
    with pyarrow; names starting with ``_`` are not output): per key the row with the highest
    ``count`` (a running count only grows). Columns ``count`` and ``value_sum``, index ``key``."""
    import pyarrow.dataset as ds

    table = ds.dataset(str(directory), format="parquet").to_table(columns=["key", "count", "value_sum"])
    frame = table.to_pandas()
    frame = frame.sort_values(["key", "count"], kind="stable").drop_duplicates("key", keep="last")
    return frame.set_index("key")[["count", "value_sum"]]


def final_maxima(directory: Path) -> dict[int, int]:
    """Per key, ``value_max`` of its last update (highest ``count``) among the rows that have one."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    # the files written before the column was added have no value_max: read as null
    schema = pa.schema([("key", pa.int64()), ("count", pa.int64()), ("value_max", pa.int64())])
    frame = ds.dataset(str(directory), format="parquet", schema=schema).to_table().to_pandas()
    frame = frame.dropna(subset=["value_max"]).sort_values(["key", "count"], kind="stable")
    last = frame.drop_duplicates("key", keep="last")
    return {int(k): int(v) for k, v in zip(last["key"], last["value_max"], strict=True)}


def maxima_after(cut: Mapping[Any, int], end: int, keys: int) -> dict[int, int]:
    """Per key with records after the barrier offsets ``cut`` (to ``end`` in every partition): the
    largest of :data:`MAX_DEFAULT` and its values there, with numpy (a key stored before the cut
    starts from the default; a key first seen after it has only those values, all >= 0)."""
    best = np.full(keys, -1, dtype=np.int64)
    for p_raw, begin in cut.items():
        p = int(p_raw)
        g = np.arange(int(begin), end, dtype=np.int64) * SOURCE_PARTITIONS + p
        np.maximum.at(best, g % keys, (g * 2654435761) % 1000)
    present = np.nonzero(best >= 0)[0]
    return {int(k): max(int(best[k]), MAX_DEFAULT) for k in present}


@dataclass(frozen=True)
class Comparison:
    missing: int
    extra: int
    differing: int
    examples: list[str]

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.differing)

    def __str__(self) -> str:
        return (f"{self.missing} missing / {self.extra} extra / {self.differing} differing keys"
                + (f" (e.g. {'; '.join(self.examples)})" if self.examples else ""))


def compare_totals(actual: pd.DataFrame, expected: pd.DataFrame) -> Comparison:
    """Key by key: keys of ``expected`` missing from ``actual``, keys only in ``actual``, keys in both
    whose ``count`` or ``value_sum`` differ (up to three examples of each)."""
    missing = expected.index.difference(actual.index)
    extra = actual.index.difference(expected.index)
    both = expected.index.intersection(actual.index)
    a, e = actual.loc[both], expected.loc[both]
    differ = both[((a["count"].to_numpy() != e["count"].to_numpy())
                   | (a["value_sum"].to_numpy() != e["value_sum"].to_numpy()))]
    examples = ([f"missing key {k}" for k in missing[:3]] + [f"extra key {k}" for k in extra[:3]]
                + [f"key {k}: {tuple(a.loc[k])} != {tuple(e.loc[k])}" for k in differ[:3]])
    return Comparison(len(missing), len(extra), len(differ), examples)


def recount_frame(offsets: Mapping[Any, int], keys: int) -> pd.DataFrame:
    """:func:`input_totals` as :func:`final_totals`'s frame (the keys with at least one record)."""
    import pandas as pd

    counts, sums = input_totals(offsets, keys)
    present = np.nonzero(counts)[0]
    return pd.DataFrame({"count": counts[present], "value_sum": sums[present]},
                        index=pd.Index(present, name="key"))


def expected_diff(before: Mapping[str, int], after: Mapping[str, int], keys: int) -> dict[str, int]:
    """What ``state diff`` from a checkpoint at ``before`` to one at ``after`` (barrier offsets per
    partition) must count, from the input: keys first seen in between are ``added``, keys that
    had records before and got more are ``changed``; a running total never removes a key."""
    had, _ = input_totals(before, keys)
    new, _ = input_totals(after, keys, start=before)
    return {"added": int(((had == 0) & (new > 0)).sum()), "changed": int(((had > 0) & (new > 0)).sum()),
            "removed": 0}


# -- running the pipeline ---------------------------------------------------------------------


def _checkpoint_ids(spec: Path) -> list[int]:
    from barrierflow.pipeline.model import open_pipeline

    return open_pipeline(spec).stages[0].store.checkpoint_ids()


def _barrier_offsets(spec: Path, checkpoint_id: int) -> dict[str, int]:
    from barrierflow.pipeline.model import open_pipeline

    stage = open_pipeline(spec).stages[0]
    return dict(stage.store.get(checkpoint_id).barrier_offsets[stage.spec.source.name])


class PipelineProcess:
    """``barrierflow run SPEC ARGS`` in a process of its own (as a user runs it), its output in ``log``."""

    #: Every process started, so that a benchmark that fails ends them.
    started: list[PipelineProcess] = []

    def __init__(self, spec: Path, log: Path, *args: str) -> None:
        self.spec, self.log = spec, log
        PipelineProcess.started.append(self)
        self._out = log.open("ab")
        self.process = subprocess.Popen([sys.executable, "-m", "barrierflow.cli.main", "run", str(spec), "--quiet",
                                         *args], stdout=self._out, stderr=subprocess.STDOUT)

    def failure(self, what: str) -> UpgradeBenchError:
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-3000:]
        return UpgradeBenchError(f"barrierflow run {self.spec.name} {what} (exit {self.process.poll()}); the end of "
                                 f"{self.log}:\n{tail}")

    def wait_for_checkpoints(self, count: int, after: set[int], timeout: float) -> list[int]:
        """Block until ``count`` checkpoints not in ``after`` completed; their ids."""
        deadline = time.monotonic() + timeout
        while True:
            new = [c for c in _checkpoint_ids(self.spec) if c not in after]
            if len(new) >= count:
                return new
            if self.process.poll() is not None:
                raise self.failure(f"ended before {count} checkpoint(s) completed")
            if time.monotonic() > deadline:
                self.process.kill()
                raise self.failure(f"completed {len(new)} of {count} checkpoint(s) in {timeout:.0f} s")
            time.sleep(0.5)  # polling the store for a completed checkpoint

    def wait(self, timeout: float) -> None:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise self.failure(f"did not end in {timeout:.0f} s") from None
        finally:
            self._out.close()
        if code != 0:
            raise self.failure("failed")


class VerificationWatcher:
    """Notes when the first ``chk-<n>/_verification.json`` with ``n`` > ``after`` appears under
    ``store`` (checked every 0.1 s in a thread): the first checkpoint the canary verified."""

    def __init__(self, store: Path, after: int) -> None:
        self.store, self.after = store, after
        self.first: tuple[int, float] | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="verification-watcher", daemon=True)

    def _watch(self) -> None:
        while not self._done.is_set() and self.first is None:
            for found in self.store.glob("**/chk-*/_verification.json"):
                number = found.parent.name.removeprefix("chk-")
                if number.isdigit() and int(number) > self.after:
                    cid = int(number)
                    self.first = (cid, time.monotonic())
                    break
            self._done.wait(0.1)

    @contextmanager
    def watching(self) -> Iterator[VerificationWatcher]:
        self._thread.start()
        try:
            yield self
        finally:
            self._done.set()
            self._thread.join()


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    began = time.monotonic()
    out = call()
    return out, time.monotonic() - began


# -- the scenario --------------------------------------------------------------------------------


def run_upgrade_benchmark(spec_path: str, *, keys: int, markdown: str | None = None,
                          results: Path | None = RESULTS, command: str | None = None) -> UpgradeBenchReport:
    """Run the scenario (module docstring) with ``keys`` distinct keys; print the header and the
    figures, write the record to ``markdown`` if given, else into ``results`` (None: no record),
    and return the figures. ``command``: the command line the record names.

    Raises:
        UpgradeBenchError: a run failed, or a result differs from its independent check (after
            the figures measured so far were printed and recorded).
    """
    base = load_spec(spec_path)
    if not isinstance(base.source, GeneratorSourceSpec) or base.source.partitions != SOURCE_PARTITIONS:
        raise UpgradeBenchError(f"the upgrade benchmark needs {spec_path} with a generator of {SOURCE_PARTITIONS} "
                                "partitions (the reference job, include/pipelines/bench.yaml)")
    record = RunRecord.start("upgrade", command)
    base = base.model_copy(update={"spark": base.spark.model_copy(
        update={"conf": {"spark.driver.memory": "3g", **base.spark.conf}})})
    root = project_home() / "var" / "bench-upgrade"
    shutil.rmtree(root, ignore_errors=True)
    work, small = root / "pipeline", feed_batch(keys)
    specs = {
        "build-4": write_spec(scenario_spec(base, work, keys=keys, per_partition_batch=small, partitions=SHAPES[0]),
                              root / "build-4.yaml"),
        "feed-16": write_spec(scenario_spec(base, work, keys=keys, per_partition_batch=small, partitions=SHAPES[1]),
                              root / "feed-16.yaml"),
        "feed-4": write_spec(scenario_spec(base, work, keys=keys, per_partition_batch=small, partitions=SHAPES[2]),
                             root / "feed-4.yaml"),
        "max-4": write_spec(scenario_spec(base, work, keys=keys, per_partition_batch=small, partitions=SHAPES[2],
                                          with_max=True), root / "max-4.yaml"),
    }
    (root / "logs").mkdir()
    measured = UpgradeBenchReport(keys)
    problems: list[str] = []
    try:
        _scenario(base, root, specs, keys, measured, problems)
    except BarrierflowError as exc:
        problems.append(f"stopped early: {exc}")
    finally:
        for process in PipelineProcess.started:
            if process.process.poll() is None:
                process.process.kill()
                process.process.wait()
        record_run(record, measured, base, problems, markdown=markdown, results=results)
    if problems:
        raise UpgradeBenchError("the upgrade benchmark failed: " + "; ".join(problems))
    return measured


def record_run(record: RunRecord, measured: UpgradeBenchReport, spec: StageSpec, problems: list[str], *,
               markdown: str | None, results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the figures (:func:`render`) and write the record (:func:`bench.record.report`,
    one round) with every step's seconds, load and note, the checks, and the problems found so far
    (``passed``: none); returns the paths written."""
    figures = {"pipeline": spec.name, "keys": measured.keys, "shapes": list(SHAPES),
               "state_mb": measured.state_mb, "session_seconds": measured.session_seconds,
               "steps": [asdict(f) for f in measured.figures], "checks": list(measured.checks),
               "problems": list(problems), "passed": not problems}
    return report(record, f"Upgrade of {measured.keys:,} keys, pipeline {spec.name}", 1,
                  render(measured, spec).splitlines(), figures, results_dir=results, markdown=markdown)


def _scenario(base: StageSpec, root: Path, specs: dict[str, Path], keys: int, report: UpgradeBenchReport,
              problems: list[str]) -> None:
    """The steps of :func:`run_upgrade_benchmark`: figures into ``report``, wrong results into ``problems``."""
    from barrierflow.ops.state import state_diff, state_query
    from barrierflow.ops.stop import stop
    from barrierflow.ops.upgrade import UpgradeResult, upgrade
    from barrierflow.pipeline.model import open_pipeline
    from barrierflow.runtime.session import session_for
    from barrierflow.state.compatibility import CompatibilityReport

    work, ref = root / "pipeline", root / "reference"
    big, small = build_batch(keys), feed_batch(keys)
    store_dir = work / "checkpoints"
    logs = root / "logs"
    session, report.session_seconds = _timed(lambda: session_for(open_pipeline(specs["build-4"]), None))
    spark: SparkSession = session

    def stop_with_savepoint(phase: str, name: str, process: PipelineProcess) -> int:
        """Stop ``name``'s running ``process`` with a savepoint, timed from the request; its id."""
        began = time.monotonic()
        stopped = stop(specs[name], savepoint=True, timeout=1800)
        report.add(phase, "stop --savepoint: request -> savepoint", time.monotonic() - began,
                   f"savepoint {stopped.outcome.savepoint}")
        process.wait(300)
        return int(stopped.outcome.savepoint or 0)

    # 1. the state, and the stop with a savepoint
    started = time.monotonic()
    build = PipelineProcess(specs["build-4"], logs / "build-4.log")
    print(f"building the state of {keys:,} keys ({small * SOURCE_PARTITIONS:,} records per batch) ...", file=sys.stderr)
    done = build.wait_for_checkpoints(1, set(), timeout=1800)
    while min(_barrier_offsets(specs["build-4"], max(done)).values()) < big:  # every key seen
        done = build.wait_for_checkpoints(len(done) + 1, set(), timeout=1800)
    report.add("build", "run to the first checkpoint holding every key (process start included)",
               time.monotonic() - started)
    first_savepoint = stop_with_savepoint("build", "build-4", build)
    manifest = open_pipeline(specs["build-4"]).stages[0].store.get(first_savepoint)
    report.state_mb = manifest.full_bytes / 1e6

    def rescale(phase: str, old: str, new: str, stop_seconds: float, savepoint: int) -> None:
        dry, seconds = _timed(lambda: upgrade(specs[old], specs[new], dry_run=True, spark=spark))
        verdict = dry.verdict.value if isinstance(dry, CompatibilityReport) else "?"
        report.add(phase, "upgrade --dry-run (report)", seconds, f"verdict {verdict}")
        watcher = VerificationWatcher(store_dir, savepoint)
        with watcher.watching():
            began, began_wall = time.monotonic(), datetime.now(UTC)
            result = upgrade(specs[old], specs[new], dry_run=False, spark=spark)
            ended = time.monotonic()
        if not isinstance(result, UpgradeResult):
            raise UpgradeBenchError(f"upgrade {old} -> {new} returned {type(result).__name__}, not an UpgradeResult")
        steps = dict(result.timings)
        named = sum(v for k, v in steps.items() if k != "total")
        for step in ("materialize", "repartition", "rewrite", "record", "restore", "canary", "commit"):
            if step in steps or step in ("repartition", "canary"):
                report.add(phase, f"upgrade: {step}", steps.get(step, float("nan")))
        report.add(phase, "upgrade: report, lease and the rest (total minus the steps)", steps["total"] - named)
        report.add(phase, "upgrade: total (UpgradeResult.timings)", steps["total"],
                   f"savepoint {result.source_savepoint} -> {result.savepoint}, rescaled {result.rescaled}, "
                   f"value columns {result.value_columns}, "
                   f"canary verified {result.canary.get('verified')}")
        report.add(phase, "upgrade call (wall)", ended - began)
        verified = list(result.canary.get("verified", []))
        if verified:
            ran = open_pipeline(specs[new]).stages[0].store.get(max(verified)).completion_time - began_wall
            report.add(phase, f"canary: upgrade start -> its last checkpoint ({len(verified)}) completed",
                       ran.total_seconds())
            if watcher.first is not None:
                report.add(phase, "canary: its last checkpoint completed -> the first one's deep verification stored",
                           watcher.first[1] - began - ran.total_seconds())
        if watcher.first is None or watcher.first[0] not in verified:
            problems.append(f"{phase}: no verified canary checkpoint was seen ({watcher.first})")
        else:
            report.add(phase, "HEADLINE stop request -> first verified checkpoint of the new shape (dry run excluded)",
                       stop_seconds + (watcher.first[1] - began),
                       f"checkpoint {watcher.first[0]}; stop {stop_seconds:.1f} s + upgrade "
                       f"{watcher.first[1] - began:.1f} s")

    rescale("4 -> 16", "build-4", "feed-16", report.figures[-1].seconds, first_savepoint)

    # 2. feed the 16-partition pipeline, stop it, rescale back to 4
    feed = PipelineProcess(specs["feed-16"], logs / "feed-16.log")
    seen = set(_checkpoint_ids(specs["feed-16"]))
    _, seconds = _timed(lambda: feed.wait_for_checkpoints(FEED_CHECKPOINTS, seen, timeout=1800))
    report.add("16 -> 4", f"feed-16 run to {FEED_CHECKPOINTS} more checkpoints (process start included)", seconds)
    second_savepoint = stop_with_savepoint("16 -> 4", "feed-16", feed)
    rescale("16 -> 4", "feed-16", "feed-4", report.figures[-1].seconds, second_savepoint)

    # 2b. feed the 4-partition pipeline, stop it, give its state a new value column
    feed = PipelineProcess(specs["feed-4"], logs / "feed-4.log")
    seen = set(_checkpoint_ids(specs["feed-4"]))
    _, seconds = _timed(lambda: feed.wait_for_checkpoints(FEED_CHECKPOINTS, seen, timeout=1800))
    report.add("new column", f"feed-4 run to {FEED_CHECKPOINTS} more checkpoints (process start included)", seconds)
    column_savepoint = stop_with_savepoint("new column", "feed-4", feed)
    rescale("new column", "feed-4", "max-4", report.figures[-1].seconds, column_savepoint)
    column_cut = _barrier_offsets(specs["feed-4"], column_savepoint)

    # 3. run to the end of a bounded input; the same input once more, never upgraded
    newest = max(_checkpoint_ids(specs["max-4"]))
    reached = _barrier_offsets(specs["max-4"], newest)
    end = max(reached.values()) + FINAL_BATCHES * small
    specs["final-4"] = write_spec(scenario_spec(base, work, keys=keys, per_partition_batch=small,
                                                partitions=SHAPES[2], records_per_partition=end, with_max=True),
                                  root / "final-4.yaml")
    final = PipelineProcess(specs["final-4"], logs / "final-4.log", "--until-exhausted")
    _, seconds = _timed(lambda: final.wait(3600))
    report.add("end", f"final-4 run to the end of the input ({end:,} records per partition)", seconds)
    last = _barrier_offsets(specs["final-4"], max(_checkpoint_ids(specs["final-4"])))
    if set(last.values()) != {end}:
        problems.append(f"the final run's last checkpoint is at offsets {last}, not {end} in every partition")
    reference = write_spec(scenario_spec(base, ref, keys=keys, per_partition_batch=big, partitions=SHAPES[0],
                                         records_per_partition=end), root / "reference-4.yaml")
    plain = PipelineProcess(reference, logs / "reference-4.log", "--until-exhausted")
    _, seconds = _timed(lambda: plain.wait(3600))
    report.add("end", "reference run of the same input, never upgraded", seconds)

    (upgraded, expected, recount), seconds = _timed(lambda: (
        final_totals(work / "out"), final_totals(ref / "out"),
        recount_frame(dict.fromkeys(range(SOURCE_PARTITIONS), end), keys)))
    report.add("end", "read both sinks (pyarrow) and recount the input (numpy)", seconds)
    for name, outcome in (("upgraded vs never upgraded", compare_totals(upgraded, expected)),
                          ("never upgraded vs the input's recount", compare_totals(expected, recount))):
        report.checks.append(f"final totals, {name}: {outcome} over {len(expected):,} keys")
        if not outcome.equal:
            problems.append(f"final totals, {name}: {outcome}")
    got_max, want_max = final_maxima(work / "out"), maxima_after(column_cut, end, keys)
    wrong = {k: (got_max.get(k), v) for k, v in want_max.items() if got_max.get(k) != v}
    report.checks.append(f"value_max after the new column (default {MAX_DEFAULT}): {len(want_max) - len(wrong):,} "
                         f"of {len(want_max):,} keys equal the input's recount")
    if wrong:
        problems.append(f"value_max differs from the input's recount for {len(wrong)} keys, e.g. "
                        f"{list(wrong.items())[:3]} (got, want)")

    # 4. state query and diff, checked against the input
    target = root / "query.parquet"
    sql = ("SELECT count(*) AS keys, sum(value_count) AS records, sum(value_sum) AS value_sum, "
           "count(DISTINCT partition_id) AS partitions FROM state")
    _, seconds = _timed(lambda: state_query(specs["build-4"], checkpoint_id=first_savepoint, sql=sql,
                                            output=str(target), spark=spark))
    report.add("state", f"state query (count/sum over every key) of savepoint {first_savepoint} -> Parquet", seconds)
    import pyarrow.parquet as pq

    row = pq.read_table(str(target)).to_pylist()[0]
    counts, sums = input_totals(_barrier_offsets(specs["build-4"], first_savepoint), keys)
    want = {"keys": int((counts > 0).sum()), "records": int(counts.sum()), "value_sum": int(sums.sum()),
            "partitions": SHAPES[0]}
    got = {k: int(row[k]) for k in want}
    report.checks.append(f"state query of savepoint {first_savepoint}: {got}; the input's recount: {want}")
    if got != want:
        problems.append(f"state query of savepoint {first_savepoint}: {got} != the input's recount {want}")
    diff, seconds = _timed(lambda: state_diff(specs["feed-16"], from_id=first_savepoint, to_id=second_savepoint,
                                              spark=spark))
    report.add("state", f"state diff savepoint {first_savepoint} (4 partitions) -> {second_savepoint} "
                        "(16 partitions)", seconds)
    want_diff = expected_diff(_barrier_offsets(specs["build-4"], first_savepoint),
                              _barrier_offsets(specs["feed-16"], second_savepoint), keys)
    report.checks.append(f"state diff {first_savepoint} -> {second_savepoint}: {diff.counts}; the input's recount: "
                         f"{want_diff}")
    if dict(diff.counts) != want_diff:
        problems.append(f"state diff {first_savepoint} -> {second_savepoint}: {diff.counts} != the input's recount "
                        f"{want_diff}")


def render(report: UpgradeBenchReport, spec: StageSpec) -> str:
    """The figures and checks as Markdown."""
    lines = [
        f"Upgrade benchmark {datetime.now(UTC).isoformat(timespec='seconds')}: pipeline {spec.name}, "
        f"{report.keys:,} keys, {spec.spark.master}, RocksDB state ({report.state_mb:.1f} MB in the first "
        f"savepoint), shuffle partitions {' -> '.join(map(str, SHAPES))}, local checkpoint store; SparkSession "
        f"start in the benchmark's process (upgrade, state query, diff) {report.session_seconds:.1f} s",
        "",
        "| phase | step | seconds | load average (1 min) | note |",
        "|---|---|---|---|---|",
    ]
    for f in report.figures:
        seconds = "-" if math.isnan(f.seconds) else f"{f.seconds:.2f}"
        lines.append(f"| {f.phase} | {f.step} | {seconds} | {f.load:.1f} | {f.note} |")
    lines += ["", *[f"- {c}" for c in report.checks]]
    return "\n".join(lines)
