"""Whether a checkpoint's state fits what another spec would build: the verdict of ``barrierflow
upgrade SPEC --to NEW_SPEC --dry-run``.

Pure and Spark-free: the caller reads the old side from the checkpoint (:class:`StageState`,
with the state reader: operators, key and value schemas, partitions, the recorded fingerprint
and shuffle partitions) and plans the new side without starting anything
(:class:`PlannedStage`: the fingerprint of the new stage query's analyzed plan, its shuffle
partitions, sources and sink). :func:`compare` answers per stage, per operator and for the
graph with one of four verdicts, each finding saying why:

* ``compatible``: the new spec resumes from the state as it is (what ``run`` accepts);
* ``needs rewrite``: the state can be carried over, but only rewritten (a rescale when the
  shuffle partitions changed; a value column added to or dropped from an aggregation; a
  changed watermark definition; a stateful operator or stage added, which starts empty; a
  stage without state removed; the channels between stages changed); or rebuilt from the
  stage's input (:data:`REBUILD`, :func:`is_rebuild`) where the state cannot be used as it
  is and the input can be replayed (:attr:`PlannedStage.rebuild_refusal` None): a stateful
  operator whose keys change meaning (its window, grouping keys, deduplication keys, join),
  whose value column changes type, or which the new spec no longer has or replaces; a stateful
  operator added to a stage that has one, or a changed watermark, in such a stage;
* ``unknown``: the state has no recorded fingerprint (written before barrierflow recorded
  one) and what Spark itself records with it cannot decide either (:mod:`barrierflow.state.metadata_compat`:
  no operator metadata, an operator whose schema barrierflow does not derive from a plan, a
  window whose size the stored keys cannot show). Never treated as compatible: ``upgrade``
  refuses it unless told ``--assume-compatible``;
* ``incompatible``: state would be dropped, named: those changes of a stage whose input
  cannot be replayed (the finding says why not); a stage with state removed; a source the
  cut's positions are in replaced; a different checkpoint storage.

A stage whose state has no recorded fingerprint is compared by Spark's own state metadata
instead (its operators, their key and value schemas, the sizes of stored windows): a
difference is named like a fingerprint's; agreement is ``compatible`` with a finding that says
it was decided by Spark's state metadata (:attr:`StageVerdict.basis`).

The verdict of a stage (and of the whole) is the worst of its findings.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from barrierflow.state.reader import TIMER_STATE, OperatorSchema

__all__ = ["REBUILD", "CompatibilityReport", "Finding", "PlannedStage", "StageState", "StageVerdict", "Verdict",
           "compare", "dropped_or_rebuilt", "is_rebuild", "keyed_findings", "ttl_finding", "ttl_of"]

#: Fingerprint entries that describe a stateful operator's definition but keep no state store of their own.
NOT_A_STORE = frozenset({"EventTimeWatermark"})
#: Fields of a fingerprint entry whose change gives the operator's keys another meaning.
KEY_FIELDS = ("window", "grouping keys", "keys", "join", "description")
#: What the reason of every finding that a rebuild by replay makes says (:func:`is_rebuild`).
REBUILD = "a rewrite rebuilds the stage's state from its input"
_ALIAS = re.compile(r" AS ([^:]+):")
_MISSING = object()


class Verdict(enum.StrEnum):
    COMPATIBLE = "compatible"
    NEEDS_REWRITE = "needs rewrite"
    UNKNOWN = "unknown"
    INCOMPATIBLE = "incompatible"

    @property
    def rank(self) -> int:
        return list(Verdict).index(self)


def worst(verdicts: list[Verdict]) -> Verdict:
    """The most severe of ``verdicts`` (compatible for none)."""
    return max(verdicts, key=lambda v: v.rank, default=Verdict.COMPATIBLE)


@dataclass(frozen=True)
class Finding:
    """One difference and what it means for the state: ``subject`` names what (``stage b``,
    ``stage b operator 0 (stateStoreSave)``, ``channel ab``), ``reason`` says why; ``rebuild``:
    the upgrade makes the change by rebuilding the stage's state from its input (its reason
    then says so, :data:`REBUILD`)."""

    verdict: Verdict
    subject: str
    reason: str
    rebuild: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": self.verdict.value, "subject": self.subject, "reason": self.reason}
        if self.rebuild:
            out["rebuild"] = True
        return out


@dataclass(frozen=True)
class StageState:
    """What a checkpoint holds of one stage: its stateful operators as read from the state,
    the fingerprint recorded with it (None: none recorded), the shuffle partitions its offset
    log records, its sources (name -> type) and its sink (``name (type)``)."""

    stage: str
    operators: list[OperatorSchema]
    fingerprint: list[dict[str, Any]] | None
    shuffle_partitions: str | None
    sources: dict[str, str]
    sink: str
    #: ``spark.state_store`` of the spec the state was built with (None: not compared)
    state_store: str | None = None
    #: for state without a fingerprint: the findings of its comparison by Spark's state metadata
    #: with the new spec's plan (:func:`barrierflow.state.metadata_compat.compare_by_metadata`); None: not made
    by_metadata: list[Finding] | None = None
    #: ``transformation.ttl`` (seconds) of the spec the state was built with (None: no ttl)
    ttl_seconds: float | None = None


@dataclass(frozen=True)
class PlannedStage:
    """What the new spec would build for one stage, planned and not started."""

    stage: str
    fingerprint: list[dict[str, Any]]
    shuffle_partitions: str
    sources: dict[str, str]
    sink: str
    state_defaults: dict[str, Any] = field(default_factory=dict)
    #: None: the stage's state can be rebuilt by replaying its input (its source replays it, its
    #: state store is RocksDB: :func:`barrierflow.upgrade.rebuild.rebuild_refusal`); else why not
    rebuild_refusal: str | None = "its input was not checked for a replay"
    #: its ``spark.state_store`` (None: not compared)
    state_store: str | None = None
    #: per keyed function of its query (transformWithState; inputs first), the state variables
    #: its processor declares, ``(name, kind, stored)``, or None: they could not be read from the
    #: plan (:func:`barrierflow.runtime.keyed_plan.planned_keyed_variables`)
    keyed: list[list[tuple[str, str, str]] | None] = field(default_factory=list)
    #: its ``transformation.ttl`` in seconds (None: no ttl)
    ttl_seconds: float | None = None


@dataclass(frozen=True)
class StageVerdict:
    """One stage's verdict, its findings, and the state it has (old operators) and would have."""

    stage: str
    verdict: Verdict
    findings: list[Finding]
    operators: list[OperatorSchema] = field(default_factory=list)
    planned: list[dict[str, Any]] = field(default_factory=list)
    #: what the stateful operators were compared by: ``fingerprint`` (the one recorded with the
    #: state), ``spark state metadata`` (none recorded: Spark's operator metadata and schemas),
    #: or ``""`` (no state to compare)
    basis: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "verdict": self.verdict.value, "basis": self.basis,
                "findings": [f.as_dict() for f in self.findings],
                "operators": [o.as_dict() for o in self.operators], "planned_operators": self.planned}


@dataclass(frozen=True)
class CompatibilityReport:
    """The whole answer: per stage, and the graph's own findings (stages, channels, storage)."""

    pipeline: str
    spec: str
    new_spec: str
    checkpoint_id: int
    noun: str
    graph: list[Finding]
    stages: list[StageVerdict]

    @property
    def verdict(self) -> Verdict:
        return worst([f.verdict for f in self.graph] + [s.verdict for s in self.stages])

    @property
    def unknown_stages(self) -> list[str]:
        """The stages whose verdict is ``unknown`` (what ``--assume-compatible`` vouches for)."""
        return [s.stage for s in self.stages if s.verdict is Verdict.UNKNOWN]

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``upgrade --dry-run --json``."""
        return {"pipeline": self.pipeline, "spec": self.spec, "new_spec": self.new_spec, "noun": self.noun,
                "checkpoint_id": self.checkpoint_id, "verdict": self.verdict.value,
                "graph": [f.as_dict() for f in self.graph], "stages": [s.as_dict() for s in self.stages]}


def _stores(fingerprint: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in fingerprint if e.get("operator") not in NOT_A_STORE]


def _watermarks(fingerprint: list[dict[str, Any]]) -> list[str]:
    return [str(e.get("watermark")) for e in fingerprint if e.get("operator") in NOT_A_STORE]


def _aggregates(entry: dict[str, Any]) -> dict[str, str]:
    """An aggregation's value columns: alias -> its definition (``count(1) AS count: bigint``)."""
    out = {}
    for text in entry.get("aggregates", []):
        match = _ALIAS.search(str(text))
        out[match.group(1).strip() if match else str(text)] = str(text)
    return out


def _name(stage: str, index: int, operators: list[OperatorSchema], kind: str) -> str:
    spark = f"{operators[index].name}, " if index < len(operators) else ""
    number = operators[index].operator_id if index < len(operators) else index
    return f"stage {stage} operator {number} ({spark}{kind})"


def _held(entry: dict[str, Any]) -> str:
    """What an operator's state holds, as a reason names it."""
    for key in ("window", "grouping keys", "keys", "join"):
        if key in entry:
            value = entry[key]
            return f"{key} {', '.join(value) if isinstance(value, list) else value}"
    return str(entry.get("description", entry.get("operator")))


def _default(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def is_rebuild(finding: Finding) -> bool:
    """Whether ``finding`` is a change the upgrade makes by rebuilding the stage's state from its
    input (:mod:`barrierflow.upgrade.rebuild`)."""
    return finding.rebuild


def dropped_or_rebuilt(subject: str, what: str, rebuild_refusal: str | None) -> Finding:
    """The finding of a change whose old state the new definition cannot use (``what`` says
    which): rebuilt from the input when the stage's input replays (``rebuild_refusal`` None),
    else dropped, saying why no rebuild."""
    if rebuild_refusal is None:
        return Finding(Verdict.NEEDS_REWRITE, subject, (
            f"{what}, so the stored state cannot be used as it is: {REBUILD} (replayed from the first record to the "
            "savepoint), and the new definition's output starts at the savepoint"), rebuild=True)
    return Finding(Verdict.INCOMPATIBLE, subject,
                   f"{what}, so its state would be dropped (no rebuild: {rebuild_refusal})")


def _operator_findings(stage: str, old: list[dict[str, Any]], new: list[dict[str, Any]],
                       operators: list[OperatorSchema], defaults: dict[str, Any] | None = None,
                       rebuild_refusal: str | None = "not checked") -> list[Finding]:
    findings: list[Finding] = []
    old_ops, new_ops = _stores(old), _stores(new)
    for index in range(max(len(old_ops), len(new_ops))):
        was = old_ops[index] if index < len(old_ops) else None
        now = new_ops[index] if index < len(new_ops) else None
        if was is None:
            assert now is not None
            subject = f"stage {stage} operator {index} ({now['operator']})"
            if rebuild_refusal is None:
                findings.append(dropped_or_rebuilt(subject, f"a new stateful operator ({_held(now)})", None))
                continue
            findings.append(Finding(Verdict.NEEDS_REWRITE, subject,
                                    f"a new stateful operator ({_held(now)}); it would start on empty state, and "
                                    "Spark restarts no query over a checkpoint that lacks one of its operators"))
            continue
        subject = _name(stage, index, operators, str(was["operator"]))
        if now is None or now.get("operator") != was.get("operator"):
            instead = f"; the new spec has {now['operator']} in its place" if now is not None else ""
            findings.append(dropped_or_rebuilt(
                subject, f"the new spec no longer has this operator{instead} (its state: {_held(was)})",
                rebuild_refusal))
            continue
        for key in KEY_FIELDS:
            if was.get(key) != now.get(key):
                findings.append(dropped_or_rebuilt(subject, (
                    f"{key} changed: {_listed(was.get(key))} -> {_listed(now.get(key))}; the stored keys are of "
                    f"the old {key}"), rebuild_refusal))
                break
        else:
            before, after = _aggregates(was), _aggregates(now)
            for alias in sorted(set(before) & set(after)):
                if before[alias] != after[alias]:
                    findings.append(dropped_or_rebuilt(subject, (
                        f"value column {alias} changed: {before[alias]} -> {after[alias]}; its stored values are of "
                        "the old definition"), rebuild_refusal))
            added, dropped = sorted(set(after) - set(before)), sorted(set(before) - set(after))
            for alias in added:
                declared = (defaults or {}).get(alias, _MISSING)
                how = (f"a rewrite would add it to every stored value with the declared default {alias} = "
                       f"{_default(declared)} (transformation.state_defaults)" if declared is not _MISSING else
                       f"no default is declared for it, so upgrade refuses it: declare the value every stored key's "
                       f"state starts from in the new spec's transformation.state_defaults ({alias}: VALUE, or "
                       "null for no value yet)")
                findings.append(Finding(Verdict.NEEDS_REWRITE, subject, f"value column added: {after[alias]}; {how}"))
            if dropped:
                findings.append(Finding(Verdict.NEEDS_REWRITE, subject, (
                    f"value column{'s' if len(dropped) > 1 else ''} dropped: {', '.join(before[d] for d in dropped)};"
                    " a rewrite would remove it from every stored value")))
    if _watermarks(old) != _watermarks(new):
        changed = f"watermark changed: {_listed(_watermarks(old))} -> {_listed(_watermarks(new))}"
        if rebuild_refusal is None:
            findings.append(dropped_or_rebuilt(f"stage {stage} watermark", (
                f"{changed}; what the state holds and evicted follows the old definition"), None))
        else:
            findings.append(Finding(Verdict.NEEDS_REWRITE, f"stage {stage} watermark", (
                f"{changed}; the stored watermark carries on, and the rewrite records the new definition with the "
                "state")))
    return findings


def ttl_of(spec: Any) -> float | None:
    """A stage spec's ``transformation.ttl`` in seconds, or None (no ttl, or a spec without the field)."""
    value = getattr(getattr(spec, "transformation", None), "ttl", None)
    return None if value is None else float(value)


def _ttl(seconds: float | None) -> str:
    return "none" if seconds is None else f"{seconds:g} s"


def ttl_finding(stage: str, old: float | None, new: float | None) -> Finding | None:
    """The finding of a ttl change of a stage's keyed state (None: unchanged). Always
    compatible, without a rewrite: expiry is by event time, and each key keeps in its state its
    last update and the expiry timer it registered."""
    if old == new:
        return None
    changed = f"ttl {_ttl(old)} -> {_ttl(new)}"
    if old is None:
        what = ("keys in the state registered no expiry; each key's next record registers one at its last update + "
                f"{_ttl(new)}")
    elif new is None:
        what = "keys in the state keep their state from then on (no expiry); updates register none"
    else:
        what = (f"existing keys keep their registered expiry (their last update + {_ttl(old)}) until it fires or "
                f"their next record arrives; from then, and for every new update, the expiry is the last update + "
                f"{_ttl(new)} (a key whose new expiry is already behind the watermark expires then)")
    return Finding(Verdict.COMPATIBLE, f"stage {stage} ttl", f"{changed}: compatible: {what}")


def keyed_findings(stage: str, operators: list[OperatorSchema], planned: list[list[tuple[str, str, str]] | None]
                   ) -> list[Finding]:
    """The findings of a stage's keyed functions (transformWithState operators among
    ``operators``) against the state variables the new spec's keyed functions declare
    (``planned``, inputs first, as :class:`PlannedStage` keeps them), variable by variable:

    * same name, same kind and type: compatible (said once, listing them);
    * a new variable: compatible (every key starts without a value in it; Spark adds its column
      family when the query restarts);
    * a variable whose kind or type changed: incompatible, naming it and the fix (Spark refuses
      to restart over values of the old type);
    * a variable the new function no longer declares, or variables that cannot be read from
      the new spec's plan: unknown, saying why (never compatible).
    """
    keyed = [o for o in operators if o.keyed]
    if not keyed:
        return []
    if len(planned) != len(keyed):
        return [Finding(Verdict.UNKNOWN, f"stage {stage} keyed state", (
            f"the state holds {len(keyed)} keyed function operator{'s' if len(keyed) > 1 else ''} "
            f"({', '.join(o.describe() for o in keyed)}) and the new spec's query plans {len(planned)}; their state "
            "variables cannot be matched"))]
    findings: list[Finding] = []
    # Spark numbers stateful operators from the plan's root down; the plan lists inputs first
    for op, declared in zip(keyed, list(reversed(planned)), strict=True):
        subject = f"stage {stage} operator {op.operator_id} ({op.name})"
        if declared is None:
            findings.append(Finding(Verdict.UNKNOWN, subject, (
                "the state variables the new spec's keyed function declares cannot be read from its plan (its "
                "processor's init could not be run with a recording handle on the driver), so they cannot be "
                f"compared with the state's ({', '.join(v.name for v in op.variables)})")))
            continue
        stored = {v.name: v for v in op.variables if v.kind != TIMER_STATE}
        now = {name: (kind, what) for name, kind, what in declared}
        same: list[str] = []
        for name, was in stored.items():
            if name not in now:
                findings.append(Finding(Verdict.UNKNOWN, subject, (
                    f"state variable {name} ({was.kind} {was.stored}) is no longer declared by the new spec's keyed "
                    "function: its stored values would stay in the state unread, and whether Spark restarts over a "
                    "checkpoint with a variable its function no longer declares depends on its state schema "
                    f"evolution; keep declaring {name} (reading it is not needed) to be sure")))
                continue
            kind, what = now[name]
            if (kind, what) != (was.kind, was.stored):
                findings.append(Finding(Verdict.INCOMPATIBLE, subject, (
                    f"state variable {name} changed type: {was.kind} {was.stored} -> {kind} {what}; its stored "
                    f"values are of the old type, which Spark refuses to restart over. Keep {name} as {was.kind} "
                    f"{was.stored}, or declare the new type under a new variable name (it starts empty for every "
                    f"key) and stop declaring {name}")))
                continue
            same.append(f"{name} ({kind} {what})")
        for name, (kind, what) in now.items():
            if name not in stored:
                findings.append(Finding(Verdict.COMPATIBLE, subject, (
                    f"new state variable {name} ({kind} {what}): compatible: every key in the state starts without a "
                    "value in it, and Spark adds it to the state when the query restarts")))
        if same:
            findings.append(Finding(Verdict.COMPATIBLE, subject, (
                f"state variables unchanged: {', '.join(same)}")))
    return findings


def _listed(value: Any) -> str:
    if isinstance(value, list):
        return "[" + "; ".join(str(v) for v in value) + "]" if value else "none"
    return "none" if value is None else str(value)


def _stage_verdict(old: StageState, new: PlannedStage) -> StageVerdict:
    findings: list[Finding] = []
    stage = old.stage
    for name, kind in old.sources.items():
        if new.sources.get(name) != kind:
            now = f"{new.sources[name]}" if name in new.sources else "no such source"
            findings.append(Finding(Verdict.INCOMPATIBLE, f"stage {stage} source {name}", (
                f"source {name} ({kind}) -> {now}: the checkpoint's positions in it would be dropped (the new "
                "source would start from its own beginning)")))
    for name in sorted(set(new.sources) - set(old.sources)):
        findings.append(Finding(Verdict.INCOMPATIBLE, f"stage {stage} source {name}", (
            f"source {name} ({new.sources[name]}) is new and the checkpoint has no position in it; the positions "
            f"in {', '.join(sorted(old.sources))} would be dropped")))
    if old.operators and old.state_store and new.state_store and old.state_store != new.state_store:
        findings.append(Finding(Verdict.INCOMPATIBLE, f"stage {stage} state store", (
            f"spark.state_store {old.state_store} -> {new.state_store}: the state's files are {old.state_store}'s, "
            f"and Spark keeps the provider a checkpoint was written with; moving state between providers is not "
            f"supported: keep spark.state_store: {old.state_store}, or start the pipeline on empty state")))
    if old.sink != new.sink:
        findings.append(Finding(Verdict.COMPATIBLE, f"stage {stage} sink", (
            f"sink {old.sink} -> {new.sink}: no state changes; finish the old sink's transactions in doubt first "
            "('barrierflow reconcile' with the old spec)")))
    partitions = {o.partitions for o in old.operators}
    held = ", ".join(o.describe() for o in old.operators)
    if old.operators and partitions != {int(new.shuffle_partitions)}:
        was = "/".join(str(p) for p in sorted(partitions))
        findings.append(Finding(Verdict.NEEDS_REWRITE, f"stage {stage} shuffle partitions", (
            f"spark.shuffle_partitions {was} -> {new.shuffle_partitions}: the state ({held}) is partitioned "
            f"into {was}, and Spark would keep {was}; a rewrite would redistribute its keys into "
            f"{new.shuffle_partitions} partitions as Spark hashes them (rescale)")))
    elif (not old.operators and old.shuffle_partitions is not None
          and old.shuffle_partitions != new.shuffle_partitions):
        findings.append(Finding(Verdict.NEEDS_REWRITE, f"stage {stage} shuffle partitions", (
            f"spark.shuffle_partitions {old.shuffle_partitions} -> {new.shuffle_partitions}: the stage keeps no "
            f"state, but its offset log records {old.shuffle_partitions}, which Spark would keep; the rewrite "
            "records the new value")))
    basis = ""
    if old.fingerprint is not None:
        basis = "fingerprint"
        findings += _operator_findings(stage, old.fingerprint, new.fingerprint, old.operators, new.state_defaults,
                                       new.rebuild_refusal)
    elif old.operators:
        basis = "spark state metadata"
        findings += old.by_metadata if old.by_metadata is not None else [Finding(Verdict.UNKNOWN, f"stage {stage}", (
            f"the state ({held}) has no recorded fingerprint (written before barrierflow recorded one), and it was "
            "not compared with Spark's state metadata"))]
    elif _stores(new.fingerprint):
        findings += _operator_findings(stage, [], new.fingerprint, [])
    if old.operators:
        findings += keyed_findings(stage, old.operators, new.keyed)
        ttl = ttl_finding(stage, old.ttl_seconds, new.ttl_seconds)
        # a ttl finding speaks of the keyed state kept as it is: only when the new spec still plans
        # a keyed function (a function that plans another operator without a ttl is a rebuild)
        if ttl is not None and any(o.keyed for o in old.operators) and new.keyed:
            findings.append(ttl)
    return StageVerdict(stage, worst([f.verdict for f in findings]), findings, old.operators, new.fingerprint, basis)


def compare(old: list[StageState], new: list[PlannedStage], *, old_channels: dict[str, tuple[str, int]],
            new_channels: dict[str, tuple[str, int]], old_storage: str, new_storage: str
            ) -> tuple[list[Finding], list[StageVerdict]]:
    """The graph's findings and every stage's verdict (module docstring), stages in the old
    spec's order, then those only the new one has. Channels: name -> (topic, partitions)."""
    graph: list[Finding] = []
    if old_storage.rstrip("/") != new_storage.rstrip("/"):
        graph.append(Finding(Verdict.INCOMPATIBLE, "checkpoint storage", (
            f"the new spec keeps its checkpoints in {new_storage}, not {old_storage}: it would start on empty "
            "state and every stage's state would be dropped; give it the same checkpoint.storage")))
    for name in sorted(set(old_channels) | set(new_channels)):
        was, now = old_channels.get(name), new_channels.get(name)
        if was == now:
            continue
        what = ("is new" if was is None else "is removed" if now is None
                else f"changed: topic {was[0]}, {was[1]} partitions -> topic {now[0]}, {now[1]} partitions")
        graph.append(Finding(Verdict.NEEDS_REWRITE, f"channel {name}", (
            f"channel {name} {what}: the cut's positions in the channels (barrier offsets, attempt cutoffs) would "
            "be rewritten to match")))
    planned = {p.stage: p for p in new}
    stages: list[StageVerdict] = []
    for state in old:
        target = planned.get(state.stage)
        if target is not None:
            stages.append(_stage_verdict(state, target))
            continue
        if state.operators:
            held = ", ".join(o.describe() for o in state.operators)
            finding = Finding(Verdict.INCOMPATIBLE, f"stage {state.stage}", (
                f"the new spec has no stage {state.stage}: its state would be dropped ({held})"))
        else:
            finding = Finding(Verdict.NEEDS_REWRITE, f"stage {state.stage}", (
                f"the new spec has no stage {state.stage}; it keeps no state, and the rewrite drops its part of the "
                "cut and its channel positions"))
        stages.append(StageVerdict(state.stage, finding.verdict, [finding], state.operators))
    known = {s.stage for s in old}
    for target in new:
        if target.stage not in known:
            finding = Finding(Verdict.NEEDS_REWRITE, f"stage {target.stage}", (
                f"stage {target.stage} is new: it would start on empty state; the cut has no part for it, so the "
                "rewrite adds one and positions it in its input channels"))
            stages.append(StageVerdict(target.stage, finding.verdict, [finding], [], target.fingerprint))
    return graph, stages
