"""The PostgreSQL sink applies a micro-batch written ahead as COPY input (CSV) and stores exactly
what it stores from the same rows written ahead as rows (psycopg's per-row COPY); where the
table's column types would read the CSV text differently, and for an upsert, it decodes the
batch and applies rows. Driven through the template (no Spark) against a throwaway PostgreSQL
(or $BARRIERFLOW_TEST_POSTGRES_DSN)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from barrierflow.sinks.copy_rows import encoded_copy_rows
from barrierflow.sinks.postgres import PostgresSink, pg_type
from barrierflow.spec.models import PostgresSinkSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger

from tests.sinks.test_copy_rows import SCHEMA, random_rows
from tests.support.postgres_server import PostgresEndpoint

pytestmark = pytest.mark.postgres

DSN_ENV = "BF_TEST_COPY_PG_DSN"


class Target:
    """A table of its own and a sink writing it, for one test."""

    def __init__(self, admin: psycopg.Connection[Any], tmp: Path, ddl: str, mode: str = "insert") -> None:
        tag = uuid.uuid4().hex[:10]
        self.admin, self.table, self.pipeline = admin, f"copy_{tag}", f"c{tag}"
        admin.execute(f"CREATE TABLE {self.table} ({ddl})")
        self.uri = f"file://{tmp / tag / 'write-ahead'}"
        spec = PostgresSinkSpec(type="postgres", name="pg", dsn_env=DSN_ENV, table=self.table, mode=mode,
                                key_columns=["id"] if mode == "upsert" else [])
        self.sink = PostgresSink(spec=spec, write_ahead_uri=self.uri, name="pg", pipeline=self.pipeline,
                                 ledger=TransactionLedger(LocalObjectStore(tmp / tag / "store"), self.pipeline))

    def commit(self, *batches: pa.Table) -> dict[str, Any]:
        for number, batch in enumerate(batches):
            write_ahead_batch(self.uri, number, batch, files=2)
        handles = self.sink.pre_commit_epoch(1, barrier_batch=len(batches) - 1)
        self.sink.notify_checkpoint_complete(1, 1)
        return handles[0]

    def stored(self) -> list[str]:
        return [r[0] for r in self.admin.execute(f"SELECT t::text FROM {self.table} t ORDER BY id").fetchall()]


@pytest.fixture
def admin(postgres_endpoint: PostgresEndpoint, monkeypatch: pytest.MonkeyPatch) -> Iterator[psycopg.Connection[Any]]:
    monkeypatch.setenv(DSN_ENV, postgres_endpoint.dsn)
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        yield conn


def natural_ddl(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name} {pg_type(field.type)}" for field in schema)


@pytest.mark.parametrize("seed", [11, 12])
def test_copy_input_stores_exactly_what_the_per_row_copy_stores(admin: psycopg.Connection[Any], tmp_path: Path,
                                                                 seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def not_decoded(table: pa.Table) -> pa.Table:
        raise AssertionError("a batch of COPY input into columns of its own types is streamed, not decoded")

    monkeypatch.setattr("barrierflow.sinks.postgres.decoded", not_decoded)
    rows = random_rows(seed, 400)
    by_rows, by_copy = Target(admin, tmp_path, natural_ddl(SCHEMA)), Target(admin, tmp_path, natural_ddl(SCHEMA))
    assert by_rows.commit(rows)["rows"] == 400
    assert by_copy.commit(encoded_copy_rows(rows))["rows"] == 400
    assert len(by_rows.stored()) == 400
    assert by_copy.stored() == by_rows.stored()


def test_a_table_that_reads_the_text_differently_gets_rows(admin: psycopg.Connection[Any], tmp_path: Path) -> None:
    # every column but the id is text: a boolean would be stored as 'true' from CSV, 't' from psycopg
    ddl = "id bigint, " + ", ".join(f"{field.name} text" for field in SCHEMA if field.name != "id")
    rows = random_rows(13, 200)
    by_rows, by_copy = Target(admin, tmp_path, ddl), Target(admin, tmp_path, ddl)
    by_rows.commit(rows)
    assert by_copy.commit(encoded_copy_rows(rows))["rows"] == 200
    assert by_copy.stored() == by_rows.stored()
    assert admin.execute(f"SELECT ok FROM {by_copy.table} WHERE ok IS NOT NULL LIMIT 1").fetchone()[0] in ("t", "f")


def test_one_epoch_of_rows_and_copy_input_then_an_upsert_of_copy_input(admin: psycopg.Connection[Any],
                                                                       tmp_path: Path) -> None:
    first, second = random_rows(14, 60), random_rows(15, 60)
    second = second.set_column(0, "id", pa.array(range(60, 120), pa.int64()))
    mixed = Target(admin, tmp_path, natural_ddl(SCHEMA))
    assert mixed.commit(first, encoded_copy_rows(second))["rows"] == 120
    reference = Target(admin, tmp_path, natural_ddl(SCHEMA))
    reference.commit(pa.concat_tables([first, second]))
    assert mixed.stored() == reference.stored()

    # an upsert (a batch written ahead as COPY input before the sink's mode changed): row by row, the last wins
    upsert = Target(admin, tmp_path, natural_ddl(SCHEMA).replace("id bigint", "id bigint PRIMARY KEY"), mode="upsert")
    repeated = pa.concat_tables([first, first.set_column(1, "s", pa.array(["last"] * 60, pa.string()))])
    assert upsert.commit(encoded_copy_rows(repeated))["rows"] == 120
    assert [r[0] for r in admin.execute(f"SELECT DISTINCT s FROM {upsert.table}").fetchall()] == ["last"]
    assert admin.execute(f"SELECT count(*) FROM {upsert.table}").fetchone()[0] == 60
