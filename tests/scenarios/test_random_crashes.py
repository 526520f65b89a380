"""Exactly-once into the Parquet file sink and PostgreSQL across SIGKILLed drivers: one
randomized run of 8 crash/restore cycles over two pipelines.

The file sink's pipeline is crashed at every named protocol point once, PostgreSQL's at each
point where the sink holds an epoch (pre-committed, told to commit, half committed; the other
two points come before any sink call), in a random order and at a random hit (1-2) of the
point, so the run is both the randomized test and, per sink, the crash-at-every-point test. The
large runs (100 kills per sink, bench/results/chaos-runs.md) are `barrierflow chaos` runs, outside the suite.
The two pipelines' drivers run side by side, as two jobs on one host do: in each round both are
started, each SIGKILLs itself at its own point, and both are recovered. After every
recovery the committed output must hold only failure-free rows, none twice (and no
prepared PostgreSQL transaction may be left); after running both pipelines to the end of
their bounded source, each output must equal the failure-free run's rows exactly.
(Kafka's every-point test is tests/scenarios/test_exactly_once_kafka.py.)"""

from __future__ import annotations

import random
from collections.abc import Callable
from itertools import zip_longest
from pathlib import Path
from typing import Any

import pytest
from barrierflow.faults import STAGE_POINTS
from barrierflow.sinks.parquet import read_committed

from tests.scenarios.harness import (
    SINK_HELD_POINTS,
    assert_sub_multiset,
    crashed_runs,
    finish,
    recover,
    window_rows,
    windowed_spec,
)
from tests.scenarios.postgres_output import (
    as_postgres_rows,
    committed_rows,
    create_window_table,
    prepared_transactions,
)

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.timeout(1500), pytest.mark.slow(240)]
#: Records per source partition: 30 micro-batches of 100, more than 5 crashes use up.
RECORDS = 3000
PER_BATCH = 100
#: Event time between records: 10 ms, so every 1 s window closes within a batch or two and
#: nearly every epoch has output to commit. With the generator's default 1 ms a window closed
#: every 10 batches, and a crash in the second sink commit with output came after ~25 batches
#: of a new driver (measured: 26 batches, 43.5 core-seconds for one crashed driver).
EVENT_TIME_STEP_MS = 10
ROUNDS_PER_POINT = 1
SEED = 20261123


#: The points each pipeline is crashed at: every stage point for the file sink; for PostgreSQL
#: the points where the sink holds an epoch (the others come before any sink call).
POINTS = {"files": STAGE_POINTS, "postgres": SINK_HELD_POINTS}


def crash_plan(rng: random.Random) -> list[tuple[str, str]]:
    """(sink, crash spec) per cycle: each sink's :data:`POINTS` ``ROUNDS_PER_POINT`` times,
    shuffled, at a random hit, the sinks alternating while both have cycles left."""
    per_sink = {sink: rng.sample(points * ROUNDS_PER_POINT, len(points) * ROUNDS_PER_POINT)
                for sink, points in POINTS.items()}
    return [(sink, f"{point}@{rng.randint(1, 2)}")
            for pair in zip_longest(per_sink["files"], per_sink["postgres"])
            for sink, point in zip(("files", "postgres"), pair, strict=True) if point is not None]


def test_crash_plan_covers_each_sinks_points() -> None:
    plan = crash_plan(random.Random(SEED))
    assert len(plan) == sum(len(points) for points in POINTS.values()) * ROUNDS_PER_POINT
    for sink, points in POINTS.items():
        crashed = [spec.split("@")[0] for s, spec in plan if s == sink]
        assert sorted(crashed) == sorted(points * ROUNDS_PER_POINT)
    assert [s for s, _ in plan[:4]] == ["files", "postgres", "files", "postgres"]


def test_random_crash_restore_cycles_at_every_point_file_and_postgres(
        spark, tmp_path: Path, reference_rows, postgres_endpoint: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = postgres_endpoint.dsn
    table = create_window_table(dsn)
    monkeypatch.setenv("BARRIERFLOW_POSTGRES_DSN", dsn)
    out = tmp_path / "files" / "out"
    (tmp_path / "files").mkdir()
    (tmp_path / "pg").mkdir()
    pipelines = {
        "files": windowed_spec(tmp_path / "files", {"name": "out", "type": "parquet", "path": f"file://{out}"},
                               records=RECORDS, per_batch=PER_BATCH, event_time_step_ms=EVENT_TIME_STEP_MS),
        "postgres": windowed_spec(tmp_path / "pg", {"name": "pg", "type": "postgres", "table": table},
                                  records=RECORDS, per_batch=PER_BATCH, event_time_step_ms=EVENT_TIME_STEP_MS),
    }
    reference = reference_rows(RECORDS, EVENT_TIME_STEP_MS)

    def committed_files() -> list[tuple[Any, ...]]:
        table_out = read_committed(f"file://{out}")
        return window_rows(table_out.to_pylist() if table_out is not None else [])

    def committed_postgres() -> list[tuple[Any, ...]]:
        assert prepared_transactions(dsn) == [], "recovery left prepared transactions"
        return committed_rows(dsn, table)

    outputs: dict[str, tuple[Callable[[], list[tuple[Any, ...]]], list[tuple[Any, ...]]]] = {
        "files": (committed_files, reference), "postgres": (committed_postgres, as_postgres_rows(reference))}
    ways: list[str] = []
    plan = crash_plan(random.Random(SEED))
    rounds: list[list[tuple[str, str]]] = []  # a round: one cycle of each pipeline, drivers side by side
    for cycle in plan:
        if rounds and len(rounds[-1]) == 1 and rounds[-1][0][0] != cycle[0]:
            rounds[-1].append(cycle)
        else:
            rounds.append([cycle])
    for round_ in rounds:
        crashed_all = crashed_runs([(pipelines[sink], crash_at) for sink, crash_at in round_])
        for (sink, crash_at), crashed in zip(round_, crashed_all, strict=True):
            cycle = len(ways) + 1
            point = crash_at.split("@")[0]
            assert crashed.returncode == -9, f"cycle {cycle} ({sink}, {crash_at}): exit {crashed.returncode}\n" \
                                             f"{crashed.stderr[-3000:]}"
            assert f"injected crash at {point}" in crashed.stderr
            ways.append(recover(pipelines[sink]))
            read, expected = outputs[sink]
            assert_sub_multiset(read(), expected, f"cycle {cycle}: {sink} crashed at {crash_at}, then {ways[-1]}")
    assert len(ways) == len(plan)
    assert "restore" in ways
    for spec_path in pipelines.values():
        finish(spark, spec_path)
    assert committed_files() == reference
    assert not list((out / "_staging").glob("batch=*/*.parquet")), "write-ahead files left after the last commit"
    assert committed_rows(dsn, table) == as_postgres_rows(reference)
    assert prepared_transactions(dsn) == []
