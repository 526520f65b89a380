"""The state variables a planned keyed function (Spark's ``transformWithState``) would declare,
read from the planned query without running it.

Spark itself learns a keyed function's state variables only when the query starts: the driver
runs the processor's ``init`` with a handle that records every ``getValueState``,
``getListState`` and ``getMapState`` call (its state schema "pre-init"), and checks them
against the state's schema files. :func:`planned_keyed_variables` does the same for a query
that is only planned: it takes the processor out of each ``TransformWithState*`` node of the
analyzed plan (the pickled UDF Spark would ship to the workers), and calls its ``init`` with a
:class:`RecordingHandle`, which records the variables (name, kind, what it stores as a Spark
simple string) and does nothing else. Nothing is read, started or written.

A processor whose ``init`` needs more than the handle offers, or a plan Spark pickles
differently, gives None for that operator: its variables are unknown, never assumed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["RecordingHandle", "planned_keyed_variables"]

log = logging.getLogger(__name__)

#: The logical plan nodes of a keyed function.
KEYED_NODES = ("TransformWithState", "TransformWithStateInPySpark", "TransformWithStateInPandas")


class _Unused:
    """What a recorded state variable is during the pre-init: nothing may use it."""


def _simple(schema: Any) -> str:
    """A state schema (a StructType or a DDL string) as Spark's simple string."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    parsed = schema if isinstance(schema, StructType) else _parse_datatype_string(str(schema))
    return str(parsed.simpleString())


class RecordingHandle:
    """A stand-in for Spark's ``StatefulProcessorHandle`` during ``init``: records the state
    variables declared (:attr:`variables`: ``(name, kind, stored)``, ``stored`` a value's or a
    list element's struct, a map's ``map<key struct,value struct>``) and their Spark TTL
    (:attr:`spark_ttl`: name -> ms)."""

    def __init__(self) -> None:
        self.variables: list[tuple[str, str, str]] = []
        self.spark_ttl: dict[str, int] = {}

    def _record(self, name: str, kind: str, stored: str, ttl: Any) -> _Unused:
        self.variables.append((str(name), kind, stored))
        if ttl is not None:
            self.spark_ttl[str(name)] = int(ttl)
        return _Unused()

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> _Unused:
        return self._record(stateName, "ValueState", _simple(schema), ttlDurationMs)

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> _Unused:
        return self._record(stateName, "ListState", _simple(schema), ttlDurationMs)

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,
                    ttlDurationMs: Any = None) -> _Unused:
        return self._record(stateName, "MapState", f"map<{_simple(userKeySchema)},{_simple(valueSchema)}>",
                            ttlDurationMs)

    def getQueryInfo(self) -> Any:
        return None

    def registerTimer(self, expiryTimestampMs: int) -> None:
        return None

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        return None

    def listTimers(self) -> list[int]:
        return []

    def deleteIfExists(self, stateName: str) -> None:
        return None


def _seq(scala_seq: Any) -> list[Any]:
    out = []
    iterator = scala_seq.iterator()
    while iterator.hasNext():
        out.append(iterator.next())
    return out


def _processor(node: Any, jvm: Any) -> Any:
    """The StatefulProcessor inside a ``TransformWithState*`` node's UDF."""
    from pyspark.serializers import CloudPickleSerializer

    command = node.functionExpr().func().command()
    data = bytes(command.toArray(jvm.scala.reflect.ClassTag.Byte()))
    function = CloudPickleSerializer().loads(data)[0]
    return function.__self__._stateful_processor


def planned_keyed_variables(frame: DataFrame) -> list[list[tuple[str, str, str]] | None]:
    """Per keyed-function node of ``frame``'s analyzed plan (inputs first), the state variables
    its processor declares (:class:`RecordingHandle`), or None where they cannot be read
    (module docstring). Only plans, never runs, the query."""
    found: list[list[tuple[str, str, str]] | None] = []
    jvm = frame.sparkSession._jvm

    def walk(node: Any) -> None:
        for child in _seq(node.children()):
            walk(child)
        if str(node.nodeName()) not in KEYED_NODES:
            return
        try:
            handle = RecordingHandle()
            _processor(node, jvm).init(handle)
            found.append(handle.variables)
        except Exception as exc:  # the user's init, or how Spark pickles it: unknown, said why
            log.warning("the state variables of a keyed function cannot be read from its plan: %s: %s",
                        type(exc).__name__, exc)
            found.append(None)

    walk(frame._jdf.queryExecution().analyzed())
    return found
