"""Whether state without a recorded fingerprint fits a planned query, by what Spark itself
records with the state.

State written before barrierflow recorded its fingerprint (``barrierflow-state.json``) still
carries Spark's own record of it: per stateful operator its operator metadata
(``state/<op>/_metadata/metadata``: its id, its name such as ``stateStoreSave`` or ``dedupe``,
its state stores) and the schema of its keys and values (``state/<op>/<partition>/_metadata/schema``,
or ``_stateSchema/`` files), and the stored keys themselves (a time window's key is its
``start`` and ``end``). :func:`compare_by_metadata` compares that with what the new spec plans
(:class:`PlannedOperatorState`, from the planned query's analyzed plan:
:func:`barrierflow.runtime.state_compat.planned_state_operators`), in Spark's operator order:

* the number of stateful operators and, where Spark's operator metadata names them, their kinds;
* each operator's key schema (column names and types) and, for an aggregation, its value schema
  (the aggregation buffer's columns);
* for a key that is a time window: the sizes of the stored windows (``end - start``) and whether
  every stored window starts on the new spec's slide, read from the state by one aggregation
  (:data:`WindowReader`); a window's size is in no schema.

A difference is a named change (the operator, the column or the window, ``old -> new``): the
stored state cannot be used as it is (:func:`~barrierflow.state.compatibility.dropped_or_rebuilt`).
Agreement is ``compatible``, by Spark's state metadata, with a finding that says what was
compared and what was not (the watermark's definition: Spark records none). Anything it cannot
decide is ``unknown`` (never compatible), saying why: no operator metadata, an operator whose
state schema barrierflow derives from no plan (a join, arbitrary stateful processing), stored
windows that cannot tell their size (no window stored) or their slide.

Pure and Spark-free: the caller reads the state (:mod:`barrierflow.state.reader`) and plans
the query.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from barrierflow.state.compatibility import Finding, Verdict, dropped_or_rebuilt
from barrierflow.state.reader import OperatorSchema, struct_fields

__all__ = ["BASIS", "PlannedOperatorState", "PlannedWindow", "StoredWindows", "WindowReader", "compare_by_metadata",
           "struct_fields"]

#: How a finding names the comparison it comes from.
BASIS = "by Spark's state metadata"
#: What the state reader calls an operator whose operator metadata is missing.
UNNAMED = "unknown"


def _seconds(micros: int) -> str:
    return f"{micros / 1_000_000:g} s"


@dataclass(frozen=True)
class PlannedWindow:
    """The time window a planned aggregation keys its state by: the key column ``field``, the
    window's size, slide and start offset in microseconds (a tumbling window: slide = size)."""

    field: str
    size_us: int
    slide_us: int
    offset_us: int = 0

    def describe(self) -> str:
        """``10 s``, ``20 s sliding every 10 s``."""
        text = _seconds(self.size_us)
        if self.slide_us != self.size_us:
            text += f" sliding every {_seconds(self.slide_us)}"
        return text + (f" from offset {_seconds(self.offset_us)}" if self.offset_us else "")


@dataclass(frozen=True)
class PlannedOperatorState:
    """What one stateful operator of a planned query would keep.

    Attributes:
        kind: its logical plan node (``Aggregate``, ``Deduplicate``, ...).
        spark_name: the name Spark's operator metadata gives such an operator (``stateStoreSave``,
            ``dedupe``), or None when unknown.
        key_fields: its state key's columns ``(name, type)`` (Spark's simple strings; a name None:
            a computed key Spark names itself, compared by type), or None: not derived from the plan.
        value_fields: its state value's columns, or None: not compared (Spark keeps no value of
            the query's own, or it is not derived from the plan).
        window: the time window among its keys, if any.
    """

    kind: str
    spark_name: str | None
    key_fields: list[tuple[str | None, str]] | None
    value_fields: list[tuple[str, str]] | None = None
    window: PlannedWindow | None = None


@dataclass(frozen=True)
class StoredWindows:
    """What the stored keys of one operator say about their window column: how many keys
    (``rows``), the distinct window sizes (``end - start``, microseconds; a few at most), and
    how many keys start off the planned window's slide (``off_slide``) and off its size
    (``off_size``), both counted from the planned offset."""

    rows: int
    durations: list[int]
    off_slide: int
    off_size: int


#: Reads :class:`StoredWindows` of a stored operator for a planned window (one Spark aggregation).
WindowReader = Callable[[OperatorSchema, PlannedWindow], StoredWindows]


def _columns(fields: list[tuple[str | None, str]]) -> str:
    return ", ".join(f"{name or '?'}: {kind}" for name, kind in fields) or "none"


def _schema_change(what: str, stored: list[tuple[str, str]], planned: list[tuple[str | None, str]]) -> str | None:
    """``key column key: bigint -> string``-style text naming how ``planned`` differs from
    ``stored``, or None when they agree (a planned name None matches any name)."""
    if len(stored) == len(planned) and all(
            kind == now_kind and (now is None or name == now)
            for (name, kind), (now, now_kind) in zip(stored, planned, strict=True)):
        return None
    names = {name for name, _ in stored}
    planned_names = {name for name, _ in planned if name is not None}
    if None not in {name for name, _ in planned} and names != planned_names:
        added = [f"{n}: {k}" for n, k in planned if n not in names]
        dropped = [f"{n}: {k}" for n, k in stored if n not in planned_names]
        parts = ([f"{what} column{'s' if len(added) > 1 else ''} added: {', '.join(added)}"] if added else []) + (
            [f"{what} column{'s' if len(dropped) > 1 else ''} dropped: {', '.join(dropped)}"] if dropped else [])
        if parts:
            return "; ".join(parts)
    if len(stored) == len(planned):
        changed = [f"{what} column {name}: {kind} -> {now_kind}" + (f" (now {now})" if now not in (None, name) else "")
                   for (name, kind), (now, now_kind) in zip(stored, planned, strict=True)
                   if kind != now_kind or now not in (None, name)]
        if changed:
            return "; ".join(changed)
    return f"{what} schema: {_columns(list(stored))} -> {_columns(planned)}"


def _window_finding(subject: str, window: PlannedWindow, seen: StoredWindows, rebuild_refusal: str | None
                    ) -> tuple[Finding | None, str]:
    """The finding of an operator's stored windows against the planned ``window`` (None: they
    agree), and what was compared."""
    planned = window.describe()
    if seen.rows == 0:
        return Finding(Verdict.UNKNOWN, subject, (
            f"the state holds no {window.field} key, so the size of the windows it was built with cannot be read "
            f"from it (the new spec's: {planned})")), ""
    sizes = ", ".join(_seconds(d) for d in sorted(seen.durations))
    if seen.durations != [window.size_us]:
        return dropped_or_rebuilt(subject, (
            f"window changed: {sizes} -> {window.size_us / 1_000_000:g} s (the state's {seen.rows} stored "
            f"{window.field} keys are {sizes} windows, {BASIS}); the stored keys are of the old window"),
            rebuild_refusal), ""
    if seen.off_slide:
        return dropped_or_rebuilt(subject, (
            f"window changed: {seen.off_slide} of the state's {seen.rows} stored {window.field} keys start off the "
            f"new spec's {planned} windows ({BASIS}); the stored keys are of the old window"), rebuild_refusal), ""
    if window.slide_us != window.size_us and not seen.off_size:
        return Finding(Verdict.UNKNOWN, subject, (
            f"every one of the state's {seen.rows} stored {window.field} keys starts on a multiple of "
            f"{_seconds(window.size_us)}: they cannot tell whether the state was built with {planned} windows or "
            "tumbling ones")), ""
    return None, f"{seen.rows} stored {window.field} keys, all {sizes} windows on the new spec's slide"


def compare_by_metadata(stage: str, stored: list[OperatorSchema], planned: list[PlannedOperatorState],
                        windows: WindowReader, rebuild_refusal: str | None) -> list[Finding]:
    """The findings of state without a fingerprint, ``stored`` (by operator id), against the
    stateful operators the new spec plans, ``planned`` (in Spark's operator order), as the module
    docstring says: a change named, ``unknown`` saying why, else one ``compatible`` finding
    saying what was compared. ``rebuild_refusal`` as for a fingerprint's change (None: the
    stage's input replays, and a change is rebuilt)."""
    where = f"stage {stage}"
    names = ", ".join(f"{o.operator_id} ({o.name})" for o in stored)
    kinds = ", ".join(p.kind for p in planned) or "none"
    if len(stored) != len(planned):
        return [dropped_or_rebuilt(f"{where} operators", (
            f"stateful operators changed: the state holds {len(stored)} ({names}), the new spec plans {len(planned)} "
            f"({kinds}) ({BASIS})"), rebuild_refusal)]
    findings: list[Finding] = []
    compared: list[str] = []
    unnamed = [o for o in stored if o.name == UNNAMED]
    for op, plan in zip(stored, planned, strict=True):
        subject = f"{where} operator {op.operator_id} ({op.name}, {plan.kind})"
        if op.name != UNNAMED and plan.spark_name is not None and op.name != plan.spark_name:
            findings.append(dropped_or_rebuilt(subject, (
                f"stateful operator changed: Spark's operator metadata names it {op.name}, the new spec plans "
                f"{plan.kind} ({plan.spark_name}) in its place ({BASIS})"), rebuild_refusal))
            continue
        if plan.key_fields is None:
            findings.append(Finding(Verdict.UNKNOWN, subject, (
                f"barrierflow derives no state schema from a {plan.kind}'s plan, so its stored keys and values cannot "
                "be compared with the new spec's")))
            continue
        key_fields = struct_fields(op.key_schema)
        value_fields = struct_fields(op.value_schema)
        if key_fields is None or value_fields is None:
            findings.append(Finding(Verdict.UNKNOWN, subject, (
                f"Spark's state schema of the operator is not a key and a value struct ({op.key_schema}, "
                f"{op.value_schema})")))
            continue
        change = _schema_change("key", key_fields, plan.key_fields)
        if change is None and plan.value_fields is not None:
            change = _schema_change("value", value_fields, list(plan.value_fields))
        if change is not None:
            findings.append(dropped_or_rebuilt(subject, (
                f"{change} ({BASIS}: Spark's state schema against the new spec's plan); the stored state is of the "
                "old definition"), rebuild_refusal))
            continue
        what = f"operator {op.operator_id} ({op.name}): key {op.key_schema}" + (
            f", value {op.value_schema}" if plan.value_fields is not None else "")
        if plan.window is not None and plan.window.field in {n for n, _ in key_fields}:
            finding, seen = _window_finding(subject, plan.window, windows(op, plan.window), rebuild_refusal)
            if finding is not None:
                findings.append(finding)
                continue
            what += f", {seen}"
        compared.append(what)
    if findings:
        return findings
    if unnamed:
        listed = ", ".join(f"state/{o.operator_id}/_metadata" for o in unnamed)
        return [Finding(Verdict.UNKNOWN, where, (
            f"the state has no recorded fingerprint, and Spark's operator metadata ({listed}) is missing or "
            f"unreadable, so what its operators are cannot be compared with the new spec's ({kinds}); their state "
            f"schemas agree: {'; '.join(compared)}"))]
    return [Finding(Verdict.COMPATIBLE, where, (
        f"compatible {BASIS}: the state has no recorded fingerprint (written before barrierflow recorded one); "
        f"Spark's operator metadata and state schemas agree with the new spec's plan: {'; '.join(compared)}; not "
        "compared: the watermark's definition (Spark records none with the state)"))]
