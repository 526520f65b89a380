"""``upgrade`` over state without a recorded fingerprint: compared by Spark's own state
metadata, never called compatible when that cannot decide.

The state is today's, its records taken out as an older barrierflow (or Spark) would have left
them (:mod:`tests.support.state_origin`): first the fingerprint, then also Spark's operator
metadata. A 10 s -> 20 s window change is named from the stored keys either way; the unchanged
spec is compatible by Spark's state metadata while its operator metadata is there, and
``unknown`` (exit 2, naming ``--assume-compatible``) once it is gone; ``--assume-compatible``
proceeds and records the fingerprint with the state, marked as assumed, and the state is
compared by it from then on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.snapshot import STATE_FINGERPRINT
from barrierflow.checkpointing.store import shared_key
from barrierflow.pipeline.model import open_pipeline

from tests.runtime.test_state_compatibility import window_spec, write
from tests.support.in_session_runs import run_spec, write_spec
from tests.support.state_origin import OPERATOR_METADATA, strip_state_records

pytestmark = pytest.mark.spark

Cli = Callable[..., tuple[int, str, str]]


@pytest.mark.slow(60)
def test_upgrade_dry_run_over_state_without_a_fingerprint_names_the_window_change_and_unknown_needs_the_users_word(
        spark: Any, cli: Cli, tmp_path: Path) -> None:
    data = window_spec(tmp_path)
    data["sources"][0]["records_per_partition"] = 600
    path = write(tmp_path, data)
    assert run_spec(spark, path, checkpoints=2, duration=150).completed
    code, _, err = cli("savepoint", str(path))
    assert code == 0, err
    assert strip_state_records(path) > 0
    changed = write_spec(tmp_path / "new.yaml", {**data, "transformation": {
        **data["transformation"], "options": {"window": "20 seconds"}}})

    # Spark's operator metadata and schemas present: the changed window is named, from the stored keys
    code, out, _ = cli("upgrade", str(path), "--to", str(changed), "--dry-run")
    assert code == 1 and ": INCOMPATIBLE" in out, out
    assert "window changed: 10 s -> 20 s" in out and "by Spark's state metadata" in out, out
    # the spec unchanged: compatible, and it says by what
    code, out, _ = cli("upgrade", str(path), "--to", str(path), "--dry-run")
    assert code == 0 and ": COMPATIBLE" in out and "compatible by Spark's state metadata" in out, out

    # Spark's operator metadata gone too: what the operator is cannot be compared
    assert strip_state_records(path, paths=(OPERATOR_METADATA,)) > 0
    code, out, err = cli("upgrade", str(path), "--to", str(path), "--dry-run")
    assert code == 2 and ": UNKNOWN" in out and "COMPATIBLE" not in out, out
    assert "operator metadata (state/0/_metadata) is missing" in out, out
    assert f"'barrierflow upgrade {path} --to {path} --assume-compatible'" in err, err
    code, out, _ = cli("upgrade", str(path), "--to", str(path), "--dry-run", "--json")
    assert code == 2 and json.loads(out)["verdict"] == "unknown", out
    code, out, _ = cli("upgrade", str(path), "--to", str(path), "--dry-run", "--assume-compatible")
    assert code == 0 and "assumed compatible on your word" in out, out
    code, out, _ = cli("upgrade", str(path), "--to", str(changed), "--dry-run", "--assume-compatible")
    assert code == 1 and "window changed: 10 s -> 20 s" in out, out  # a named change is no unknown

    # the upgrade itself: refused without the user's word, nothing changed; with it, it proceeds
    [stage_of] = open_pipeline(path).stages
    before = stage_of.store.checkpoint_ids()
    code, _, err = cli("upgrade", str(path), "--to", str(path), "--canary-checkpoints", "0")
    assert code == 2 and "is unknown" in err and "--assume-compatible" in err, err
    assert stage_of.store.checkpoint_ids() == before
    code, out, err = cli("upgrade", str(path), "--to", str(path), "--canary-checkpoints", "0", "--assume-compatible")
    assert code == 0, err
    assert "compatibility unknown, assumed on your word" in out, out
    [made] = [c for c in stage_of.store.checkpoint_ids() if c not in before]
    [entry] = [f for f in stage_of.store.get(made).files if f.path == STATE_FINGERPRINT]
    document = json.loads(stage_of.store.objects.get_bytes(shared_key(entry.sha256)))
    assert document["assumed_compatible"]["from_savepoint"] == before[-1], document
    assert [e["operator"] for e in document["stateful_operators"]] == ["EventTimeWatermark", "Aggregate"], document
    # from that savepoint on, the state is compared by the fingerprint
    code, out, _ = cli("upgrade", str(path), "--to", str(changed), "--dry-run", "--json")
    assert [s["basis"] for s in json.loads(out)["stages"]] == ["fingerprint"], out
