"""Value columns added to or dropped from an aggregation's state, rewritten offline.

Spark has no schema evolution for the state of its built-in aggregations: a restart over state
whose value (the aggregation buffer) has another layout is refused. :func:`plan_value_change`
maps the stored buffer onto the one the new spec's aggregation keeps, and
:func:`rewrite_value_columns` rewrites a scratch copy of a savepoint into that layout:

* The layout: with Spark's aggregation state format 2 the stored value is the concatenation of
  the buffers of the aggregation's aggregate functions, in their order (``count(1)``: ``count:
  bigint`` not null; ``sum(value)``: ``sum: bigint``; ``max(value)``: ``max: bigint``), not its
  output columns. Both layouts come from the planned queries of the old and the new spec
  (:func:`~barrierflow.runtime.state_compat.aggregate_buffers`), matched by output column
  (alias); the old one must equal what the state reader finds stored, or nothing is rewritten.
* A column kept keeps its buffer fields; a column dropped loses them; a column added gets its
  buffer field set to the default declared in the new spec (``transformation.state_defaults``),
  cast to the field's type: a stored key then aggregates on from that value (``max(value)`` with
  default 0 is the largest of 0 and the values after the upgrade; ``null`` is "no value yet").
  An added column without a declared default is refused, naming it and the field to declare.
* The rewrite: the savepoint is materialized into a scratch directory (sha256 checked), batch
  V+1 is added to the copy's offset log with V's offsets, and Spark's ``StateRewriter`` (the
  class behind the offline repartition) reads every state partition at V and writes it as
  version V+2 on the executors, each value converted by barrierflow's JVM helper
  (:mod:`barrierflow.jvm.helper`: an ``UnsafeProjection`` from the old buffer to the new one,
  keys untouched); then batch V+1 is committed, the operator's schema file
  (``state/<op>/<partition>/_metadata/schema``) records the new value schema, and the
  stateful-operator fingerprint the new spec's. Batch V+1 reads no input and writes no output.

RocksDB state only (Spark's rewriter reads raw column families of RocksDB stores), one stateful
operator per stage (the rewriter converts every operator of the checkpoint).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.atomic_files import write_atomic
from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.snapshot import record_stateful_operators, select_files
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.spark import commit_log
from barrierflow.spark.session import apply_state_store
from barrierflow.state.rescale import RescaledCheckpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec.models import SparkSpec

__all__ = ["ValueChange", "ValueColumnsFailedError", "ValueColumnsNotSupportedError", "plan_value_change",
           "read_schema_file", "rewrite_value_columns", "write_schema_file"]

#: Where a spec declares the defaults of added value columns.
DEFAULTS_FIELD = "transformation.state_defaults"
_ALIAS = re.compile(r" AS ([^:]+):")
#: Aggregate buffers: one aggregate expression's (fingerprint text, buffer fields).
Buffers = list[tuple[str, list[dict[str, Any]]]]


class ValueColumnsNotSupportedError(UserInputError):
    """The value-column change cannot be rewritten (the message names the column and the fix)."""


class ValueColumnsFailedError(BarrierflowError):
    """Spark's state rewrite failed on the scratch copy (nothing in the store changed)."""


@dataclass(frozen=True)
class ValueChange:
    """How one aggregation's stored values become the new spec's.

    Attributes:
        operator_id: the stateful operator (``state/<operator_id>``).
        old_schema / new_schema: the stored and the new value struct (Spark's JSON form).
        plan: per new buffer field, ``old:<index>`` (a stored field), ``default:<text>`` or ``null``.
        added: alias -> declared default of each added column.
        dropped: the aliases of the dropped columns.
    """

    operator_id: int
    old_schema: dict[str, Any]
    new_schema: dict[str, Any]
    plan: list[str]
    added: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"added {a} (default {_shown(d)})" for a, d in self.added.items()]
        parts += [f"dropped {d}" for d in self.dropped]
        return ", ".join(parts)


def _alias(text: str) -> str:
    match = _ALIAS.search(text)
    return match.group(1).strip() if match else text


def _shown(value: Any) -> str:
    return "null" if value is None else json.dumps(value) if isinstance(value, str) else str(value).lower() \
        if isinstance(value, bool) else str(value)


def _simple(data_type: Any) -> str:
    return data_type if isinstance(data_type, str) else json.dumps(data_type)


def _default_text(alias: str, value: Any, buffer: dict[str, Any], where: str) -> str:
    """The helper's ``default:<text>`` (or ``null``) line for ``value``, checked against the buffer
    field's type (UserInputError naming the column otherwise)."""
    kind = _simple(buffer["type"])
    shown = str(buffer.get("simple", kind))
    if value is None:
        if not buffer["nullable"]:
            raise ValueColumnsNotSupportedError(
                f"{where}: value column {alias} is added with the default null, but its state ({buffer['name']}: "
                f"{shown}) cannot be null; declare a value in {DEFAULTS_FIELD} ({alias}: VALUE)")
        return "null"
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        if kind in ("long", "integer", "short", "byte"):
            if isinstance(value, bool) or int(text) != Decimal(text):
                raise ValueError(text)
        elif kind in ("double", "float"):
            float(text)
        elif kind == "boolean":
            if text not in ("true", "false"):
                raise ValueError(text)
        elif kind.startswith("decimal"):
            Decimal(text)
        elif kind != "string":
            raise ValueColumnsNotSupportedError(
                f"{where}: value column {alias} is added, and its state ({buffer['name']}: {shown}) takes no declared "
                "default (numbers, booleans and strings only); keep the aggregation's value columns")
    except (ValueError, InvalidOperation):
        raise ValueColumnsNotSupportedError(
            f"{where}: the default {_shown(value)} declared for value column {alias} ({DEFAULTS_FIELD}) is not a "
            f"{shown}, the type of its state ({buffer['name']}); declare a {shown}") from None
    if "\n" in text:
        raise ValueColumnsNotSupportedError(f"{where}: the default of value column {alias} holds a line break")
    return f"default:{text}"


def plan_value_change(operator_id: int, stored: str, old: Buffers, new: Buffers,
                      defaults: dict[str, Any], *, where: str) -> ValueChange:
    """The :class:`ValueChange` from the stored value struct ``stored`` (its simple string, as
    the state reader gives it; its layout ``old``, the old spec's planned buffers) to the new
    spec's buffers ``new``, with ``defaults`` (alias -> value) for added columns. ``where``
    names the stage and operator in messages.

    Raises:
        ValueColumnsNotSupportedError: the old spec's buffers are not what is stored; an added
            column has no declared default, one that does not fit its type, or a buffer of
            several fields (``avg``: a sum and a count).
    """
    planned = "struct<" + ",".join(f"{f['name']}:{f['simple']}" for _, fields in old for f in fields) + ">"
    if stored != planned:
        raise ValueColumnsNotSupportedError(
            f"{where}: the stored value ({stored}) is not the aggregation buffer the old spec plans ({planned}); "
            "its value columns cannot be mapped, so they are not rewritten. Keep the aggregation's value columns")
    start: dict[str, tuple[str, int, int]] = {}
    offset = 0
    for text, fields in old:
        start[_alias(text)] = (text, offset, len(fields))
        offset += len(fields)
    plan: list[str] = []
    new_fields: list[dict[str, Any]] = []
    added: dict[str, Any] = {}
    for text, fields in new:
        alias = _alias(text)
        kept = start.get(alias)
        if kept is not None and kept[0] == text:
            plan += [f"old:{kept[1] + i}" for i in range(kept[2])]
        elif fields:
            if alias not in defaults:
                raise ValueColumnsNotSupportedError(
                    f"{where}: value column {text} is added, and no default is declared for it: every stored key "
                    f"needs the value its state starts from. Declare it in the new spec's {DEFAULTS_FIELD} "
                    f"(e.g. '{DEFAULTS_FIELD.split('.')[1]}: {{{alias}: 0}}', or null for no value yet)")
            if len(fields) != 1:
                raise ValueColumnsNotSupportedError(
                    f"{where}: value column {text} is added, and its state is {len(fields)} fields "
                    f"({', '.join(f['name'] for f in fields)}), which one declared default cannot set; add a column "
                    "whose aggregate keeps one value (count, sum, min, max, first, last)")
            plan.append(_default_text(alias, defaults[alias], fields[0], where))
            added[alias] = defaults[alias]
        new_fields += [{"name": f["name"], "type": f["type"], "nullable": f["nullable"], "metadata": {}}
                       for f in fields]
    new_aliases = {_alias(text) for text, _ in new}
    dropped = [alias for alias in start if alias not in new_aliases]
    old_schema = {"type": "struct", "fields": [{"name": f["name"], "type": f["type"], "nullable": f["nullable"],
                                                "metadata": {}} for _, fields in old for f in fields]}
    return ValueChange(operator_id, old_schema, {"type": "struct", "fields": new_fields}, plan, added, dropped)


def _read_utf(data: bytes, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">H", data, at)
    return data[at + 2:at + 2 + length].decode("utf-8"), at + 2 + length


def _utf(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def read_schema_file(path: Path) -> tuple[str, str]:
    """The key and value schema JSON of Spark's version-2 state schema file at ``path``
    (``writeUTF("v2")``, then per schema a chunk count and its ``writeUTF`` chunks)."""
    data = path.read_bytes()
    version, at = _read_utf(data, 0)
    if version != "v2":
        raise ValueColumnsNotSupportedError(f"the state schema file {path} has format {version!r}, not v2")
    schemas = []
    for _ in range(2):
        (chunks,) = struct.unpack_from(">i", data, at)
        at += 4
        parts = []
        for _ in range(chunks):
            part, at = _read_utf(data, at)
            parts.append(part)
        schemas.append("".join(parts))
    return schemas[0], schemas[1]


def write_schema_file(path: Path, key_schema: str, value_schema: str) -> None:
    """Write Spark's version-2 state schema file (:func:`read_schema_file`) at ``path``."""
    out = _utf("v2")
    for text in (key_schema, value_schema):
        chunks = [text[i:i + 16384] for i in range(0, len(text), 16384)] or [""]
        out += struct.pack(">i", len(chunks)) + b"".join(_utf(c) for c in chunks)
    write_atomic(path, out)
    for crc in path.parent.glob(f".{path.name}*.crc"):
        crc.unlink()


@contextmanager
def rewrite_value_columns(spark: SparkSession, *, pipeline: str, stage: str, store: CheckpointStore,
                          manifest: Manifest, spark_spec: SparkSpec, change: ValueChange,
                          fingerprint: list[dict[str, Any]], scratch: str | None = None
                          ) -> Iterator[RescaledCheckpoint]:
    """Materialize checkpoint ``manifest`` of ``stage`` into a scratch directory, rewrite its
    aggregation's values by ``change`` (module docstring), record ``fingerprint`` (the new spec's)
    with the state and yield the rewritten copy; the directory is deleted when the block ends.

    Raises:
        ValueColumnsNotSupportedError: not RocksDB state, or not one stateful operator (nothing read).
        CheckpointCorruptError: a file of the checkpoint is missing or altered in the store.
        ValueColumnsFailedError: Spark's rewrite failed (its first message line is quoted).
    """
    from barrierflow.jvm.helper import value_columns_helper

    where = f"stage {stage} of pipeline {pipeline}"
    if spark_spec.state_store != "rocksdb":
        raise ValueColumnsNotSupportedError(
            f"{where} keeps its state with the {spark_spec.state_store} state store, whose values Spark's state "
            "rewriter does not rewrite (RocksDB column families only); keep the aggregation's value columns. Nothing "
            "was changed.")
    tmp = Path(tempfile.mkdtemp(prefix=f"valcols-{stage}-{manifest.checkpoint_id}-", dir=scratch))
    try:
        started = time.perf_counter()
        done = materialize_checkpoint(store, manifest, tmp / "spark-checkpoint")
        materialized = time.perf_counter() - started
        root = done.directory
        operators = sorted(int(p.name) for p in (root / "state").iterdir() if p.name.isdigit())
        if operators != [change.operator_id]:
            raise ValueColumnsNotSupportedError(
                f"{where} has the stateful operators {operators}: a value-column rewrite converts every operator's "
                "state, so it is made for a stage with one stateful operator only; keep the aggregation's value "
                "columns. Nothing was changed.")
        batch = manifest.spark_batch_id
        (root / "offsets" / str(batch + 1)).write_bytes((root / "offsets" / str(batch)).read_bytes())
        apply_state_store(spark, spark_spec)
        _ = spark.streams  # registers the StateStoreCoordinator the statestore reader reports to
        helper = value_columns_helper(spark)
        started = time.perf_counter()
        try:
            helper.rewrite(str(root), str(batch), str(batch + 1), json.dumps(change.old_schema),
                                                json.dumps(change.new_schema), "\n".join(change.plan))
        except Exception as exc:
            text = str(exc).strip()
            first = next((line for line in text.splitlines() if "Exception" in line or "Error" in line),
                         text.splitlines()[0] if text else type(exc).__name__)
            raise ValueColumnsFailedError(
                f"Spark's state rewrite of checkpoint {manifest.checkpoint_id} of {where} ({change.describe()}) "
                f"failed on a scratch copy: {first[:600]}; nothing in the checkpoint store changed") from None
        seconds = time.perf_counter() - started
        (root / "commits" / str(batch + 1)).write_bytes((root / "commits" / str(batch)).read_bytes())
        operator_dir = root / "state" / str(change.operator_id)
        schema_files = sorted(operator_dir.glob("*/_metadata/schema"))
        if not schema_files:
            raise ValueColumnsFailedError(f"checkpoint {manifest.checkpoint_id} of {where} has no state schema file "
                                          f"under {operator_dir.relative_to(root)}; nothing in the store changed")
        for path in schema_files:
            key_schema, _ = read_schema_file(path)
            write_schema_file(path, key_schema, json.dumps(change.new_schema, separators=(",", ":")))
        record_stateful_operators(root, fingerprint)
        if commit_log.latest_committed(root) != batch + 1:
            raise ValueColumnsFailedError(f"the rewrite of checkpoint {manifest.checkpoint_id} of {where} did not "
                                          f"commit batch {batch + 1}; nothing in the store changed")
        partitions = len([p for p in operator_dir.iterdir() if p.name.isdigit()])
        files, bases = select_files(root, batch + 1, batch + 1)
        yield RescaledCheckpoint(root, batch + 1, partitions, files, bases, seconds, materialized)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
