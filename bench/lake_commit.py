"""``python -m bench --scenario lake-commit``: what a lakehouse table sink adds per checkpoint
on the driver (no Spark).

For each format (Iceberg on the default SQLite catalog, Delta) and ``--checkpoints`` checkpoints,
each epoch's rows (``ROWS_PER_FILE`` rows in each of ``FILES_PER_EPOCH`` write-ahead Parquet
files, written beforehand the way Spark's executors write them) are pre-committed and then
committed through the sink's real entry points. The timed step is the commit, as the coordinator
runs it after a checkpoint completed: the table's record read, the files renamed, one table
commit, the ledger record and the cut record. Pre-commit is timed separately (ledger only).

The last two rows time whole checkpoints of several tables, committed as a stage's checkpoint
coordinator commits them (its sink notifier: the tables side by side, each on a thread of a small
pool, the step ending when the last one finished): the four-table pipeline's shape (two Iceberg
tables in one SQLite catalog, two Delta tables), then two Iceberg tables alone (the commit-cost
aim is stated for Iceberg). Each epoch is written ahead and pre-committed for every table first
(not timed), then the checkpoint's commits are timed together.

For Delta the table also shows what the other way costs: writing the same rows into the table
again with ``deltalake.write_deltalake`` and a transaction identifier (what a commit through a
writer that writes the data itself, such as Spark's Delta writer, does to files Spark already
wrote ahead: a second write of every row).

It prints what it ran (command, commit, date, cores, load average) above the table and writes
the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every checkpoint's milliseconds per step
(:mod:`bench.record`), to bench/results/lake-commit/ (the runs before it are in
bench/results/lake-commit.md), or to ``--markdown FILE`` and ``FILE`` with ``.json``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from barrierflow.checkpointing.sink_notifier import SinkNotifier
from barrierflow.sinks.cut import CutLog
from barrierflow.sinks.delta import DeltaSink
from barrierflow.sinks.iceberg import IcebergSink
from barrierflow.sinks.table import TableSink
from barrierflow.sinks.write_ahead import write_ahead_batch
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.ledger import TransactionLedger

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report

#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "lake-commit"
ROWS_PER_FILE = 2_000
FILES_PER_EPOCH = 2


def _rows(epoch: int, part: int) -> pa.Table:
    base = (epoch * FILES_PER_EPOCH + part) * ROWS_PER_FILE
    keys = pa.array(range(base, base + ROWS_PER_FILE), pa.int64())
    return pa.table({"key": keys, "count": keys, "value_sum": keys, "region": pa.array(["eu"] * ROWS_PER_FILE)})


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _measure(sink: TableSink, checkpoints: int) -> tuple[list[float], list[float]]:
    pre, commit = [], []
    for epoch in range(1, checkpoints + 1):
        batch = epoch
        rows = pa.concat_tables([_rows(epoch, p) for p in range(FILES_PER_EPOCH)])
        write_ahead_batch(sink.write_ahead.uri, batch, rows)
        t0 = time.perf_counter()
        sink.pre_commit_epoch(epoch, batch)
        t1 = time.perf_counter()
        sink.notify_checkpoint_complete(epoch, batch)
        t2 = time.perf_counter()
        pre.append(t1 - t0)
        commit.append(t2 - t1)
    return pre, commit


def _measure_together(sinks: list[TableSink], checkpoints: int) -> list[float]:
    """Per checkpoint: every sink's epoch written ahead and pre-committed, then the commits of all
    of them timed as one step, run by the coordinator's sink notifier (side by side)."""
    together = []
    notifier = SinkNotifier(sinks, label="bench")
    try:
        for epoch in range(1, checkpoints + 1):
            rows = pa.concat_tables([_rows(epoch, p) for p in range(FILES_PER_EPOCH)])
            for sink in sinks:
                write_ahead_batch(sink.write_ahead.uri, epoch, rows)
            notifier.pre_commit(epoch, epoch)
            t0 = time.perf_counter()
            notifier.notify_complete(epoch, epoch)
            notifier.flush()  # every commit finished; raises the first sink's failure
            together.append(time.perf_counter() - t0)
    finally:
        notifier.shutdown()
    return together


def _rewrite(root: Path, checkpoints: int) -> list[float]:
    from deltalake import CommitProperties, Transaction, write_deltalake

    times = []
    for epoch in range(1, checkpoints + 1):
        data = pa.concat_tables([_rows(epoch, p) for p in range(FILES_PER_EPOCH)])
        t0 = time.perf_counter()
        write_deltalake(str(root / "rewrite"), data, mode="append", commit_properties=CommitProperties(
            app_transactions=[Transaction("bench/bench/rewrite", epoch)]))
        times.append(time.perf_counter() - t0)
    return times


def run_lake_commit_benchmark(checkpoints: int, markdown: str | None = None, results: Path | None = RESULTS,
                              command: str | None = None) -> list[str]:
    """Measure (module docstring); print and return the table's lines. The run's record goes to
    ``markdown`` if given, else into ``results`` (None: no record); ``command``: the command line
    it names."""
    record = RunRecord.start("lake-commit", command)
    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="bf-lake-bench-") as tmp:
        root = Path(tmp)
        ledger = TransactionLedger(LocalObjectStore(root / "store"), "bench")
        cuts = CutLog(LocalObjectStore(root / "store"))
        common = {"pipeline": "bench", "ledger": ledger, "stage": "bench", "cuts": cuts}
        iceberg = IcebergSink(spec=IcebergSinkSpec(type="iceberg", name="ice", table="lake.bench"),
                              work_dir=root / "work", name="ice", **common)
        pre, commit = _measure(iceberg, checkpoints)
        rows += [("iceberg: pre-commit", pre), ("iceberg: commit (add_files, ledger, cut)", commit)]
        delta = DeltaSink(spec=DeltaSinkSpec(type="delta", name="dl", path=f"file://{root / 'delta'}"),
                          name="dl", **common)
        pre, commit = _measure(delta, checkpoints)
        rows += [("delta: pre-commit", pre), ("delta: commit (add actions, ledger, cut)", commit),
                 ("delta: the same rows written again (write_deltalake)", _rewrite(root, checkpoints))]
        four = [IcebergSink(spec=IcebergSinkSpec(type="iceberg", name=f"ice{i}", table=f"lake.four{i}"),
                            work_dir=root / "work4", name=f"ice{i}", **common) for i in (1, 2)]
        four += [DeltaSink(spec=DeltaSinkSpec(type="delta", name=f"dl{i}", path=f"file://{root / f'delta4-{i}'}"),
                           name=f"dl{i}", **common) for i in (1, 2)]
        rows.append(("four tables (2 iceberg, 2 delta): the checkpoint's four commits, side by side",
                     _measure_together(four, checkpoints)))
        two = [IcebergSink(spec=IcebergSinkSpec(type="iceberg", name=f"pair{i}", table=f"lake.two{i}"),
                           work_dir=root / "work2", name=f"pair{i}", **common) for i in (1, 2)]
        rows.append(("two iceberg tables: the checkpoint's two commits, side by side",
                     _measure_together(two, checkpoints)))
    lines = render(checkpoints, rows)
    record_run(record, checkpoints, rows, markdown=markdown, results=results)
    return lines


def render(checkpoints: int, rows: list[tuple[str, list[float]]]) -> list[str]:
    """The table's lines: per step (label, seconds per checkpoint) p50, p99 and max in ms."""
    lines = [f"{checkpoints} checkpoints per format, {FILES_PER_EPOCH} files x {ROWS_PER_FILE:,} rows per epoch, "
             "local disk, milliseconds", "",
             "| step | p50 | p99 | max |", "|---|---|---|---|"]
    for label, values in rows:
        ms = [v * 1000 for v in values]
        lines.append(f"| {label} | {statistics.median(ms):.1f} | {_percentile(ms, 0.99):.1f} | {max(ms):.1f} |")
    return lines


def record_run(record: RunRecord, checkpoints: int, rows: list[tuple[str, list[float]]], *, markdown: str | None,
               results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    with every checkpoint's milliseconds per step; returns the paths written."""
    figures = {"checkpoints": checkpoints, "files_per_epoch": FILES_PER_EPOCH, "rows_per_file": ROWS_PER_FILE,
               "steps_ms": {label: [v * 1000 for v in values] for label, values in rows}}
    return report(record, f"Lakehouse sink commits, {checkpoints} checkpoints per format", 1,
                  render(checkpoints, rows), figures, results_dir=results, markdown=markdown)
