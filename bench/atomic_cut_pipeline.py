"""Torn-cut chaos run of a real pipeline in atomic Iceberg mode:
``python -m bench.atomic_cut --pipeline SPEC --kills 20 [--url URL]``.

SPEC is a pipeline whose Iceberg sinks all write one SQL catalog on PostgreSQL with
``catalog.atomic: true`` (e.g. bench/atomic_lake.yaml: two stages, two tables each). The run is
``barrierflow chaos`` itself (:class:`barrierflow.chaos.runner.ChaosRunner`: a failure-free
reference copy, then a copy run by ``barrierflow run --until-exhausted`` under ``--kills``
SIGKILLs, timed and armed at protocol points, ``iceberg_atomic_prepared`` among them, then
both copies' tables read with pyiceberg and compared row by row), with one addition: while the
copy under kills runs (from its first start to the end of its last run), a reader that knows
nothing of barrierflow (:mod:`bench.atomic_cut_reader`: psycopg and pyiceberg) polls the
catalog as fast as it can and counts torn reads (two of the copy's tables at different
checkpoint ids). Both copies' tables live in the spec's catalog under scratch names; the reader
reads only the copy's.

The run passes when chaos passes (0 missing, extra or duplicated rows; no checkpoint committed
twice in a table's history), the reader made at least ``--min-polls`` reads during the kills
and saw no torn one, and no prepared transaction of the copy is left. The catalog's server is
``--url`` (or the spec's ``catalog.uri`` / the variable its ``catalog.uri_env`` names), else a
throwaway PostgreSQL started like the tests' (``tests/support/postgres_server.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.chaos.runner import ChaosOptions, ChaosResult, ChaosRunner
from barrierflow.chaos.scratch import stages_of
from barrierflow.errors import UserInputError
from barrierflow.spec.lakehouse import IcebergCatalogSpec, IcebergSinkSpec
from barrierflow.spec.loader import load_any_spec

from bench.atomic_cut_reader import CatalogReader, torn


@dataclass(frozen=True)
class AtomicTables:
    """The atomic Iceberg tables of one pipeline: its catalog, their namespace, their names."""

    catalog: IcebergCatalogSpec
    namespace: str
    names: frozenset[str]


def atomic_tables(spec: Any) -> AtomicTables:
    """The atomic Iceberg tables of the loaded pipeline spec ``spec``.

    Raises:
        UserInputError: the spec has no atomic Iceberg sink, or its tables span namespaces (the
            reader reads one namespace).
    """
    sinks = [sink for _, part in stages_of(spec) for sink in part.sinks
             if isinstance(sink, IcebergSinkSpec) and sink.catalog.atomic]
    if not sinks:
        raise UserInputError(f"pipeline {spec.name}: no Iceberg sink with catalog.atomic: true; the torn-cut "
                             "run needs a pipeline whose tables move in one PostgreSQL transaction "
                             "(bench/atomic_lake.yaml)")
    namespaces = {sink.namespace for sink in sinks}
    if len(namespaces) > 1:
        raise UserInputError(f"pipeline {spec.name}: its atomic tables are in namespaces "
                             f"{', '.join(sorted(namespaces))}; the torn-cut reader reads one namespace: put them "
                             "in one")
    return AtomicTables(sinks[0].catalog, namespaces.pop(), frozenset(sink.table_name for sink in sinks))


@dataclass
class PollStats:
    """What the reader saw: reads, torn reads (up to five examples), reads that found every
    table at a checkpoint, the checkpoint ids seen, the reader's failure if it stopped."""

    polls: int = 0
    torn: int = 0
    whole: int = 0
    examples: list[dict[str, int | None]] = field(default_factory=list)
    cuts_seen: set[int] = field(default_factory=set)
    last: dict[str, int | None] = field(default_factory=dict)
    error: str | None = None


class Poller(threading.Thread):
    """Polls the catalog with :class:`CatalogReader` until :meth:`finish`."""

    def __init__(self, conninfo: dict[str, Any], catalog_name: str, namespace: str, tables: frozenset[str]) -> None:
        super().__init__(name="torn-cut reader", daemon=True)
        self.conninfo, self.catalog_name, self.namespace, self.tables = conninfo, catalog_name, namespace, tables
        self.stats = PollStats()
        self._done = threading.Event()

    def run(self) -> None:
        reader = CatalogReader(self.conninfo, self.catalog_name, self.namespace, tables=self.tables)
        try:
            while not self._done.is_set():
                read = reader.read()
                self.stats.polls += 1
                self.stats.last = read
                if torn(read):
                    self.stats.torn += 1
                    if len(self.stats.examples) < 5:
                        self.stats.examples.append(read)
                cuts = [c for c in read.values() if c is not None]
                if len(cuts) == len(self.tables):
                    self.stats.whole += 1
                self.stats.cuts_seen.update(cuts)
        except Exception as exc:  # reported in the result: the run does not pass
            self.stats.error = f"{type(exc).__name__}: {exc}"
        finally:
            reader.close()

    def finish(self) -> PollStats:
        self._done.set()
        self.join()
        return self.stats


class PolledChaos(ChaosRunner):
    """``barrierflow chaos`` with the torn-cut reader polling the copy under kills' tables for
    as long as its runs last (the reference run is not polled)."""

    def __init__(self, spec_path: str | os.PathLike[str], options: ChaosOptions, conninfo: dict[str, Any]) -> None:
        super().__init__(spec_path, options)
        self.conninfo = conninfo
        self.stats = PollStats()
        self.tables: AtomicTables | None = None
        self.copy_pipeline = ""

    def _chaos_runs(self, copy: Any) -> None:
        self.tables = atomic_tables(copy.spec)
        self.copy_pipeline = copy.spec.name
        poller = Poller(self.conninfo, self.tables.catalog.name, self.tables.namespace, self.tables.names)
        poller.start()
        try:
            super()._chaos_runs(copy)
        finally:
            self.stats = poller.finish()


def catalog_url(spec_path: Path, url: str) -> str:
    """The catalog's SQLAlchemy URL: ``url`` (exported in the spec's ``catalog.uri_env`` for
    the runs), or the spec's own; '' when neither names one."""
    catalog = atomic_tables(load_any_spec(spec_path)).catalog
    if catalog.uri:
        if url and url != catalog.uri:
            raise UserInputError(f"--url {url} and the spec's catalog.uri {catalog.uri} differ: give the spec "
                                 "catalog.uri_env to point it at --url, or leave --url out")
        return catalog.uri
    if url:
        os.environ[catalog.uri_env] = url
        return url
    return os.environ.get(catalog.uri_env, "").strip()


@contextlib.contextmanager
def catalog_server(spec_path: Path, url: str) -> Iterator[str]:
    """The catalog URL (:func:`catalog_url`), else a throwaway PostgreSQL server's, for as long
    as the context lasts (exported in the spec's ``catalog.uri_env``)."""
    found = catalog_url(spec_path, url)
    if found:
        yield found
        return
    from psycopg.conninfo import conninfo_to_dict

    from tests.support.postgres_server import running_postgres

    with running_postgres() as endpoint:
        p = conninfo_to_dict(endpoint.dsn)
        yield catalog_url(spec_path, f"postgresql+psycopg2://{p.get('user', 'postgres')}@{p.get('host', '127.0.0.1')}:"
                                     f"{p.get('port', 5432)}/{p.get('dbname', 'postgres')}")


def prepared_left(conninfo: dict[str, Any], pipeline: str) -> int:
    """Prepared transactions of pipeline ``pipeline``'s atomic cuts still in the database."""
    import psycopg
    from barrierflow.sinks.iceberg_atomic import gid_of

    with psycopg.connect(autocommit=True, **conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE %s",
                           [gid_of(pipeline, 0).removesuffix("0") + "%"]).fetchone()
    return int(row[0]) if row else 0


def verdict(result: ChaosResult, stats: PollStats, *, min_polls: int, left: int) -> dict[str, Any]:
    """The run's figures and verdict: chaos's (rows read by pyiceberg) and the reader's."""
    points = Counter(e.detail.split("@")[0] for e in result.events if e.kind == "point")
    problems = [p for p, bad in [
        ("chaos failed", not result.passed),
        (f"{stats.torn} torn read(s)", stats.torn > 0),
        (f"the reader made {stats.polls} reads during the kills, fewer than {min_polls}; give the pipeline more "
         "input", stats.polls < min_polls),
        (f"{left} prepared transaction(s) of the copy left", left > 0),
        (f"the reader failed: {stats.error}", stats.error is not None),
    ] if bad]
    return {"passed": not problems, "problems": problems,
            "kills": dict(result.kills), "kills_by_point": dict(points), "runs": result.runs,
            "checkpoints": result.checkpoints, "polls": stats.polls, "torn_reads": stats.torn,
            "torn_examples": stats.examples, "polls_with_every_table_at_a_checkpoint": stats.whole,
            "distinct_checkpoints_seen_by_reader": len(stats.cuts_seen), "last_read": stats.last,
            "rows_expected": sum(o.rows_expected for o in result.outputs),
            "rows": sum(o.rows for o in result.outputs), "missing": result.missing, "extra": result.extra,
            "duplicated": result.duplicated, "commits_repeated": result.commits_repeated,
            "prepared_left": left, "chaos_passed": result.passed, "scratch": result.scratch}


def run_pipeline(spec_path: Path, options: ChaosOptions, *, url: str = "", min_polls: int = 10_000,
                 suite_drivers: bool = True) -> tuple[ChaosResult, dict[str, Any]]:
    """The torn-cut chaos run of the pipeline at ``spec_path`` (module docstring); returns
    chaos's result (its report written into its scratch dir) and :func:`verdict`'s figures.
    ``suite_drivers``: the runs get the suite's environment for short-lived drivers
    (:func:`tests.drivers.short_lived_driver_env`: C1 and the serial GC, and Python workers that
    import pyspark from site-packages, so they connect back to a loaded machine's JVM in time),
    as bench/chaos_runs.py gives its runs."""
    from barrierflow.chaos.report import write_report
    from barrierflow.sinks.iceberg_atomic import libpq_params

    if suite_drivers:
        from tests.drivers import short_lived_driver_env

        os.environ.update(short_lived_driver_env())
    with catalog_server(spec_path, url) as found:
        conninfo = libpq_params(found)
        runner = PolledChaos(spec_path, options, conninfo)
        result = runner.run()
        write_report(result, Path(result.scratch))
        figures = verdict(result, runner.stats, min_polls=min_polls, left=prepared_left(conninfo, runner.copy_pipeline))
    return result, figures
