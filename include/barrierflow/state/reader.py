"""Reading one stage's state as of a completed checkpoint, with Spark's own state readers.

:func:`open_state` materializes the stage's checkpoint (the files its manifest lists, sha256
checked: :func:`~barrierflow.checkpointing.materialize.materialize_checkpoint`) into a fresh
scratch directory, never into the stage's live Spark checkpoint, and reads nothing but the
store; the directory is deleted when the ``with`` block ends. Inside it, a
:class:`StateSnapshot` reads that directory at the checkpoint's barrier batch ``V`` (the state
after batch V, version V+1: exactly what a restore of the checkpoint resumes from):

* :meth:`StateSnapshot.operators`: Spark's ``state-metadata`` data source (operator id and
  name, state store names, partitions), and per operator the key and value schemas of its
  ``statestore`` reader; a checkpoint without operator metadata files (written before Spark
  recorded them) is described from its ``state/<operator>/<partition>`` directories;
* :meth:`StateSnapshot.raw` / :meth:`StateSnapshot.table`: an operator's state as Spark rows
  (``key``/``value`` structs and ``partition_id``), or flattened (:func:`flat_fields`:
  ``partition_id``, ``operator_id``, ``key_<field>``..., ``value_<field>``...), as a lazy Spark
  DataFrame: nothing is collected to the driver until the caller asks;
* :meth:`StateSnapshot.fingerprint` and :meth:`StateSnapshot.recorded_shuffle_partitions`: what
  the state was built with (barrierflow's ``barrierflow-state.json``, the offset log's conf);
* :meth:`StateSnapshot.partition_bytes`: the bytes of the state files a restore loads, per
  operator and partition, from the manifest.

:func:`read_operators` and :func:`read_windows` (what the stored time-window keys say about
their size and slide) read any Spark checkpoint directory, local or on object storage: ``run``
compares state without a recorded fingerprint through them, before its query starts
(:mod:`barrierflow.state.metadata_compat`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.snapshot import STATE_FINGERPRINT
from barrierflow.errors import CheckpointCorruptError
from barrierflow.spark import offset_log
from barrierflow.spark.session import SHUFFLE_PARTITIONS, apply_state_store
from barrierflow.state.errors import AmbiguousStateError, StatelessStageError
from barrierflow.storage.object_dir import CheckpointDir

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType

    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec.models import SparkSpec

__all__ = [
    "KEYED_OPERATORS",
    "TIMERS",
    "TIMER_STATE",
    "OperatorSchema",
    "StateSnapshot",
    "StateVariable",
    "flat_fields",
    "has_state",
    "keyed_variables",
    "open_state",
    "partition_bytes",
    "read_flat_state",
    "read_operators",
    "read_windows",
    "variable_options",
]


def flat_fields(column: str, data_type: DataType) -> list[tuple[tuple[str, ...], str]]:
    """The leaf fields of the struct column ``column`` as ``(path, flat name)`` pairs, in
    schema order: ``key: struct<window: struct<start, end>, key>`` gives
    ``(("key", "window", "start"), "key_window_start")``, ..., ``(("key", "key"), "key_key")``.
    A column that is not a struct is its own single leaf."""
    from pyspark.sql.types import StructType

    if not isinstance(data_type, StructType):
        return [((column,), column)]
    leaves: list[tuple[tuple[str, ...], str]] = []
    for f in data_type.fields:
        for path, name in flat_fields(f.name, f.dataType):
            leaves.append(((column, *path), f"{column}_{name}"))
    return leaves


def struct_fields(simple: str) -> list[tuple[str, str]] | None:
    """The top-level fields of a struct's simple string (``struct<window:struct<start:timestamp,
    end:timestamp>,key:bigint>`` -> ``[("window", "struct<start:timestamp,end:timestamp>"),
    ("key", "bigint")]``), or None for no struct."""
    if not (simple.startswith("struct<") and simple.endswith(">")):
        return None
    body, fields, depth, start = simple[len("struct<"):-1], [], 0, 0
    if not body:
        return []
    for index, char in enumerate(body + ","):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            name, _, kind = body[start:index].partition(":")
            fields.append((name.strip("`"), kind))
            start = index + 1
    return fields


def flat_columns(frame: DataFrame, struct: str) -> list[Column]:
    """The leaves of struct column ``struct`` of ``frame`` as columns named by :func:`flat_fields`."""
    from pyspark.sql import functions as F

    columns = []
    for path, name in flat_fields(struct, frame.schema[struct].dataType):
        leaf = F.col(path[0])
        for part in path[1:]:
            leaf = leaf.getField(part)
        columns.append(leaf.alias(name))
    return columns


def flattened(frame: DataFrame, operator_id: int) -> DataFrame:
    """A ``statestore`` reader's rows as ``partition_id``, ``operator_id``, then the leaves
    (:func:`flat_fields`) of its other columns in the reader's order: ``key``/``value`` of an
    aggregation's or a deduplication's state; ``key`` and ``value``, ``list_element``,
    ``user_map_key``/``user_map_value`` or ``expiration_timestamp_ms`` of one state variable of a
    keyed function (transformWithState). Plain, comparable values in every column."""
    from pyspark.sql import functions as F

    others = [c for c in frame.columns if c != "partition_id"]
    return frame.select(F.col("partition_id"), F.lit(operator_id).alias("operator_id"),
                        *[leaf for c in others for leaf in flat_columns(frame, c)])


def _statestore(spark: SparkSession, directory: CheckpointDir, batch_id: int, operator_id: int,
                options: dict[str, str] | None = None) -> DataFrame:
    reader = spark.read.format("statestore").option("batchId", batch_id).option("operatorId", operator_id)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load(str(directory))


def _operator_ids(directory: Path) -> list[int]:
    state = directory / "state"
    return sorted(int(p.name) for p in state.iterdir() if p.name.isdigit()) if state.is_dir() else []


def read_flat_state(spark: SparkSession, directory: Path, batch_id: int) -> list[tuple[int, DataFrame]]:
    """Every stateful operator of the Spark checkpoint at ``directory`` as ``(operator id,
    flattened rows at batch_id)`` (:func:`flattened`), lazily (what deep verification checks).
    A keyed function's operator (transformWithState) gives one frame per state variable and one
    of its registered timers, each with a ``state_variable`` column naming it (timers:
    :data:`TIMERS`)."""
    from pyspark.sql import functions as F

    # The statestore reader reports to the StateStoreCoordinator, which Spark registers when
    # the session's StreamingQueryManager is created: in a fresh session nothing has created
    # it yet and every read fails with CANNOT_LOAD_STATE_STORE ("Cannot find endpoint").
    _ = spark.streams
    keyed = keyed_variables(_metadata_rows(spark, str(directory)))
    out: list[tuple[int, DataFrame]] = []
    for op in _operator_ids(directory):
        if op not in keyed:
            out.append((op, flattened(_statestore(spark, directory, batch_id, op), op)))
            continue
        for name, kind, _ in keyed[op]:
            frame = flattened(_statestore(spark, directory, batch_id, op, variable_options(name, kind)), op)
            out.append((op, frame.withColumn("state_variable", F.lit(TIMERS if kind == TIMER_STATE else name))))
    return out


def has_state(manifest: Manifest) -> bool:
    """Whether checkpoint ``manifest`` holds state files (its stage's query keeps state)."""
    return any(f.path.startswith("state/") for f in manifest.files)


def partition_bytes(manifest: Manifest) -> dict[tuple[int, int], int]:
    """``(operator id, partition)`` -> bytes of the state files a restore of checkpoint
    ``manifest`` loads for it (a snapshot or zip and the deltas or changelogs after it; the
    operator's own metadata and schema files are not a partition's), from the manifest alone."""
    sizes: dict[tuple[int, int], int] = {}
    for f in manifest.files:
        parts = f.path.split("/")
        if len(parts) >= 4 and parts[0] == "state" and parts[1].isdigit() and parts[2].isdigit():
            key = (int(parts[1]), int(parts[2]))
            sizes[key] = sizes.get(key, 0) + f.size
    return sizes


#: What Spark's operator metadata calls the state variable of a keyed function's timers.
TIMER_STATE = "TimerState"
#: How barrierflow names a keyed function's registered timers among its state variables.
TIMERS = "timers"
#: The operator name Spark's operator metadata gives a keyed function's operator (transformWithState).
KEYED_OPERATORS = ("transformWithStateExec", "transformWithStateInPySparkExec", "transformWithStateInPandasExec")


def keyed_variables(rows: list[dict[str, Any]]) -> dict[int, list[tuple[str, str, bool]]]:
    """operator id -> its state variables ``(name, kind, Spark TTL enabled)`` in Spark's order,
    for every keyed-function operator (transformWithState) among Spark's ``state-metadata``
    ``rows``: its operator properties list them (``ValueState``, ``ListState``, ``MapState``,
    ``TimerState``). Spark's internal variables (names starting ``$``: the secondary timer index,
    Spark's own TTL indexes) are left out but the timers, kept once with kind ``TimerState``."""
    out: dict[int, list[tuple[str, str, bool]]] = {}
    for row in rows:
        text = row.get("operatorProperties")
        if not text:
            continue
        try:
            variables = json.loads(str(text)).get("stateVariables")
        except (ValueError, AttributeError):
            continue
        if not isinstance(variables, list):
            continue
        found: list[tuple[str, str, bool]] = []
        for v in variables:
            name, kind = str(v.get("stateName", "")), str(v.get("stateVariableType", ""))
            if kind == TIMER_STATE:
                if not any(k == TIMER_STATE for _, k, _ in found):
                    found.append((name, kind, False))
            elif name and not name.startswith("$"):
                found.append((name, kind, bool(v.get("ttlEnabled", False))))
        out[int(row["operatorId"])] = found
    return out


def variable_options(name: str, kind: str) -> dict[str, str]:
    """The ``statestore`` reader options that read state variable ``name`` of kind ``kind``
    (the timers: ``readRegisteredTimers``)."""
    return {"readRegisteredTimers": "true"} if kind == TIMER_STATE else {"stateVarName": name}


@dataclass(frozen=True)
class StateVariable:
    """One state variable of a keyed function's operator (transformWithState).

    Attributes:
        name: its name (the timers: :data:`TIMERS`).
        kind: ``ValueState``, ``ListState``, ``MapState`` or ``TimerState``.
        schema: its rows as Spark's ``statestore`` reader gives them, without ``partition_id``
            (``struct<key:...,value:...>``; a list's ``list_element``, a map's ``user_map_key``
            and ``user_map_value``, the timers' ``expiration_timestamp_ms``).
        ttl_enabled: Spark's own (processing-time) TTL is on for it.
        spark_name: Spark's name of it (the timers': ``$eventTimers_keyToTimestamp``).
    """

    name: str
    kind: str
    schema: str
    ttl_enabled: bool = False
    spark_name: str = ""

    @property
    def stored(self) -> str:
        """What it stores per key, without the key: ``struct<n:bigint>`` of a value, the list
        element's or ``map<key struct, value struct>`` of a map, ``bigint`` of the timers."""
        fields = dict(struct_fields(self.schema) or [])
        if self.kind == "MapState":
            return f"map<{fields.get('user_map_key')},{fields.get('user_map_value')}>"
        return str(fields.get("value") or fields.get("list_element") or fields.get("expiration_timestamp_ms"))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "schema": self.schema, "stored": self.stored,
                "ttl_enabled": self.ttl_enabled}


@dataclass(frozen=True)
class OperatorSchema:
    """One stateful operator of a checkpoint's state.

    Attributes:
        operator_id: Spark's id (``state/<operator_id>``).
        name: Spark's name of the operator (``stateStoreSave``, ``dedupe``, ``symmetricHashJoin``, ...).
        stores: its state store names (``default`` for one store).
        partitions: its state partitions (the shuffle partitions it was built with).
        key_schema / value_schema: the key and value structs (Spark's simple strings).
        key_columns / value_columns: their flattened columns (:func:`flat_fields`), name -> type.
        variables: a keyed function's operator (transformWithState): its state variables and
            timers; its key schema is the grouping key, its value schema lists the variables
            (``name: kind stored``), and its state is read one variable at a time.
    """

    operator_id: int
    name: str
    stores: tuple[str, ...]
    partitions: int
    key_schema: str
    value_schema: str
    key_columns: dict[str, str] = field(default_factory=dict)
    value_columns: dict[str, str] = field(default_factory=dict)
    variables: tuple[StateVariable, ...] = ()

    @property
    def keyed(self) -> bool:
        """Whether it is a keyed function's operator (transformWithState: state variables)."""
        return bool(self.variables)

    def variable(self, name: str | None) -> StateVariable:
        """State variable ``name`` (:data:`TIMERS`: the timers), or the only one a keyed
        function has besides its timers.

        Raises:
            AmbiguousStateError: not a keyed function's operator, no such variable, or ``name``
                None and it has several (the message lists them and names ``--variable``).
        """
        listing = ", ".join(f"{v.name} ({v.kind})" for v in self.variables)
        if not self.variables:
            raise AmbiguousStateError(f"{self.describe()} keeps no state variables (it is not a keyed function's "
                                      "operator); leave out --variable")
        if name is None:
            users = [v for v in self.variables if v.kind != TIMER_STATE]
            if len(users) == 1:
                return users[0]
            raise AmbiguousStateError(f"{self.describe()} is a keyed function's operator with the state variables "
                                      f"{listing}; choose one with --variable NAME")
        for v in self.variables:
            if v.name == name:
                return v
        raise AmbiguousStateError(f"{self.describe()} has no state variable {name!r}; its state variables: "
                                  f"{listing}")

    def describe(self) -> str:
        """``operator 0 (stateStoreSave, 4 partitions)``, how messages name it."""
        return f"operator {self.operator_id} ({self.name}, {self.partitions} partitions)"

    def as_dict(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "name": self.name, "stores": list(self.stores),
                "partitions": self.partitions, "key_schema": self.key_schema, "value_schema": self.value_schema,
                "key_columns": self.key_columns, "value_columns": self.value_columns,
                **({"variables": [v.as_dict() for v in self.variables]} if self.variables else {})}


def _leaf_types(frame: DataFrame, struct: str) -> dict[str, str]:
    types: dict[str, str] = {}
    for path, name in flat_fields(struct, frame.schema[struct].dataType):
        data_type = frame.schema[path[0]].dataType
        for part in path[1:]:
            data_type = data_type[part].dataType  # type: ignore[index]
        types[name] = data_type.simpleString()
    return types


def _metadata_rows(spark: SparkSession, location: str) -> list[dict[str, Any]]:
    """Spark's ``state-metadata`` rows of the checkpoint at ``location`` (one per operator and
    store), or [] when it has no operator metadata files."""
    try:
        rows = spark.read.format("state-metadata").load(location).collect()
    except Exception:  # no operator metadata (older checkpoints): described from the directories
        return []
    return [r.asDict() for r in rows]


def _names(directory: CheckpointDir) -> list[str]:
    if isinstance(directory, Path):
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    return directory.listdir()


def read_operators(spark: SparkSession, directory: CheckpointDir, batch_id: int, *, recorded_partitions: str | None,
                   corrupt: Callable[[str, BaseException], Exception]
                   ) -> tuple[list[OperatorSchema], dict[int, dict[str, str]]]:
    """Every stateful operator of the Spark checkpoint ``directory`` (a local directory, or one
    on object storage) at barrier batch ``batch_id``, by id: Spark's ``state-metadata`` (name,
    stores, partitions; ``recorded_partitions``, the offset log's, wins for the partitions), its
    key and value schemas from the ``statestore`` reader; an operator without operator metadata
    is described from its ``state/<operator>/<partition>`` directories (named ``unknown``). Also
    the reader options each operator's state is read with (a join's: one side).

    Raises:
        what ``corrupt(what, exc)`` makes, when Spark cannot read an operator's state schema.
    """
    rows = _metadata_rows(spark, str(directory))
    # Spark's version-1 operator metadata (an aggregation's, a deduplication's) is written once and
    # keeps the partition count the state was first built with, also after an offline repartition;
    # the offset log's shuffle partitions at the barrier batch are what the state has now.
    recorded = recorded_partitions
    found: dict[int, dict[str, Any]] = {}
    for row in rows:
        partitions = int(recorded) if recorded is not None and recorded.isdigit() else int(row["numPartitions"])
        entry = found.setdefault(int(row["operatorId"]), {"name": str(row["operatorName"]), "stores": [],
                                                          "partitions": partitions})
        entry["stores"].append(str(row["stateStoreName"]))
    state = directory / "state"
    for op in sorted(int(n) for n in _names(state) if n.isdigit()):
        if op not in found:
            parts = [state / str(op) / n for n in _names(state / str(op)) if n.isdigit()]
            stores = sorted({q for p in parts for q in _names(p) if (p / q).is_dir() and not q.isdigit()
                             and q not in ("SSTs", "logs", "_metadata")}) or ["default"]
            found[op] = {"name": "unknown", "stores": stores, "partitions": len(parts)}
    keyed = keyed_variables(rows)
    operators, chosen = [], {}
    for op, entry in sorted(found.items()):
        if op in keyed:
            operators.append(_keyed_operator(spark, directory, batch_id, op, entry, keyed[op], corrupt))
            chosen[op] = {}
            continue
        frame, options = None, {}
        for attempt in ({}, {"joinSide": "left"}):
            try:
                frame = _statestore(spark, directory, batch_id, op, attempt)
                frame.schema  # noqa: B018 - resolving the schema reads the operator's schema file
                options = attempt
                break
            except Exception as exc:
                if attempt:
                    raise corrupt(f"state of operator {op}", exc) from None
        assert frame is not None
        chosen[op] = options
        operators.append(OperatorSchema(
            op, entry["name"], tuple(entry["stores"]), entry["partitions"],
            frame.schema["key"].dataType.simpleString(), frame.schema["value"].dataType.simpleString(),
            _leaf_types(frame, "key"), _leaf_types(frame, "value")))
    return operators, chosen


def _keyed_operator(spark: SparkSession, directory: CheckpointDir, batch_id: int, op: int, entry: dict[str, Any],
                    variables: list[tuple[str, str, bool]],
                    corrupt: Callable[[str, BaseException], Exception]) -> OperatorSchema:
    """A keyed function's operator: every state variable's schema from its ``statestore`` reader."""
    found: list[StateVariable] = []
    key_schema = ""
    for name, kind, ttl in variables:
        try:
            frame = _statestore(spark, directory, batch_id, op, variable_options(name, kind))
            schema = frame.schema
        except Exception as exc:
            raise corrupt(f"state variable {name} of operator {op}", exc) from None
        key_schema = key_schema or schema["key"].dataType.simpleString()
        row = ",".join(f"{f.name}:{f.dataType.simpleString()}" for f in schema.fields if f.name != "partition_id")
        found.append(StateVariable(TIMERS if kind == TIMER_STATE else name, kind, f"struct<{row}>", ttl, name))
    value_schema = "; ".join(f"{v.name}: {v.kind} {v.stored}" for v in found)
    key_columns = {name: kind for name, kind in _keyed_key_columns(spark, directory, batch_id, op, variables)}
    return OperatorSchema(op, entry["name"], tuple(entry["stores"]), entry["partitions"], key_schema, value_schema,
                          key_columns, {}, tuple(found))


def _keyed_key_columns(spark: SparkSession, directory: CheckpointDir, batch_id: int, op: int,
                       variables: list[tuple[str, str, bool]]) -> list[tuple[str, str]]:
    if not variables:
        return []
    name, kind, _ = variables[0]
    return list(_leaf_types(_statestore(spark, directory, batch_id, op, variable_options(name, kind)), "key").items())


def read_windows(spark: SparkSession, directory: CheckpointDir, batch_id: int, operator_id: int, field: str, *,
                 size_us: int, slide_us: int, offset_us: int = 0, options: dict[str, str] | None = None
                 ) -> tuple[int, list[int], int, int]:
    """What operator ``operator_id``'s stored keys at ``batch_id`` say about their time-window
    key column ``field`` (a struct of ``start`` and ``end``): (keys, the distinct window sizes
    ``end - start`` in microseconds (at most 5), keys starting off a ``slide_us`` grid from
    ``offset_us``, keys starting off a ``size_us`` grid from it). One Spark aggregation; one row
    reaches the driver."""
    from pyspark.sql import functions as F

    frame = _statestore(spark, directory, batch_id, operator_id, options)
    start = F.unix_micros(F.col("key").getField(field).getField("start"))
    end = F.unix_micros(F.col("key").getField(field).getField("end"))
    row = frame.select(start.alias("s"), (end - start).alias("d")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.slice(F.sort_array(F.collect_set("d")), 1, 5).alias("durations"),
        F.sum(F.when(F.pmod(F.col("s") - F.lit(offset_us), F.lit(slide_us)) != 0, 1).otherwise(0)).alias("slide"),
        F.sum(F.when(F.pmod(F.col("s") - F.lit(offset_us), F.lit(size_us)) != 0, 1).otherwise(0)).alias("size"),
    ).first()
    assert row is not None
    return int(row["rows"]), [int(d) for d in row["durations"] or []], int(row["slide"] or 0), int(row["size"] or 0)


@dataclass
class StateSnapshot:
    """One stage's state as of one completed checkpoint, materialized in ``directory`` (module
    docstring). Valid inside its :func:`open_state` block only: the DataFrames it gives read
    that directory."""

    spark: SparkSession
    pipeline: str
    stage: str
    manifest: Manifest
    directory: Path
    _operators: list[OperatorSchema] | None = None
    _options: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id

    @property
    def batch_id(self) -> int:
        """The barrier batch V whose state (version V+1) is read."""
        return self.manifest.spark_batch_id

    def _corrupt(self, what: str, exc: BaseException) -> CheckpointCorruptError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return CheckpointCorruptError(
            f"checkpoint {self.checkpoint_id} of stage {self.stage} (pipeline {self.pipeline}): Spark cannot read "
            f"its {what} at batch {self.batch_id}: {first[:600]}; check it with 'barrierflow verify --deep' and "
            "read an older checkpoint (--checkpoint)")

    def operators(self) -> list[OperatorSchema]:
        """Every stateful operator, by id (module docstring). Raises CheckpointCorruptError
        when Spark cannot read an operator's state schema."""
        if self._operators is not None:
            return self._operators
        self._operators, self._options = read_operators(
            self.spark, self.directory, self.batch_id, recorded_partitions=self.recorded_shuffle_partitions(),
            corrupt=self._corrupt)
        return self._operators

    def windows(self, operator: OperatorSchema, field: str, *, size_us: int, slide_us: int,
                offset_us: int = 0) -> tuple[int, list[int], int, int]:
        """:func:`read_windows` of ``operator``'s stored keys."""
        self.operators()
        return read_windows(self.spark, self.directory, self.batch_id, operator.operator_id, field, size_us=size_us,
                            slide_us=slide_us, offset_us=offset_us, options=self._options.get(operator.operator_id))

    def operator(self, operator_id: int | None = None) -> OperatorSchema:
        """Operator ``operator_id``, or the only one there is.

        Raises:
            AmbiguousStateError: ``operator_id`` None and there are several; or it is not one of them
                (the message lists them and names ``--operator``).
        """
        operators = self.operators()
        listing = ", ".join(o.describe() for o in operators)
        if operator_id is None:
            if len(operators) == 1:
                return operators[0]
            raise AmbiguousStateError(
                f"stage {self.stage} of pipeline {self.pipeline} has {len(operators)} stateful operators in checkpoint "
                f"{self.checkpoint_id}: {listing}; choose one with --operator ID")
        for op in operators:
            if op.operator_id == operator_id:
                return op
        raise AmbiguousStateError(f"stage {self.stage} of pipeline {self.pipeline} has no stateful operator "
                                  f"{operator_id} in checkpoint {self.checkpoint_id}; its operators: {listing}")

    def raw(self, operator_id: int, variable: str | None = None) -> DataFrame:
        """The operator's state as Spark's ``statestore`` reader gives it (``key``, ``value``,
        ``partition_id``), lazily; of a keyed function's operator, state variable ``variable``
        (:meth:`OperatorSchema.variable`: None for the only one; :data:`TIMERS` for its timers).

        Raises:
            AmbiguousStateError: ``variable`` given for an operator without state variables, not
                one of them, or None and the keyed function has several.
        """
        op = self.operator(operator_id)
        if not op.keyed:
            if variable is not None:
                op.variable(variable)  # raises: no state variables
            return _statestore(self.spark, self.directory, self.batch_id, operator_id, self._options.get(operator_id))
        chosen = op.variable(variable)
        return _statestore(self.spark, self.directory, self.batch_id, operator_id,
                           variable_options(chosen.spark_name, chosen.kind))

    def table(self, operator_id: int, variable: str | None = None) -> DataFrame:
        """The operator's state flattened (:func:`flattened`), lazily (``variable`` as for :meth:`raw`)."""
        return flattened(self.raw(operator_id, variable), operator_id)

    def watermark_ms(self) -> int | None:
        """The event-time watermark the state is at: the watermark a restore of this checkpoint
        resumes with (Spark's commit log of the barrier batch, ``nextBatchWatermarkMs``; else the
        batch's own, from its offset log), or None when neither records one."""
        from barrierflow.spark import commit_log

        try:
            committed = json.loads(commit_log.path_of(self.directory, self.batch_id).read_text().splitlines()[1])
            if committed.get("nextBatchWatermarkMs") is not None:
                return int(committed["nextBatchWatermarkMs"])
        except (OSError, ValueError, IndexError, AttributeError):
            pass
        try:
            value = offset_log.read_offset_metadata(self.directory, self.batch_id).get("batchWatermarkMs")
        except (OSError, ValueError, IndexError):
            return None
        return None if value is None else int(value)

    def batch_watermark_ms(self) -> int | None:
        """The watermark the barrier batch ran with (its offset log's ``batchWatermarkMs``): a
        keyed function's timers at or below it have fired in that batch or before."""
        try:
            value = offset_log.read_offset_metadata(self.directory, self.batch_id).get("batchWatermarkMs")
        except (OSError, ValueError, IndexError):
            return None
        return None if value is None else int(value)

    def fingerprint(self) -> list[dict[str, Any]] | None:
        """The stateful-operator fingerprint recorded with the state (``barrierflow-state.json``),
        or None when the checkpoint has none (state written before barrierflow recorded it)."""
        try:
            document = json.loads((self.directory / STATE_FINGERPRINT).read_text())
            operators = document["stateful_operators"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return operators if isinstance(operators, list) else None

    def recorded_shuffle_partitions(self) -> str | None:
        """``spark.sql.shuffle.partitions`` as the offset log of the barrier batch records it
        (what Spark keeps when the query restarts), or None."""
        try:
            conf = offset_log.read_offset_metadata(self.directory, self.batch_id).get("conf", {})
        except (OSError, ValueError, IndexError):
            return None
        value = conf.get(SHUFFLE_PARTITIONS)
        return None if value is None else str(value)

    def partition_bytes(self) -> dict[tuple[int, int], int]:
        """:func:`partition_bytes` of this checkpoint."""
        return partition_bytes(self.manifest)


@contextmanager
def open_state(spark: SparkSession, *, pipeline: str, stage: str, store: CheckpointStore, manifest: Manifest,
               spark_spec: SparkSpec, scratch: str | None = None, require_state: bool = True,
               stateful_stages: list[str] | None = None) -> Iterator[StateSnapshot]:
    """Materialize checkpoint ``manifest`` of ``stage`` into a scratch directory (under
    ``scratch``, default the system's temporary directory) and yield its :class:`StateSnapshot`;
    the directory is deleted afterwards. The store is only read.

    Args:
        spark_spec: the stage's ``spark`` block (its state store provider is set on ``spark``
            so that the reader loads the provider's files).
        require_state: raise :class:`StatelessStageError` for a checkpoint without state
            (``stateful_stages``: the pipeline's stages with state, named in its message).

    Raises:
        StatelessStageError: the checkpoint holds no state and ``require_state``.
        CheckpointCorruptError: a file is missing from the store or altered (named).
        StorageError: the store cannot be read.
    """
    if require_state and not has_state(manifest):
        raise StatelessStageError(pipeline=pipeline, stage=stage, checkpoint_id=manifest.checkpoint_id,
                                  stateful=list(stateful_stages or []))
    tmp = Path(tempfile.mkdtemp(prefix=f"state-{stage}-{manifest.checkpoint_id}-", dir=scratch))
    try:
        done = materialize_checkpoint(store, manifest, tmp / "spark-checkpoint")
        apply_state_store(spark, spark_spec)
        _ = spark.streams  # registers the StateStoreCoordinator the statestore reader reports to
        yield StateSnapshot(spark, pipeline, stage, manifest, done.directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
