"""The spec of the lakehouse table sinks: ``type: iceberg`` and ``type: delta``.

Both are two-phase-commit sinks whose epochs become one table commit per checkpoint
(:mod:`barrierflow.sinks.iceberg`, :mod:`barrierflow.sinks.delta`). Their write-ahead area lives
inside the table's own location (``_barrierflow_staging``), so publishing a file is a rename in
the same store, never a rewrite.

Iceberg tables live in a catalog (``catalog``):

* ``type: sql`` (default) with ``uri`` empty: pyiceberg's SQL catalog on a SQLite file under the
  pipeline's work dir (``<work_dir>/iceberg/catalog.db``), nothing to start;
* ``type: sql`` with ``uri`` (or ``uri_env``, the environment variable holding it, for URIs
  with a password) ``postgresql+psycopg2://USER@HOST:PORT/DB``: a catalog shared by several
  pipelines and readers;
* ``type: rest``: an Iceberg REST catalog at ``uri`` (``http(s)://HOST:PORT``).

``warehouse`` is where barrierflow creates the tables it creates (default
``file://<work_dir>/iceberg/warehouse``); a table that exists keeps its location.

``catalog.atomic: true`` (atomic mode, :mod:`barrierflow.sinks.iceberg_atomic`): the metadata
pointers of every Iceberg table of the pipeline move in one PostgreSQL transaction per
checkpoint. It needs a ``type: sql`` catalog on PostgreSQL, the same catalog for every Iceberg
sink of the pipeline (all of them atomic), no Delta sink and ``commit_every: 1``
(:func:`atomic_problems`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDENT = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _partition_columns(value: list[str]) -> list[str]:
    for column in value:
        if not _COLUMN.match(column):
            raise ValueError(f"partitioned_by: {column!r} is not a column name (letters, digits, '_'); the table is "
                             "partitioned by the values of output columns (identity partitions)")
    duplicates = sorted({c for c in value if value.count(c) > 1})
    if duplicates:
        raise ValueError(f"partitioned_by names {', '.join(duplicates)} more than once")
    return value


class IcebergCatalogSpec(_Strict):
    """Where an Iceberg table's metadata pointer lives; see the module docstring."""

    type: Literal["sql", "rest"] = "sql"
    name: str = Field("barrierflow", pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$",
                      description="the catalog's name (the SQL catalog keeps it in every row)")
    uri: str = Field("", description="sql: '' (SQLite under the work dir) or a SQLAlchemy URL; rest: http(s)://")
    uri_env: str = Field("", pattern=r"^$|^[A-Z_][A-Z0-9_]*$",
                         description="environment variable holding the URI (keeps a password out of the spec)")
    warehouse: str = Field("", description="storage URI where new tables are created; default "
                                           "file://<work_dir>/iceberg/warehouse")
    properties: dict[str, str] = Field(default_factory=dict, description="more pyiceberg catalog properties")
    atomic: bool = Field(False, description="move every Iceberg table's metadata pointer of a checkpoint in one "
                                            "PostgreSQL transaction (a sql catalog on PostgreSQL only)")

    @model_validator(mode="after")
    def _check(self) -> IcebergCatalogSpec:
        if self.uri and self.uri_env:
            raise ValueError("catalog: give uri or uri_env, not both")
        if self.atomic and (self.type != "sql" or not (self.uri_env or self.uri.startswith("postgresql"))):
            raise ValueError("catalog.atomic: true needs a type 'sql' catalog on PostgreSQL (uri "
                             "'postgresql+psycopg2://USER@HOST:PORT/DB' or uri_env): the tables' metadata pointers "
                             "move in one PostgreSQL transaction; SQLite and REST catalogs cannot do that")
        if self.type == "rest" and not (self.uri_env or self.uri.startswith(("http://", "https://"))):
            raise ValueError("catalog type 'rest' needs uri: 'http(s)://HOST:PORT' of the REST catalog (or uri_env)")
        if self.type == "sql" and self.uri and not self.uri.startswith(("sqlite:", "postgresql")):
            raise ValueError(f"catalog type 'sql': uri {self.uri!r} is neither 'sqlite:///PATH' nor "
                             "'postgresql+psycopg2://USER@HOST:PORT/DB' (keep the password in uri_env's variable)")
        if self.warehouse and not self.warehouse.startswith(("file://", "s3://")):
            raise ValueError(f"catalog warehouse {self.warehouse!r} is not a storage URI ('file://PATH' or "
                             "'s3://BUCKET/PREFIX')")
        return self


class IcebergSinkSpec(_Strict):
    """Rows appended to an Apache Iceberg table, one snapshot per completed checkpoint."""

    name: str = "iceberg"
    type: Literal["iceberg"]
    table: str = Field(..., pattern=_IDENT, description="namespace.table in the catalog")
    catalog: IcebergCatalogSpec = IcebergCatalogSpec()
    partitioned_by: list[str] = Field(default_factory=list, description="identity partition columns, for a "
                                                                        "table barrierflow creates")
    commit_every: int = Field(1, ge=1, description="commit once every N completed checkpoints with rows "
                                                   "(fewer, larger commits; the table lags by up to N - 1)")

    @model_validator(mode="after")
    def _atomic_commits_every_checkpoint(self) -> IcebergSinkSpec:
        if self.catalog.atomic and self.commit_every != 1:
            raise ValueError(f"sink {self.name!r}: catalog.atomic: true commits every table at every checkpoint; "
                             f"remove commit_every: {self.commit_every} or the atomic mode")
        return self

    @field_validator("table", mode="before")
    @classmethod
    def _named(cls, value: object) -> object:
        if isinstance(value, str) and not re.match(_IDENT, value):
            raise ValueError(f"table {value!r} is not 'namespace.table' (letters, digits, '_'; e.g. 'lake.totals')")
        return value

    @field_validator("partitioned_by")
    @classmethod
    def _columns(cls, value: list[str]) -> list[str]:
        return _partition_columns(value)

    @property
    def namespace(self) -> str:
        return self.table.rpartition(".")[0]

    @property
    def table_name(self) -> str:
        return self.table.rpartition(".")[2]


class DeltaSinkSpec(_Strict):
    """Rows appended to a Delta Lake table at ``path``, one table version per completed checkpoint."""

    name: str = "delta"
    type: Literal["delta"]
    path: str = Field(..., description="storage URI of the table's root (file://PATH or s3://BUCKET/PREFIX)")
    partitioned_by: list[str] = Field(default_factory=list, description="identity partition columns, for a "
                                                                        "table barrierflow creates")
    commit_every: int = Field(1, ge=1, description="commit once every N completed checkpoints with rows "
                                                   "(fewer, larger commits; the table lags by up to N - 1)")

    @field_validator("path")
    @classmethod
    def _uri(cls, value: str) -> str:
        if not isinstance(value, str) or not value.startswith(("file://", "s3://")) or value.rstrip("/") in (
                "file:", "s3:"):
            raise ValueError(f"path: expected the table's storage URI 'file://PATH' or 's3://BUCKET/PREFIX', "
                             f"got {value!r}")
        return value.rstrip("/")

    @field_validator("partitioned_by")
    @classmethod
    def _columns(cls, value: list[str]) -> list[str]:
        return _partition_columns(value)


def atomic_problems(sinks: list[tuple[str, object]]) -> str:
    """Why the atomic mode that some Iceberg sink of ``sinks`` ((where, sink spec) of every sink
    of a pipeline) asks for cannot hold, as one message naming the sinks and the fix; '' when it
    can (or no sink asks for it). Every Iceberg sink must be atomic and in one catalog (same
    name and URI), and no Delta sink may be there: a Delta table's version cannot move in the
    catalog's transaction."""
    icebergs = [(where, s) for where, s in sinks if isinstance(s, IcebergSinkSpec)]
    atomic = [(where, s) for where, s in icebergs if s.catalog.atomic]
    if not atomic:
        return ""
    problems: list[str] = []
    plain = [where for where, s in icebergs if not s.catalog.atomic]
    if plain:
        problems.append(f"{', '.join(plain)} not atomic: set catalog.atomic: true on every Iceberg sink of the "
                        "pipeline (its tables move together or not at all)")
    catalogs = {(s.catalog.name, s.catalog.uri, s.catalog.uri_env) for _, s in atomic}
    if len(catalogs) > 1:
        problems.append("the atomic Iceberg sinks name different catalogs ("
                        + "; ".join(f"{where}: {s.catalog.name} {s.catalog.uri or '$' + s.catalog.uri_env}"
                                    for where, s in atomic)
                        + "): one PostgreSQL transaction covers one catalog; give them the same catalog")
    delta = [where for where, s in sinks if isinstance(s, DeltaSinkSpec)]
    if delta:
        problems.append(f"{', '.join(delta)} is a Delta table: Delta tables cannot join the atomic Iceberg "
                        "commit (their versions are not in the catalog); write them from another pipeline or "
                        "turn catalog.atomic off")
    return "catalog.atomic: " + "; ".join(problems) if problems else ""
