"""Fuzzing the inputs a user or a damaged store can hand barrierflow (Hypothesis, bounded).

Every reader of outside input must either accept it or refuse it with barrierflow's own error
whose message names the file (and, for specs, the field): never a traceback, never a silent
wrong value. Covered: pipeline specs (random YAML documents, and valid specs with one field
replaced, removed or added), checkpoint manifests, ledger entries, the replay plan and stored
verification results (truncated, garbled, wrong types), and the CLI's arguments.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.replay_plan import ReplayPlan
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.cli.main import main
from barrierflow.errors import CheckpointCorruptError, SpecError
from barrierflow.spec import load_any_spec, load_spec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.ledger import LedgerCorruptError, Transaction, TransactionLedger, transaction_key
from barrierflow.verification.report import load_report, report_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pipeline_specs import spec_dict
from tests.spec.test_stage_graph import three_stages
from tests.verification.checkpoint_factory import CheckpointFactory

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=16)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="barrierflow-fuzz-") as tmp:
        yield Path(tmp)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [(*path, k), *_leaves(v, (*path, k))]]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return []


def _set(doc: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "delete" and isinstance(parent, dict):
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[f"unknown_{last}"] = value
    else:
        parent[last] = value
    return doc


# --- pipeline specs ---------------------------------------------------------------------

@FUZZ
@given(document=documents)
def test_a_random_yaml_document_is_refused_naming_the_file(workdir: Path, document: Any) -> None:
    path = workdir / "random.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    for load in (load_spec, load_any_spec):
        with pytest.raises(SpecError) as refused:
            load(path)
        assert str(path) in str(refused.value)


@FUZZ
@given(raw=st.binary(max_size=200))
def test_random_bytes_as_a_spec_are_refused_naming_the_file(workdir: Path, raw: bytes) -> None:
    path = workdir / "bytes.yaml"
    path.write_bytes(raw)
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    assert str(path) in str(refused.value)


@FUZZ
@given(data=st.data(), action=st.sampled_from(["replace", "delete", "add"]), value=documents)
def test_a_valid_spec_with_one_field_changed_loads_or_is_refused_naming_the_field(
        workdir: Path, data: st.DataObject, action: str, value: Any) -> None:
    doc = spec_dict(workdir)
    target = data.draw(st.sampled_from(_leaves(doc)))
    _set(doc, target, action, value)
    path = workdir / "changed.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    try:
        load_spec(path)
    except SpecError as refused:
        message = str(refused)
        assert str(path) in message
        named = f"unknown_{target[-1]}" if action == "add" else str(target[-1])
        # The field itself, or (for a list element or a changed type tag) its enclosing field.
        assert any(str(part) in message for part in (named, *target)), (target, action, message)


@FUZZ
@given(data=st.data(), action=st.sampled_from(["replace", "delete", "add"]), value=documents)
def test_a_valid_multi_stage_spec_with_one_field_changed_loads_or_is_refused_naming_the_field(
        workdir: Path, data: st.DataObject, action: str, value: Any) -> None:
    doc = copy.deepcopy(three_stages(workdir))  # its stages share one json_fields mapping
    target = data.draw(st.sampled_from(_leaves(doc)))
    _set(doc, target, action, value)
    path = workdir / "stages.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    try:
        load_any_spec(path)
    except SpecError as refused:
        message = str(refused)
        assert str(path) in message
        named = f"unknown_{target[-1]}" if action == "add" else str(target[-1])
        # The field, an enclosing field, or the stage or channel it belongs to.
        names = [doc_part for doc_part in _names_along(three_stages(workdir), target)]
        assert any(str(part) in message for part in (named, *target, *names)), (target, action, message)


def _names_along(doc: Any, path: tuple[Any, ...]) -> list[str]:
    """The ``name`` of every mapping on the way to ``path`` (a stage's, a channel's)."""
    names, node = [], doc
    for key in path[:-1]:
        node = node[key]
        if isinstance(node, dict) and isinstance(node.get("name"), str):
            names.append(node["name"])
    return names


# --- checkpoint manifests, ledger entries, replay plans, verification results -----------------

@pytest.fixture(scope="module")
def valid(workdir: Path) -> dict[str, bytes]:
    """One real manifest, ledger entry and verification-free store from the coordinator."""
    factory = CheckpointFactory(workdir / "factory")
    manifest = factory.take(1)[0]
    objects = factory.objects
    txn = factory.ledger.list()[0]
    return {"manifest": objects.get_bytes(manifest_key(manifest.checkpoint_id)),
            "txn": objects.get_bytes(transaction_key(txn.sink, txn.checkpoint_id)),
            "plan": ReplayPlan(3, (4, 5), ({"0": 10, "1": 12}, {"0": 20, "1": 22})).to_json().encode()}


def _garble(raw: bytes, how: str, at: int, byte: int, value: Any) -> bytes:
    at = at % max(len(raw), 1)
    if how == "truncate":
        return raw[:at]
    if how == "flip":
        return raw[:at] + bytes([byte]) + raw[at + 1:]
    doc = json.loads(raw)  # "retype": one top-level field gets a value of another type
    key = sorted(doc)[at % len(doc)]
    doc[key] = value
    return json.dumps(doc).encode()


garbling = {"how": st.sampled_from(["truncate", "flip", "retype"]), "at": st.integers(0, 10_000),
            "byte": st.integers(0, 255), "value": documents}


@FUZZ
@given(**garbling)
def test_a_garbled_manifest_reads_or_is_refused_naming_it(
        workdir: Path, valid: dict[str, bytes], how: str, at: int, byte: int, value: Any) -> None:
    objects = LocalObjectStore(workdir / "manifests")
    store = CheckpointStore(objects, "t")
    original = Manifest.model_validate_json(valid["manifest"])
    objects.put_bytes(manifest_key(original.checkpoint_id), _garble(valid["manifest"], how, at, byte, value))
    try:
        store.get(original.checkpoint_id)
    except CheckpointCorruptError as refused:
        assert manifest_key(original.checkpoint_id) in str(refused)


@FUZZ
@given(**garbling)
def test_a_garbled_ledger_entry_reads_or_is_refused_naming_it(
        workdir: Path, valid: dict[str, bytes], how: str, at: int, byte: int, value: Any) -> None:
    objects = LocalObjectStore(workdir / "ledger")
    ledger = TransactionLedger(objects, "t")
    txn = Transaction.model_validate_json(valid["txn"])
    key = transaction_key(txn.sink, txn.checkpoint_id)
    objects.put_bytes(key, _garble(valid["txn"], how, at, byte, value))
    for read in (lambda: ledger.get(txn.sink, txn.checkpoint_id), ledger.list):
        try:
            read()
        except LedgerCorruptError as refused:
            assert key in str(refused) and "reconcile" in str(refused)


@FUZZ
@given(**garbling)
def test_a_garbled_replay_plan_reads_or_is_refused_naming_it(
        workdir: Path, valid: dict[str, bytes], how: str, at: int, byte: int, value: Any) -> None:
    control = ControlChannel(workdir / "control")
    control.directory.mkdir(parents=True, exist_ok=True)
    (control.directory / control.REPLAY).write_bytes(_garble(valid["plan"], how, at, byte, value))
    try:
        plan = control.replay_plan()
    except CheckpointCorruptError as refused:
        assert control.REPLAY in str(refused) and "restore" in str(refused)
    else:
        assert plan is None or isinstance(plan, ReplayPlan)


@FUZZ
@given(raw=st.binary(max_size=300) | documents.map(lambda d: json.dumps(d).encode()))
def test_a_garbled_verification_result_counts_as_never_verified(workdir: Path, raw: bytes) -> None:
    objects = LocalObjectStore(workdir / "results")
    objects.put_bytes(report_key(7), raw)
    result = load_report(objects, 7)
    assert result is None or result.checkpoint_id == 7


# --- the CLI's arguments ---------------------------------------------------------------------

COMMANDS = [["run"], ["checkpoints", "list"], ["checkpoints", "show"], ["restore"], ["reconcile"], ["verify"],
            ["retain"], ["savepoint"], ["skew"], ["checkpoints"], [], ["nonsense"]]
FLAGS = ["--json", "--dry-run", "--latest", "--latest-valid", "--checkpoint", "--deep", "--last", "--duration",
         "--checkpoints", "--accept-duplicates", "--html", "-v", "--quiet", "--until-exhausted", "--bogus"]
WORDS = st.one_of(st.sampled_from(FLAGS), st.sampled_from(["1", "-3", "2.5", "x", "", "latest"]), st.text(max_size=8))


@FUZZ
@given(command=st.sampled_from(COMMANDS), spec=st.sampled_from(["missing", "garbage", None]),
       words=st.lists(WORDS, max_size=5))
def test_cli_arguments_exit_2_with_a_message_never_a_traceback(
        workdir: Path, capsys: pytest.CaptureFixture[str], command: list[str], spec: str | None,
        words: list[str]) -> None:
    garbage = workdir / "garbage.yaml"
    garbage.write_text("sources: [1, 2\n", encoding="utf-8")
    paths = {"missing": str(workdir / "no-such-spec.yaml"), "garbage": str(garbage)}
    argv = [*command, *([paths[spec]] if spec else []), *words]
    try:
        code = main(argv)
    except SystemExit as exited:  # --help / -h print usage and exit 0
        assert exited.code == 0 and any(w in ("-h", "--help") for w in argv), argv
        return
    err = capsys.readouterr().err
    assert code == 2, (argv, code, err[-500:])
    assert "error:" in err and "Traceback" not in err, (argv, err[-500:])
