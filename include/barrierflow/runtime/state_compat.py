"""Changes the saved state cannot honour are refused before a stage's query starts.

Spark restarts a streaming query over its checkpoint with what that checkpoint was built
with, whatever the spec now says: the offset log's ``conf`` wins for
``spark.sql.shuffle.partitions`` (the state is partitioned that way), and the state store
holds keys of the stateful operators as they were (a 10-second window's keys stay 10-second
windows when the transformation now asks for 20). Run silently, such a change is ignored or
mixes incompatible state. :func:`check_state_compatible` compares, per stage, what the state
was built with against what the spec now builds and raises
:class:`~barrierflow.errors.IncompatibleStateError` (exit code 2) for a difference.

When: on the stage's streaming DataFrame, built but not started (planning a query is analysis
only), after the restore at start materialized the Spark checkpoint, in every pipeline shape
through :class:`~barrierflow.runtime.stage_runner.StageRunner`: the one run loop checks every
stage of a driver before it starts any (:meth:`StageRunner.check_state`), a stage process
(``run --processes``) checks its stage before its query starts, and its refusal (exit 2) fails
the run before the pipeline coordinator cuts. Checking before ``start()`` rather than right
after it is what guarantees that a refusal changes nothing: a started query may run a batch
(re-run one planned before a crash) at once, while nothing here plans a batch or writes an
offset log entry, a state version or sink output.

What is compared:

* shuffle partitions: the ``conf`` of the newest ``offsets/<n>`` entry (any planned batch:
  Spark re-plans an uncommitted one with the conf it was planned with) against what the
  spec's ``spark`` block now gives (:func:`~barrierflow.spark.session.shuffle_partitions`:
  what the session has when a stage's query starts,
  :func:`~barrierflow.spark.session.apply_query_conf`);
* the state store: the provider class in that ``conf`` against ``spark.state_store`` (Spark
  keeps the checkpoint's provider whatever the session says);
* the streaming sources: what Spark names each source of the query
  (:func:`streaming_sources`, in plan order, a file source's path left out), against the
  ones recorded with the fingerprint (or, for a fingerprint recorded before sources were,
  their number against the newest offset log entry's source lines). Spark restarts a query
  only over the sources its checkpoint was planned with, and refuses anything else with an
  internal assertion; switching a Kafka source's ``reader`` (barrierflow's reader is one
  source, Spark's connector two: the connector and a barrier-only source) is such a change;
* the stateful operators: a fingerprint (:func:`stateful_fingerprint`) of the DataFrame's
  analyzed plan: in plan order, each stateful operator's kind and what defines its state
  (an aggregation's grouping keys, with a key computed right below it such as a time window
  expanded to its expression, and its aggregate expressions; a watermark's column and delay;
  deduplication keys; a stream-stream join's type and condition; any other stateful
  operator's description), expression ids, UUIDs and object addresses removed. How the
  operators' inputs are computed further upstream is not part of it.

Where the fingerprint lives: :data:`FINGERPRINT_FILE` in the root of the stage's Spark
checkpoint, written when the stage starts on empty state (no committed batch). Every
barrierflow checkpoint carries it like Spark's ``metadata`` file
(:func:`~barrierflow.checkpointing.snapshot.select_files`), so a restore of an older
checkpoint or a savepoint compares against the fingerprint of the state it restored.

State without a readable fingerprint (a Spark checkpoint with committed batches written before
barrierflow recorded one) is compared by what Spark records with it instead
(:func:`~barrierflow.state.metadata_compat.compare_by_metadata`: its operator metadata, the key
and value schemas of its state, the sizes of its stored windows, against
:func:`planned_state_operators` of the query): a difference is refused like a fingerprint's
(:class:`~barrierflow.errors.IncompatibleStateError`, naming it); agreement records the current
fingerprint, so the next start compares by fingerprint; what that comparison cannot decide is
``unknown`` and refused too (:class:`~barrierflow.errors.UnverifiedStateError`, naming
``barrierflow upgrade SPEC --to SPEC --assume-compatible``, which records the fingerprint on the
user's word): unknown is never accepted as compatible.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import TYPE_CHECKING, Any

from barrierflow.atomic_files import write_atomic
from barrierflow.checkpointing.snapshot import STATE_FINGERPRINT
from barrierflow.errors import IncompatibleStateError, UnverifiedStateError
from barrierflow.spark import commit_log, offset_log
from barrierflow.spark.session import PROVIDER_CLASS, PROVIDERS, SHUFFLE_PARTITIONS
from barrierflow.state.compatibility import Verdict
from barrierflow.state.metadata_compat import PlannedOperatorState, PlannedWindow
from barrierflow.storage.object_dir import CheckpointDir, ObjectDir, as_checkpoint_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from barrierflow.spec.models import StageSpec
    from barrierflow.state.reader import OperatorSchema

__all__ = ["FINGERPRINT_FILE", "aggregate_buffers", "check_state_compatible", "planned_buffers",
           "planned_fingerprint", "planned_keyed_states", "planned_state_operators", "planned_states",
           "stateful_fingerprint",
           "streaming_sources"]

log = logging.getLogger(__name__)

#: The stateful-operator fingerprint's file in the root of a stage's Spark checkpoint.
FINGERPRINT_FILE = STATE_FINGERPRINT
#: Logical plan nodes that keep state in a streaming query (besides ``Aggregate``,
#: ``EventTimeWatermark``, ``Deduplicate`` and stream-stream ``Join``, described field by field).
OTHER_STATEFUL = frozenset({
    "DeduplicateWithinWatermark", "FlatMapGroupsWithState", "FlatMapGroupsInPandasWithState",
    "TransformWithState", "TransformWithStateInPySpark", "TransformWithStateInPandas", "GlobalLimit",
    "Window", "SessionWindowStateStoreRestore",
})

_ID = re.compile(r"#\d+L?")  # an expression id and the type suffix of a long attribute
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ADDRESS = re.compile(r"@[0-9a-f]{4,}")
_ATTRIBUTE = re.compile(r"#(\d+)")


def _normalized(text: str) -> str:
    """``text`` without what differs between runs of the same query (expression ids, UUIDs,
    object addresses)."""
    return _ADDRESS.sub("", _UUID.sub("", _ID.sub("", text)))


def _seq(scala_seq: Any) -> list[Any]:
    out = []
    iterator = scala_seq.iterator()
    while iterator.hasNext():
        out.append(iterator.next())
    return out


def _aliases_below(node: Any) -> dict[str, str]:
    """Expression id -> its definition, for the columns that the ``Project``s and ``Expand``s
    right below ``node`` (and through ``Filter``s) compute: how a key computed for the operator
    (a tumbling window: a ``Project``; a sliding one: an ``Expand``) is computed."""
    out: dict[str, str] = {}
    children = _seq(node.children())
    while len(children) == 1 and children[0].nodeName() in ("Project", "Filter", "Expand"):
        child = children[0]
        if child.nodeName() == "Project":
            for expression in _seq(child.projectList()):
                if expression.nodeName() == "Alias":
                    out[str(expression.exprId().id())] = expression.child().toString()
        elif child.nodeName() == "Expand":
            projections = [_seq(p) for p in _seq(child.projections())]
            for index, attribute in enumerate(_seq(child.output())):
                out.setdefault(str(attribute.exprId().id()), " | ".join(str(p[index].toString()) for p in projections))
        children = _seq(child.children())
    return out


def _expanded(expression: Any, aliases: dict[str, str]) -> str:
    """``expression`` as text with attributes that ``aliases`` defines replaced by their definition."""
    text = str(expression.toString())

    def definition(match: re.Match[str]) -> str:
        return match.group(0) if match.group(1) not in aliases else f"#{match.group(1)}:=({aliases[match.group(1)]})"

    return _normalized(_ATTRIBUTE.sub(definition, text))


def _window(expanded: str) -> str | None:
    """A readable summary of a time window's sizes in an expanded grouping key (the
    microsecond literals Spark computes a window with), or None for a key that is no window."""
    if "precisetimestampconversion" not in expanded:
        return None
    sizes = sorted({int(n) for n in re.findall(r"[%+] (\d+)\)", expanded) if int(n) > 0})
    return ", ".join(f"{n / 1_000_000:g} s" for n in sizes) or None


def _describe(node: Any) -> dict[str, Any] | None:
    """The fingerprint entry of one logical plan node, or None for a stateless one."""
    kind = str(node.nodeName())
    if not node.isStreaming():
        return None
    if kind == "Aggregate":
        aliases = _aliases_below(node)
        keys = [f"{_expanded(e, aliases)}: {e.dataType().simpleString()}" for e in _seq(node.groupingExpressions())]
        windows = [w for w in (_window(k) for k in keys) if w is not None]
        entry: dict[str, Any] = {"operator": kind}
        if windows:
            entry["window"] = "; ".join(windows)
        entry["grouping keys"] = keys
        entry["aggregates"] = [f"{_normalized(str(e.toString()))}: {e.dataType().simpleString()}"
                               for e in _seq(node.aggregateExpressions())]
        return entry
    if kind == "EventTimeWatermark":
        return {"operator": kind, "watermark": f"{node.eventTime().name()} delayed by {node.delay().toString()}"}
    if kind == "Deduplicate":
        return {"operator": kind, "keys": [f"{_normalized(str(k.toString()))}: {k.dataType().simpleString()}"
                                           for k in _seq(node.keys())]}
    if kind == "Join":
        if not all(child.isStreaming() for child in _seq(node.children())):
            return None
        return {"operator": kind, "join": _normalized(f"{node.joinType().toString()} {node.condition().toString()}")}
    if kind in OTHER_STATEFUL:
        return {"operator": kind, "description": _normalized(str(node.simpleString(1000)))}
    return None


def stateful_fingerprint(frame: DataFrame) -> list[dict[str, Any]]:
    """The stateful operators of streaming DataFrame ``frame`` as its analyzed plan has them
    (module docstring), in plan order (inputs first). Only plans, never runs, the query."""
    entries: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        for child in _seq(node.children()):
            walk(child)
        entry = _describe(node)
        if entry is not None:
            entries.append(entry)

    walk(frame._jdf.queryExecution().analyzed())
    return entries


def _aggregate_expressions(expression: Any) -> list[Any]:
    """The ``AggregateExpression`` nodes in ``expression``, in tree order (outermost first)."""
    if str(expression.nodeName()) == "AggregateExpression":
        return [expression]
    return [found for child in _seq(expression.children()) for found in _aggregate_expressions(child)]


def aggregate_buffers(frame: DataFrame) -> list[list[tuple[str, list[dict[str, Any]]]]]:
    """Per streaming ``Aggregate`` of ``frame``'s analyzed plan (in fingerprint order): each of its
    aggregate expressions as (its fingerprint text, as :func:`stateful_fingerprint` writes it, and
    the aggregation-buffer fields it adds to the operator's state value: ``name``, ``type`` (a
    Spark DataType as JSON), ``simple`` (its simple string), ``nullable``). An expression whose
    aggregate functions an earlier expression already has (Spark keeps one buffer for equal
    ones) or that aggregates nothing (a grouping column) adds none. Only plans, never runs, the query."""
    operators: list[list[tuple[str, list[dict[str, Any]]]]] = []

    def walk(node: Any) -> None:
        for child in _seq(node.children()):
            walk(child)
        if str(node.nodeName()) != "Aggregate" or not node.isStreaming():
            return
        seen: set[str] = set()
        entries = []
        for expression in _seq(node.aggregateExpressions()):
            fields: list[dict[str, Any]] = []
            for aggregate in _aggregate_expressions(expression):
                identity = _normalized(str(aggregate.canonicalized().toString()))
                if identity in seen:
                    continue
                seen.add(identity)
                fields += [{"name": str(a.name()), "type": json.loads(str(a.dataType().json())),
                            "simple": str(a.dataType().simpleString()), "nullable": bool(a.nullable())}
                           for a in _seq(aggregate.aggregateFunction().aggBufferAttributes())]
            entries.append((f"{_normalized(str(expression.toString()))}: {expression.dataType().simpleString()}",
                            fields))
        operators.append(entries)

    walk(frame._jdf.queryExecution().analyzed())
    return operators


def streaming_sources(frame: DataFrame) -> list[str]:
    """What Spark names each streaming source of ``frame``'s analyzed plan (``kafka``, a
    Python data source's registered name, ``FileSource``: a file source without its path), in
    plan order. Only plans, never runs, the query."""
    names: list[str] = []

    def walk(node: Any) -> None:
        children = _seq(node.children())
        if not children and node.isStreaming() and node.nodeName() in ("StreamingRelation", "StreamingRelationV2"):
            names.append(str(node.sourceName()).split("[", 1)[0])
        for child in children:
            walk(child)

    walk(frame._jdf.queryExecution().analyzed())
    return names


#: The name Spark's operator metadata gives the physical operator of a stateful plan node.
SPARK_NAMES = {
    "Aggregate": "stateStoreSave", "Deduplicate": "dedupe", "DeduplicateWithinWatermark": "dedupeWithinWatermark",
    "Join": "symmetricHashJoin", "FlatMapGroupsWithState": "flatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState": "applyInPandasWithState", "GlobalLimit": "globalLimit",
}
_SIZES = re.compile(r"[%+] (\d+)\)")
_OFFSET = re.compile(r"- (\d+)\) % \d+")


def _window_of(name: str | None, expanded: str) -> PlannedWindow | None:
    """The time window a grouping key computes (its expanded text: :func:`_expanded`), or None."""
    if name is None or "precisetimestampconversion" not in expanded:
        return None
    sizes = sorted({int(n) for n in _SIZES.findall(expanded) if int(n) > 0})
    if not sizes:
        return None
    offset = next((int(n) for n in _OFFSET.findall(expanded) if int(n) > 0), 0)
    return PlannedWindow(name, sizes[-1], sizes[0], offset)


def _named(expression: Any) -> str | None:
    return str(expression.name()) if str(expression.nodeName()) in ("AttributeReference", "Alias") else None


def _state_of(node: Any, buffers: list[tuple[str, list[dict[str, Any]]]] | None) -> PlannedOperatorState:
    kind = str(node.nodeName())
    if kind == "Aggregate":
        aliases = _aliases_below(node)
        grouping = _seq(node.groupingExpressions())
        keys = [(_named(e), str(e.dataType().simpleString())) for e in grouping]
        window = next((w for w in (_window_of(_named(e), _expanded(e, aliases)) for e in grouping) if w is not None),
                      None)
        values = [(str(f["name"]), str(f["simple"])) for _, fields in buffers or [] for f in fields]
        return PlannedOperatorState(kind, SPARK_NAMES[kind], keys, values, window)
    if kind == "Deduplicate":
        return PlannedOperatorState(kind, SPARK_NAMES[kind], [(_named(k), str(k.dataType().simpleString()))
                                                             for k in _seq(node.keys())])
    return PlannedOperatorState(kind, SPARK_NAMES.get(kind), None)


def planned_state_operators(frame: DataFrame) -> list[PlannedOperatorState]:
    """The stateful operators that keep a state store in streaming DataFrame ``frame``'s
    analyzed plan (the entries of :func:`stateful_fingerprint` but a watermark), as
    :func:`~barrierflow.state.metadata_compat.compare_by_metadata` compares them with Spark's state
    metadata: an aggregation's keys (their names and types, a time window among them with its size,
    slide and offset) and its aggregation buffer's columns (its state value), a deduplication's
    keys, any other operator by its kind only. In Spark's operator order: the outermost operator
    first (Spark's planner numbers the stateful operators from the plan's root down). Only plans,
    never runs, the query."""
    buffers = iter(aggregate_buffers(frame))  # one per streaming Aggregate, inputs first
    found: list[tuple[int, PlannedOperatorState]] = []
    visited = 0

    def walk(node: Any) -> None:
        nonlocal visited
        entered, visited = visited, visited + 1  # the node's place from the root down
        for child in _seq(node.children()):
            walk(child)
        entry = _describe(node)
        if entry is not None and entry["operator"] not in ("EventTimeWatermark",):
            found.append((entered, _state_of(node, next(buffers) if entry["operator"] == "Aggregate" else None)))

    walk(frame._jdf.queryExecution().analyzed())
    return [state for _, state in sorted(found, key=lambda pair: pair[0])]


#: The order in which the fields of an operator are compared (the first difference is reported).
FIELDS = ("window", "watermark", "grouping keys", "keys", "aggregates", "join", "description")
#: How much of one value a message shows.
SHOWN = 240


def _shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def _difference(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str | None:
    """The first difference between two fingerprints, ``what: old -> new``, or None. Of two
    lists of equal length, only the elements that differ are shown."""
    if old == new:
        return None
    kinds_before, kinds_after = [e.get("operator") for e in old], [e.get("operator") for e in new]
    if kinds_before != kinds_after:
        return f"stateful operators: {kinds_before} -> {kinds_after}"
    for before, after in zip(old, new, strict=True):
        for key in dict.fromkeys([*FIELDS, *sorted(before), *sorted(after)]):
            was, now = before.get(key), after.get(key)
            if was == now:
                continue
            if isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
                pairs = [f"{_shown(a)} -> {_shown(b)}" for a, b in zip(was, now, strict=True) if a != b]
                return f"{before['operator']} {key}: " + "; ".join(pairs)
            return f"{before['operator']} {key}: {_shown(was)} -> {_shown(now)}"
    return "stateful operators changed"  # pragma: no cover - entries with equal fields are equal


def _write_fingerprint(path: CheckpointDir, fingerprint: list[dict[str, Any]], sources: list[str]) -> None:
    text = json.dumps({"version": 1, "stateful_operators": fingerprint, "sources": sources}, indent=1,
                      sort_keys=True)
    if isinstance(path, ObjectDir):  # one PUT: readers see the old document or the new one
        path.write_text(text)
        return
    write_atomic(path, text)


def _read_fingerprint(path: CheckpointDir) -> tuple[list[dict[str, Any]], list[str] | None] | None:
    """The recorded stateful operators and sources (None: recorded before sources were), or
    None for no readable fingerprint."""
    try:
        document = json.loads(path.read_text())
        operators = document["stateful_operators"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(operators, list):
        return None
    sources = document.get("sources")
    return operators, sources if isinstance(sources, list) else None


def _source_change(root: CheckpointDir, planned: list[int], recorded: list[str] | None, now: list[str]) -> str | None:
    """``sources: old -> new`` when the query's streaming sources differ from the state's."""
    if recorded is not None:
        return None if recorded == now else f"streaming sources: {recorded} -> {now}"
    if not planned:
        return None
    count = offset_log.source_line_count(root, planned[-1])
    return None if count == len(now) else f"streaming sources: {count} in the state -> {len(now)} now ({now})"


class _Unreadable(Exception):
    """Spark could not read an operator's state schema (what the state reader calls corrupt)."""


def _check_by_metadata(frame: DataFrame, root: CheckpointDir, *, pipeline: str, stage: str) -> str:
    """Compare state without a fingerprint at ``root`` with the query ``frame`` plans, by
    Spark's state metadata (:func:`~barrierflow.state.metadata_compat.compare_by_metadata`, at the
    newest committed batch); returns what it was decided by when they agree.

    Raises:
        IncompatibleStateError: a difference, named.
        UnverifiedStateError: it cannot be decided (``unknown``), saying why and naming
            ``upgrade --assume-compatible``.
    """
    from barrierflow.state.metadata_compat import StoredWindows, compare_by_metadata
    from barrierflow.state.reader import read_operators, read_windows

    spark = frame.sparkSession
    batch = commit_log.latest_committed(root)
    assert batch is not None
    planned = planned_state_operators(frame)
    _ = spark.streams  # registers the StateStoreCoordinator the statestore reader reports to
    conf = offset_log.read_offset_metadata(root, batch).get("conf", {})
    partitions = conf.get(SHUFFLE_PARTITIONS)
    try:
        stored, options = read_operators(spark, root, batch, recorded_partitions=None if partitions is None
                                         else str(partitions), corrupt=lambda what, exc: _Unreadable(f"{what}: {exc}"))
    except _Unreadable as exc:
        first = str(exc).strip().splitlines()[0][:400]
        raise UnverifiedStateError(pipeline=pipeline, stage=stage, state=str(root),
                                   why=f"Spark cannot read its state schema ({first})") from None
    if not stored and not planned:
        return "the stage keeps no state"

    def windows(operator: OperatorSchema, window: PlannedWindow) -> StoredWindows:
        return StoredWindows(*read_windows(spark, root, batch, operator.operator_id, window.field,
                                           size_us=window.size_us, slide_us=window.slide_us,
                                           offset_us=window.offset_us, options=options.get(operator.operator_id)))

    findings = compare_by_metadata(stage, stored, planned, windows, rebuild_refusal="a run never rebuilds state")
    changed = [f for f in findings if f.verdict in (Verdict.INCOMPATIBLE, Verdict.NEEDS_REWRITE)]
    if changed:
        raise IncompatibleStateError(pipeline=pipeline, stage=stage, state=str(root),
                                     change="; ".join(f"{f.subject}: {f.reason}" for f in changed))
    unknown = [f for f in findings if f.verdict is Verdict.UNKNOWN]
    if unknown:
        raise UnverifiedStateError(pipeline=pipeline, stage=stage, state=str(root),
                                   why="; ".join(f"{f.subject}: {f.reason}" for f in unknown))
    return "its stateful operators agree with the spec by Spark's state metadata"


def check_state_compatible(frame: DataFrame, checkpoint: str | os.PathLike[str] | ObjectDir, *, shuffle_partitions: str,
                           pipeline: str, stage: str, state_store: str | None = None) -> None:
    """Refuse a stage's query over state it cannot honour (module docstring); record the
    stage's fingerprint when it starts on empty state (or state without one).

    Args:
        shuffle_partitions: what the spec now gives (:func:`~barrierflow.spark.session.shuffle_partitions`).
        state_store: the spec's ``spark.state_store`` (``hdfs``, ``rocksdb``; None: not compared).
        frame: the stage's streaming DataFrame, not yet started.
        checkpoint: the stage's Spark checkpoint directory.
        pipeline, stage: the names the error gives.

    Raises:
        IncompatibleStateError: the shuffle partitions, the state store, the streaming sources or the stateful
            operators differ from the state's, naming the pipeline, the stage, ``old -> new`` and the fix.
    """
    root = as_checkpoint_dir(checkpoint)
    planned = offset_log.planned_batches(root)
    if planned:
        conf = offset_log.read_offset_metadata(root, planned[-1]).get("conf", {})
        recorded = conf.get(SHUFFLE_PARTITIONS)
        now = shuffle_partitions
        if recorded is not None and str(recorded) != now:
            raise IncompatibleStateError(
                pipeline=pipeline, stage=stage, state=str(root),
                change=f"spark.shuffle_partitions: {recorded} -> {now}; Spark would keep {recorded}")
        provider = conf.get(PROVIDER_CLASS)
        kept = next((name for name, cls in PROVIDERS.items() if cls == provider), provider)
        if state_store is not None and provider is not None and kept != state_store:
            raise IncompatibleStateError(
                pipeline=pipeline, stage=stage, state=str(root),
                change=(f"spark.state_store: {kept} -> {state_store}; Spark would keep {kept} (the state's files are "
                        f"{kept}'s): keep spark.state_store: {kept}, or start the pipeline on empty state with a new "
                        "work_dir and checkpoint.storage"))
    fingerprint, sources = stateful_fingerprint(frame), streaming_sources(frame)
    path = root / FINGERPRINT_FILE
    recorded = _read_fingerprint(path)
    change = _source_change(root, planned, None if recorded is None else recorded[1], sources)
    if change is not None:
        raise IncompatibleStateError(pipeline=pipeline, stage=stage, state=str(root), change=change)
    if commit_log.latest_committed(root) is None:
        _write_fingerprint(path, fingerprint, sources)
        return
    if recorded is None:
        basis = _check_by_metadata(frame, root, pipeline=pipeline, stage=stage)
        log.warning("stage %s of pipeline %s: its state has no readable %s; %s, so the current one is recorded",
                    stage, pipeline, FINGERPRINT_FILE, basis)
        _write_fingerprint(path, fingerprint, sources)
        return
    change = _difference(recorded[0], fingerprint)
    if change is not None:
        raise IncompatibleStateError(pipeline=pipeline, stage=stage, state=str(root), change=change)
    if recorded[1] is None:
        _write_fingerprint(path, fingerprint, sources)


def planned_fingerprint(spark: SparkSession, spec: StageSpec, *, spec_path: str, source_type: str,
                        scratch_dir: str) -> list[dict[str, Any]]:
    """The fingerprint (:func:`stateful_fingerprint`) the stage whose derived spec is ``spec``
    would record, planned without a source or a start: its transformation applied, as every run
    applies it, to an empty streaming input with exactly the columns its source kind gives
    (``source_type``; read from the empty directory ``scratch_dir``), the way ``validate --deep``
    checks a transformation. Reads no data and connects to nothing.

    Raises:
        SpecError: the transformation cannot be loaded. UserInputError: the source's columns
            cannot be derived. Whatever the transformation raises.
    """
    return stateful_fingerprint(_planned_frame(spark, spec, spec_path=spec_path, source_type=source_type,
                                               scratch_dir=scratch_dir))


def _planned_frame(spark: SparkSession, spec: StageSpec, *, spec_path: str, source_type: str,
                   scratch_dir: str) -> DataFrame:
    from barrierflow.runtime.stage_query import apply_transformation
    from barrierflow.sources.registry import kind_named

    ddl = kind_named(source_type).row_schema(spec.source)
    return apply_transformation(spark.readStream.schema(ddl).format("json").load(scratch_dir), spec, spec_path)


def planned_buffers(spark: SparkSession, spec: StageSpec, *, spec_path: str, source_type: str,
                    scratch_dir: str) -> list[list[tuple[str, list[dict[str, Any]]]]]:
    """:func:`aggregate_buffers` of the stage query ``spec`` builds, planned as
    :func:`planned_fingerprint` plans it (nothing read, nothing started)."""
    return aggregate_buffers(_planned_frame(spark, spec, spec_path=spec_path, source_type=source_type,
                                            scratch_dir=scratch_dir))


def planned_states(spark: SparkSession, spec: StageSpec, *, spec_path: str, source_type: str,
                   scratch_dir: str) -> list[PlannedOperatorState]:
    """:func:`planned_state_operators` of the stage query ``spec`` builds, planned as
    :func:`planned_fingerprint` plans it (nothing read, nothing started)."""
    return planned_state_operators(_planned_frame(spark, spec, spec_path=spec_path, source_type=source_type,
                                                  scratch_dir=scratch_dir))


def planned_keyed_states(spark: SparkSession, spec: StageSpec, *, spec_path: str, source_type: str,
                         scratch_dir: str) -> list[list[tuple[str, str, str]] | None]:
    """:func:`~barrierflow.runtime.keyed_plan.planned_keyed_variables` of the stage query ``spec``
    builds, planned as :func:`planned_fingerprint` plans it (nothing read, nothing started)."""
    from barrierflow.runtime.keyed_plan import planned_keyed_variables

    return planned_keyed_variables(_planned_frame(spark, spec, spec_path=spec_path, source_type=source_type,
                                                  scratch_dir=scratch_dir))
