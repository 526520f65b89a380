"""Read a completed checkpoint's state (``barrierflow state schema|query|diff|stats``), whatever the pipeline's shape.

Each operation opens the pipeline, picks the cut (``checkpoint_id``; None: the newest completed
one of the current timeline) and the stage (``stage``; optional for one stage, required of a
pipeline of several, except for ``schema``, which shows every stage), and reads that stage's
checkpoint of the cut with :func:`barrierflow.state.reader.open_state`: materialized into a
scratch directory, never into the live Spark checkpoint, the store only read. Tables stay
Spark DataFrames: only bounded previews, counts, samples and per-partition figures reach the
driver; ``output`` writes a whole table with Spark (a directory of Parquet or JSON part files).

Errors (exit code 2 at the command line), each naming the thing and the fix: no completed cut
or an unknown id (:class:`~barrierflow.errors.CheckpointNotFoundError`, listing the completed
ones); an unknown stage; several stages and no ``stage`` or several stateful operators and no
``operator`` (:class:`~barrierflow.state.errors.AmbiguousStateError`); a stage without state
(:class:`~barrierflow.state.errors.StatelessStageError`); a file of the checkpoint missing or
altered in the store (:class:`~barrierflow.errors.CheckpointCorruptError`); ``--sql`` Spark
cannot run, or an ``output`` that exists or is neither ``.parquet`` nor ``.json``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError, UserInputError
from barrierflow.pipeline.model import OpenedPipeline, Stage, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.runtime.session import session_for
from barrierflow.state.errors import AmbiguousStateError
from barrierflow.state.reader import (
    OperatorSchema,
    StateSnapshot,
    flat_columns,
    has_state,
    open_state,
    partition_bytes,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DiffResult", "QueryResult", "SchemaResult", "StatsResult", "state_diff", "state_query", "state_schema",
           "state_stats"]

#: The table name ``--sql`` selects from.
TABLE = "state"
#: Output formats of ``--output``, by the path's suffix.
OUTPUT_FORMATS = (".parquet", ".json")


def _stateful(pipeline: OpenedPipeline, checkpoint_id: int) -> list[str]:
    names = []
    for stage in pipeline.stages:
        try:
            if has_state(stage.store.get(checkpoint_id)):
                names.append(stage.name)
        except (CheckpointNotFoundError, CheckpointCorruptError):
            continue
    return names


def choose_stage(pipeline: OpenedPipeline, stage: str | None, checkpoint_id: int) -> Stage:
    """Stage ``stage``, or the only one. Raises UserInputError for an unknown name and
    AmbiguousStateError for several stages without a name (naming those that hold state)."""
    if stage is not None:
        return pipeline.stage(stage)
    if len(pipeline.stages) == 1:
        return pipeline.stages[0]
    stateful = _stateful(pipeline, checkpoint_id)
    hint = f" (with state in {words(pipeline).cut_noun} {checkpoint_id}: {', '.join(stateful) or 'none'})"
    raise AmbiguousStateError(f"pipeline {pipeline.name} has {len(pipeline.stages)} stages: "
                              f"{', '.join(s.name for s in pipeline.stages)}{hint}; choose one with --stage NAME")


@contextmanager
def _opened(pipeline: OpenedPipeline, stage: Stage, checkpoint_id: int, spark: SparkSession,
            scratch: str | None) -> Iterator[StateSnapshot]:
    manifest = stage.store.get(checkpoint_id)
    with open_state(spark, pipeline=pipeline.name, stage=stage.name, store=stage.store, manifest=manifest,
                    spark_spec=stage.spec.spark, scratch=scratch,
                    stateful_stages=_stateful(pipeline, checkpoint_id)) as snapshot:
        yield snapshot


def _plain(value: Any) -> Any:
    """A Spark value as JSON can show it (timestamps and decimals as text)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _rows(frame: DataFrame, limit: int) -> list[dict[str, Any]]:
    return [_plain(r.asDict(recursive=True)) for r in frame.limit(limit).collect()]


def _columns(frame: DataFrame) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in frame.schema.fields}


def write_table(frame: DataFrame, output: str | os.PathLike[str]) -> str:
    """Write ``frame`` with Spark to ``output`` (``.parquet`` or ``.json``: a directory of part
    files); returns the absolute path. Raises UserInputError for another suffix or an existing path."""
    write_table_check(output)
    path = Path(output).absolute()
    writer = frame.write.mode("errorifexists")
    if path.suffix.lower() == ".parquet":
        writer.parquet(str(path))
    else:
        writer.json(str(path))
    return str(path)


# -- schema ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageSchema:
    """One stage's stateful operators in one cut (none: a stage without state)."""

    stage: str
    batch_id: int
    operators: list[OperatorSchema]

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "batch_id": self.batch_id, "stateful": bool(self.operators),
                "operators": [o.as_dict() for o in self.operators]}


@dataclass(frozen=True)
class SchemaResult:
    """``state schema``: every stage's operators (or the one asked for) of cut ``checkpoint_id``."""

    pipeline: str
    noun: str
    checkpoint_id: int
    stages: list[StageSchema]

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "noun": self.noun, "checkpoint_id": self.checkpoint_id,
                "stages": {s.stage: s.as_dict() for s in self.stages}}


def state_schema(spec_path: str | os.PathLike[str], *, checkpoint_id: int | None = None, stage: str | None = None,
                 spark: SparkSession | None = None, scratch: str | None = None) -> SchemaResult:
    """Each stage's stateful operators (id, Spark's name, store names, partitions, key and value
    schemas) in cut ``checkpoint_id``; every stage, or only ``stage`` (which must keep state)."""
    pipeline = open_pipeline(spec_path)
    cid = pipeline.completed_cut(checkpoint_id)
    chosen = [pipeline.stage(stage)] if stage is not None else list(pipeline.stages)
    session = session_for(pipeline, spark)
    stages = []
    for s in chosen:
        manifest = s.store.get(cid)
        if not has_state(manifest):
            if stage is not None:
                with _opened(pipeline, s, cid, session, scratch):  # raises StatelessStageError
                    pass
            stages.append(StageSchema(s.name, manifest.spark_batch_id, []))
            continue
        with _opened(pipeline, s, cid, session, scratch) as snapshot:
            stages.append(StageSchema(s.name, snapshot.batch_id, snapshot.operators()))
    return SchemaResult(pipeline.name, words(pipeline).cut_noun, cid, stages)


# -- query -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryResult:
    """``state query``: the table's columns, its row count, a preview of at most ``limit`` rows
    (``truncated``: there are more) and where the whole table was written (``output``)."""

    pipeline: str
    stage: str
    checkpoint_id: int
    batch_id: int
    operator_id: int
    sql: str | None
    columns: dict[str, str]
    rows: int
    preview: list[dict[str, Any]]
    output: str | None = None
    #: a keyed function's operator: the state variable read (``timers``: its registered timers)
    variable: str | None = None

    @property
    def truncated(self) -> bool:
        return self.rows > len(self.preview)

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "stage": self.stage, "checkpoint_id": self.checkpoint_id,
                "batch_id": self.batch_id, "operator_id": self.operator_id, "sql": self.sql,
                "columns": self.columns, "rows": self.rows, "preview": self.preview, "truncated": self.truncated,
                "output": self.output, "variable": self.variable}


def state_query(spec_path: str | os.PathLike[str], *, checkpoint_id: int | None = None, stage: str | None = None,
                operator: int | None = None, sql: str | None = None, output: str | None = None, limit: int = 20,
                spark: SparkSession | None = None, scratch: str | None = None,
                variable: str | None = None) -> QueryResult:
    """The state of one stateful operator of ``stage`` in cut ``checkpoint_id`` as a table
    (flattened: ``partition_id``, ``operator_id``, ``key_*``, ``value_*``), optionally through
    ``sql`` over the table named :data:`TABLE`; with ``output`` written whole by Spark, else a
    preview of ``limit`` rows. Of a keyed function's operator (transformWithState), one state
    variable: ``variable`` (None: the only one; ``timers``: its registered timers,
    ``key_*`` and ``expiration_timestamp_ms``); a list's rows are one per element
    (``list_element_*``), a map's one per entry (``user_map_key_*``, ``user_map_value_*``).
    Raises UserInputError for SQL Spark cannot run (its message), AmbiguousStateError for a
    variable the operator does not have (listing them)."""
    if limit < 0:
        raise UserInputError("--limit must be 0 or more")
    pipeline = open_pipeline(spec_path)
    cid = pipeline.completed_cut(checkpoint_id)
    chosen = choose_stage(pipeline, stage, cid)
    session = session_for(pipeline, spark)
    if output is not None:
        write_table_check(output)
    with _opened(pipeline, chosen, cid, session, scratch) as snapshot:
        op = snapshot.operator(operator)
        table = snapshot.table(op.operator_id, variable)
        chosen_variable = op.variable(variable).name if op.keyed else None
        view = TABLE
        frame = table
        if sql:
            table.createOrReplaceTempView(view)
            try:
                frame = session.sql(sql)
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise UserInputError(f"--sql {sql!r}: Spark cannot run it: {first[:600]} (the table is {TABLE!r} "
                                     f"with columns {', '.join(table.columns)})") from None
        try:
            written = write_table(frame, output) if output is not None else None
            return QueryResult(pipeline.name, chosen.name, cid, snapshot.batch_id, op.operator_id, sql,
                               _columns(frame), frame.count(), _rows(frame, limit), written, chosen_variable)
        finally:
            if sql:
                session.catalog.dropTempView(view)


def write_table_check(output: str | os.PathLike[str]) -> None:
    """Refuse an ``output`` :func:`write_table` would refuse, before any state is read."""
    path = Path(output).absolute()
    if path.suffix.lower() not in OUTPUT_FORMATS:
        raise UserInputError(f"--output {output}: give a path ending in .parquet or .json (the format is taken "
                             "from the suffix)")
    if path.exists():
        raise UserInputError(f"--output {path} already exists; give a new path or delete it")


# -- diff ------------------------------------------------------------------------------------

#: The kinds of change ``state diff`` reports, in order.
CHANGES = ("added", "changed", "removed")


@dataclass(frozen=True)
class DiffResult:
    """``state diff``: how many keys were added, changed (another value) and removed between two
    cuts, a sample of each (key and old/new value columns), and where the whole diff went."""

    pipeline: str
    stage: str
    from_id: int
    to_id: int
    operator_id: int
    counts: dict[str, int]
    samples: dict[str, list[dict[str, Any]]]
    output: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "stage": self.stage, "from": self.from_id, "to": self.to_id,
                "operator_id": self.operator_id, "counts": self.counts, "samples": self.samples,
                "output": self.output}


def diff_frame(old: DataFrame, new: DataFrame, keys: list[str], values: list[str]) -> DataFrame:
    """The keys of two flattened tables that differ: ``change`` (``added``, ``changed``,
    ``removed``), the key columns, ``old_<value column>`` and ``new_<value column>``; a full outer
    join on the key columns (null-safe), computed by Spark."""
    from pyspark.sql import functions as F

    def side(frame: DataFrame, name: str) -> DataFrame:
        return frame.select(F.struct(*keys).alias("k"), F.struct(*values).alias("v"), *keys, *values).alias(name)

    joined = side(old, "o").join(side(new, "n"), F.col("o.k").eqNullSafe(F.col("n.k")), "full_outer")
    change = (F.when(F.col("o.k").isNull(), F.lit("added")).when(F.col("n.k").isNull(), F.lit("removed"))
              .when(~F.col("o.v").eqNullSafe(F.col("n.v")), F.lit("changed")))
    key_columns = [F.coalesce(F.col(f"o.{k}"), F.col(f"n.{k}")).alias(k) for k in keys]
    return (joined.select(change.alias("change"), *key_columns, *[F.col(f"o.{v}").alias(f"old_{v}") for v in values],
                          *[F.col(f"n.{v}").alias(f"new_{v}") for v in values])
            .where(F.col("change").isNotNull()))


def state_diff(spec_path: str | os.PathLike[str], *, from_id: int, to_id: int, stage: str | None = None,
               operator: int | None = None, output: str | None = None, sample: int = 10,
               spark: SparkSession | None = None, scratch: str | None = None,
               variable: str | None = None) -> DiffResult:
    """The keys of one stateful operator of ``stage`` added, changed and removed from cut
    ``from_id`` to cut ``to_id`` (both completed): counts and ``sample`` rows of each, or with
    ``output`` the whole diff written by Spark. Raises UserInputError when the operator's key or
    value schema differs between the two (the state was rebuilt in between)."""
    pipeline = open_pipeline(spec_path)
    if stage is not None:
        pipeline.stage(stage)  # an unknown name first: it is wrong whatever the ids
    old_id, new_id = pipeline.completed_cut(from_id), pipeline.completed_cut(to_id)
    chosen = choose_stage(pipeline, stage, new_id)
    session = session_for(pipeline, spark)
    if output is not None:
        write_table_check(output)
    with _opened(pipeline, chosen, old_id, session, scratch) as before, \
            _opened(pipeline, chosen, new_id, session, scratch) as after:
        op = after.operator(operator)
        was = before.operator(op.operator_id)
        if (was.key_columns, was.value_columns) != (op.key_columns, op.value_columns):
            raise UserInputError(
                f"stage {chosen.name} operator {op.operator_id}: its key or value schema differs between "
                f"{words(pipeline).cut_noun} {old_id} ({was.key_schema} -> {was.value_schema}) and {new_id} "
                f"({op.key_schema} -> {op.value_schema}); compare two checkpoints of the same state")
        old_table, new_table = before.table(op.operator_id, variable), after.table(op.operator_id, variable)
        keys, values = list(op.key_columns), list(op.value_columns)
        if op.keyed:  # a value's rows are keyed by the key, a map's by key and map key, a list's by all
            columns = [c for c in new_table.columns if c not in ("partition_id", "operator_id")]
            kind = op.variable(variable).kind
            keys = [c for c in columns if c.startswith("key_") or c.startswith("user_map_key_")
                    or kind in ("ListState", "TimerState")]
            values = [c for c in columns if c not in keys]
        diff = diff_frame(old_table, new_table, keys, values)
        written = write_table(diff, output) if output is not None else None
        counts = {kind: 0 for kind in CHANGES}
        for row in diff.groupBy("change").count().collect():
            counts[str(row["change"])] = int(row["count"])
        from pyspark.sql import functions as F

        samples = {kind: (_rows(diff.where(F.col("change") == kind).drop("change"), sample) if counts[kind] else [])
                   for kind in CHANGES}
    return DiffResult(pipeline.name, chosen.name, old_id, new_id, op.operator_id, counts, samples, written)


# -- stats -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Growth:
    """One completed cut of the stage: its barrier batch and the bytes of the state files a
    restore of it loads (``change``: against the cut before it)."""

    checkpoint_id: int
    batch_id: int
    state_bytes: int
    change: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id, "batch_id": self.batch_id, "state_bytes": self.state_bytes,
                "change": self.change}


@dataclass(frozen=True)
class StatsResult:
    """``state stats``: keys and state-file bytes per partition, the largest keys (by the bytes of
    their key and value encoded as JSON) and the state's growth per cut."""

    pipeline: str
    stage: str
    checkpoint_id: int
    batch_id: int
    operator: OperatorSchema
    partitions: list[dict[str, int]]
    largest: list[dict[str, Any]]
    growth: list[Growth] = field(default_factory=list)
    #: a keyed function's operator (else None): its state variables' rows, ``{name, kind, rows}``
    variables: list[dict[str, Any]] | None = None
    #: a keyed function's operator: keys with a registered timer at or below :attr:`watermark_ms`
    #: (due: the next batch fires them; with a ttl, keys whose state has expired but is not yet
    #: cleared), and the registered timers
    expired: int | None = None
    timers: int | None = None
    #: the event-time watermark the state is at (what a restore resumes with), ms since the epoch
    watermark_ms: int | None = None
    #: the stage's ``transformation.ttl`` in seconds (None: no ttl)
    ttl_seconds: float | None = None

    @property
    def keys(self) -> int:
        return sum(p["keys"] for p in self.partitions)

    @property
    def live(self) -> int | None:
        """A keyed function's keys that have not expired (all keys but :attr:`expired`)."""
        return None if self.expired is None else self.keys - self.expired

    @property
    def bytes(self) -> int:
        return sum(p["bytes"] for p in self.partitions)

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "stage": self.stage, "checkpoint_id": self.checkpoint_id,
                "batch_id": self.batch_id, "operator": self.operator.as_dict(), "keys": self.keys,
                "bytes": self.bytes, "partitions": self.partitions, "largest": self.largest,
                "growth": [g.as_dict() for g in self.growth],
                **({"variables": self.variables, "live_keys": self.live, "expired_keys": self.expired,
                    "timers": self.timers, "watermark_ms": self.watermark_ms, "ttl_seconds": self.ttl_seconds}
                   if self.variables is not None else {})}


def _growth(pipeline: OpenedPipeline, stage: Stage, upto: int) -> list[Growth]:
    out: list[Growth] = []
    for cid in pipeline.cuts.completed_ids():
        if cid > upto:
            break
        try:
            manifest = stage.store.get(cid)
        except (CheckpointNotFoundError, CheckpointCorruptError):
            continue
        size = sum(partition_bytes(manifest).values())
        out.append(Growth(cid, manifest.spark_batch_id, size, size - out[-1].state_bytes if out else None))
    return out


def state_stats(spec_path: str | os.PathLike[str], *, checkpoint_id: int | None = None, stage: str | None = None,
                operator: int | None = None, top: int = 10, spark: SparkSession | None = None,
                scratch: str | None = None) -> StatsResult:
    """Keys (counted by Spark) and state-file bytes (from the manifest) per partition of one
    stateful operator of ``stage`` in cut ``checkpoint_id``, its ``top`` largest keys, and the
    state bytes of every completed cut up to that one."""
    from pyspark.sql import functions as F

    pipeline = open_pipeline(spec_path)
    cid = pipeline.completed_cut(checkpoint_id)
    chosen = choose_stage(pipeline, stage, cid)
    session = session_for(pipeline, spark)
    with _opened(pipeline, chosen, cid, session, scratch) as snapshot:
        op = snapshot.operator(operator)
        if op.keyed:
            return _keyed_stats(pipeline, chosen, cid, snapshot, op, top)
        raw = snapshot.raw(op.operator_id)
        keys = {int(r["partition_id"]): int(r["count"]) for r in raw.groupBy("partition_id").count().collect()}
        sizes = snapshot.partition_bytes()
        partitions = [{"partition": p, "keys": keys.get(p, 0), "bytes": sizes.get((op.operator_id, p), 0)}
                      for p in sorted(set(range(op.partitions)) | set(keys))]
        size = F.octet_length(F.to_json(F.col("key"))) + F.octet_length(F.to_json(F.col("value")))
        largest = _rows(raw.select(F.col("partition_id"), *flat_columns(raw, "key"), *flat_columns(raw, "value"),
                                   size.alias("bytes")).orderBy(F.col("bytes").desc()), top)
        batch = snapshot.batch_id
    return StatsResult(pipeline.name, chosen.name, cid, batch, op, partitions, largest, _growth(pipeline, chosen, cid))


def ttl_seconds(stage: Stage) -> float | None:
    """The stage's ``transformation.ttl`` in seconds, or None (no ttl, or a spec without the field)."""
    from barrierflow.state.compatibility import ttl_of

    return ttl_of(stage.spec)


def keyed_counts(snapshot: StateSnapshot, op: OperatorSchema, ttl: float | None = None
                 ) -> tuple[DataFrame, list[dict[str, Any]], int | None, int | None]:
    """A keyed function's operator: (its distinct keys with ``partition_id``, ``key`` and
    ``bytes`` (its rows' key and value bytes as JSON, over every state variable), lazily; each
    state variable's ``{name, kind, rows}``; its registered timers; its expired keys at the
    state's watermark W (None without a watermark): with ``ttl`` (seconds) and barrierflow's
    ``bf_last_event``, the keys whose last update + ttl is at or below W (what a key's expiry
    is); else the keys with a registered timer at or below W). Expired keys are cleared by the
    next batch. Spark counts; a few numbers reach the driver."""
    from pyspark.sql import functions as F

    frames = []
    variables: list[dict[str, Any]] = []
    timers: int | None = None
    due: int | None = None
    watermark = snapshot.watermark_ms()
    for variable in op.variables:
        raw = snapshot.raw(op.operator_id, variable.name)
        others = [c for c in raw.columns if c not in ("partition_id", "key")]
        size = F.octet_length(F.to_json(F.struct(*[F.col(c) for c in ["key", *others]])))
        frames.append(raw.select("partition_id", "key", size.alias("bytes")))
        rows = raw.count()
        variables.append({"name": variable.name, "kind": variable.kind, "rows": rows})
        if variable.kind == "TimerState":
            timers = rows
            if watermark is not None:
                due = raw.where(F.col("expiration_timestamp_ms") <= F.lit(watermark)).select("key").distinct().count()
    names = {v.name for v in op.variables}
    if ttl is not None and watermark is not None and "bf_last_event" in names:
        last = snapshot.raw(op.operator_id, "bf_last_event")
        due = last.where(F.col("value").getField("last_event_ms") + F.lit(int(ttl * 1000)) <= F.lit(watermark)).count()
    keys = frames[0]
    for frame in frames[1:]:
        keys = keys.unionByName(frame)
    keys = keys.groupBy("partition_id", "key").agg(F.sum("bytes").alias("bytes"))
    if timers is None and watermark is not None:
        due = 0  # no key has a timer registered
    return keys, variables, timers, due


def _keyed_stats(pipeline: OpenedPipeline, stage: Stage, cid: int, snapshot: StateSnapshot, op: OperatorSchema,
                 top: int) -> StatsResult:
    from pyspark.sql import functions as F

    keys, variables, timers, due = keyed_counts(snapshot, op, ttl_seconds(stage))
    counts = {int(r["partition_id"]): int(r["count"]) for r in keys.groupBy("partition_id").count().collect()}
    sizes = snapshot.partition_bytes()
    partitions = [{"partition": p, "keys": counts.get(p, 0), "bytes": sizes.get((op.operator_id, p), 0)}
                  for p in sorted(set(range(op.partitions)) | set(counts))]
    largest = _rows(keys.select(F.col("partition_id"), *flat_columns(keys, "key"), F.col("bytes"))
                    .orderBy(F.col("bytes").desc()), top)
    return StatsResult(pipeline.name, stage.name, cid, snapshot.batch_id, op, partitions, largest,
                       _growth(pipeline, stage, cid), variables, due, timers, snapshot.watermark_ms(),
                       ttl_seconds(stage))
