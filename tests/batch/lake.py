"""A real committed lake, produced once: the demo-style pipeline (generator -> per-key event-time
window counts -> Parquet, 2PC) run to the end of a bounded source on the shared SparkSession.

Its event time starts half a second before midnight, so the output spans two UTC days (the
rollups' days); 200 ms windows give some hundred output rows from 3000 records.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from tests.scenarios.harness import finish, windowed_spec

ROOT = Path(__file__).resolve().parents[2]
NAME = "lake"
DAYS = ("2026-01-01", "2026-01-02")


@dataclass(frozen=True)
class Lake:
    root: Path
    pipelines: Path  # BARRIERFLOW_PIPELINES_DIR: holds lake.yaml only
    spec_path: Path
    output: Path
    checkpoints: Path

    def parts(self) -> list[Path]:
        return sorted(self.output.glob("part-*.parquet"))

    def rows(self) -> list[dict[str, Any]]:
        return [r for p in self.parts() for r in pq.read_table(p).to_pylist()]

    @contextmanager
    def altered(self) -> Iterator[None]:
        """Restore every committed file as it was when the block ends."""
        saved = self.root / "saved-output"
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(self.output, saved)
        try:
            yield
        finally:
            for part in self.parts():
                part.unlink()
            for part in saved.glob("part-*.parquet"):
                shutil.copy2(part, self.output / part.name)

    def rewrite(self, part: Path, rows: list[dict[str, Any]]) -> None:
        """Replace a committed file's rows (same schema)."""
        schema = pq.read_schema(part)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), part)


def run_lake_pipeline(spark: Any, tmp: Path, sink: dict[str, Any], name: str) -> tuple[Path, Path, dict[str, Any]]:
    """The batch tests' pipeline (1 s of event time over two UTC days in 200 ms windows, the
    demo's expectation suites) named ``name``, writing ``sink``, run to the end of its bounded
    source: its pipelines folder, spec path and spec."""
    data = yaml.safe_load(windowed_spec(tmp, sink, records=1500, per_batch=500).read_text(encoding="utf-8"))
    data["name"] = name
    data["sources"][0]["event_time_start"] = "2026-01-01T23:59:59.500000+00:00"
    data["transformation"]["options"]["window"] = "200 milliseconds"
    data["event_time"]["watermark_delay"] = "100ms"
    data["spark"]["master"] = "local[1]"  # the batch jobs' spark-submit
    data["verification"] = {
        "output_expectations": str(ROOT / "include" / "expectations" / "demo-output.json"),
        "rollup_expectations": str(ROOT / "include" / "expectations" / "demo-rollups.json"),
    }
    data["batch"] = {"output_event_interval": "0s"}
    pipelines = tmp / "pipelines"
    pipelines.mkdir()
    spec_path = pipelines / f"{name}.yaml"
    spec_path.write_text(yaml.safe_dump(data), encoding="utf-8")
    finish(spark, spec_path)
    return pipelines, spec_path, data


def make_lake(spark: Any, tmp: Path) -> Lake:
    output = tmp / "out"
    pipelines, spec_path, _ = run_lake_pipeline(spark, tmp, {"name": "out", "type": "parquet",
                                                              "path": f"file://{output}"}, NAME)
    lake = Lake(tmp, pipelines, spec_path, output, tmp / "checkpoints")
    assert lake.parts(), "the run committed no output"
    return lake


TABLE_NAMES = {"iceberg": "icelake", "delta": "deltalake"}


@dataclass(frozen=True)
class TableLake:
    """The same pipeline writing an Iceberg or a Delta table instead of Parquet files."""

    format: str
    root: Path
    pipelines: Path  # BARRIERFLOW_PIPELINES_DIR: holds <name>.yaml only
    spec_path: Path
    checkpoints: Path
    work_dir: Path

    @property
    def name(self) -> str:
        return TABLE_NAMES[self.format]

    @property
    def delta_path(self) -> Path:
        return self.root / "tables" / "totals"

    def iceberg(self) -> Any:
        """The Iceberg table, through pyiceberg's catalog on the sink's default SQLite file."""
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{self.work_dir / 'iceberg' / 'catalog.db'}",
                             warehouse=f"file://{self.work_dir / 'iceberg' / 'warehouse'}")
        return catalog.load_table("lake.totals")

    def read(self, version: int | None = None) -> pa.Table:
        """The table's rows at ``version`` (None: latest), read by pyiceberg or deltalake."""
        if self.format == "iceberg":
            table = self.iceberg()
            return table.scan(snapshot_id=version).to_arrow() if version is not None else table.scan().to_arrow()
        from deltalake import DeltaTable

        return DeltaTable(str(self.delta_path), version=version).to_pyarrow_table()

    def current_version(self) -> int:
        if self.format == "iceberg":
            return self.iceberg().current_snapshot().snapshot_id
        from deltalake import DeltaTable

        return DeltaTable(str(self.delta_path)).version()


def make_table_lake(spark: Any, tmp: Path, table_format: str) -> TableLake:
    """:func:`make_lake`'s pipeline writing the Iceberg table ``lake.totals`` (default SQLite
    catalog in the work dir) or a Delta table, run to the end of its bounded source."""
    sink: dict[str, Any] = ({"name": "totals", "type": "iceberg", "table": "lake.totals"} if table_format == "iceberg"
                            else {"name": "totals", "type": "delta", "path": f"file://{tmp / 'tables' / 'totals'}"})
    pipelines, spec_path, data = run_lake_pipeline(spark, tmp, sink, TABLE_NAMES[table_format])
    lake = TableLake(table_format, tmp, pipelines, spec_path, tmp / "checkpoints", Path(data["work_dir"]))
    assert lake.read().num_rows, "the run committed no output"
    return lake
