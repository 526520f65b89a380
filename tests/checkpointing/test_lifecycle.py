"""The checkpoint lifecycle's transition table: every allowed move, one illegal per state."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from barrierflow.checkpointing.errors import CheckpointLifecycleError
from barrierflow.checkpointing.lifecycle import ALLOWED, CheckpointState, PendingCheckpoint, ending_for
from barrierflow.checkpointing.manifest import FailureReason

S = CheckpointState
T0 = datetime(2026, 11, 22, tzinfo=UTC)

#: The lifecycle as docs/architecture.md draws it; the table must say exactly this.
EXPECTED = {
    S.TRIGGERED: {S.BARRIER_SEEN, S.SUBSUMED, S.FAILED, S.EXPIRED},
    S.BARRIER_SEEN: {S.SNAPSHOTTED, S.FAILED, S.EXPIRED},
    S.SNAPSHOTTED: {S.UPLOADING, S.FAILED, S.EXPIRED},
    S.UPLOADING: {S.PRECOMMITTING, S.FAILED, S.EXPIRED},
    S.PRECOMMITTING: {S.COMPLETED, S.FAILED, S.EXPIRED},
    S.COMPLETED: set(),
    S.FAILED: set(),
    S.EXPIRED: set(),
    S.SUBSUMED: set(),
}
#: for every state, one move the table forbids
ILLEGAL = {
    S.TRIGGERED: S.SNAPSHOTTED,  # no snapshot before the barrier batch was committed
    S.BARRIER_SEEN: S.UPLOADING,  # no upload before the synchronous phase
    S.SNAPSHOTTED: S.COMPLETED,  # no completion without storing the files
    S.UPLOADING: S.COMPLETED,  # no completion before the sinks pre-committed
    S.PRECOMMITTING: S.SUBSUMED,  # only a barrier that never arrived is subsumed
    S.COMPLETED: S.FAILED,  # final
    S.FAILED: S.TRIGGERED,  # final
    S.EXPIRED: S.COMPLETED,  # final
    S.SUBSUMED: S.BARRIER_SEEN,  # final
}


def _at(state: CheckpointState) -> PendingCheckpoint:
    pending = PendingCheckpoint(7, T0, 0.0)
    pending.state = state
    return pending


def test_the_table_is_the_documented_lifecycle() -> None:
    assert {state: set(targets) for state, targets in ALLOWED.items()} == EXPECTED
    assert {s for s in S if s.final} == {S.COMPLETED, S.FAILED, S.EXPIRED, S.SUBSUMED}


@pytest.mark.parametrize(("source", "target"), [(s, t) for s, ts in EXPECTED.items() for t in sorted(ts, key=str)],
                         ids=lambda s: s.value)
def test_every_allowed_transition(source: CheckpointState, target: CheckpointState) -> None:
    pending = _at(source)
    pending.transition(target)
    assert pending.state is target


@pytest.mark.parametrize(("source", "target"), list(ILLEGAL.items()), ids=lambda s: s.value)
def test_one_illegal_transition_per_state(source: CheckpointState, target: CheckpointState) -> None:
    assert target not in EXPECTED[source]
    pending = _at(source)
    with pytest.raises(CheckpointLifecycleError) as info:
        pending.transition(target)
    assert pending.state is source  # unchanged
    assert info.value.checkpoint_id == 7 and info.value.current is source and info.value.target is target
    assert f"from {source.value} to {target.value}" in str(info.value)


def test_the_asynchronous_phase_leaves_an_ended_checkpoint_alone() -> None:
    expired = _at(S.EXPIRED)  # the tick thread expired it while the upload ran
    assert expired.advance(S.PRECOMMITTING) is False and expired.state is S.EXPIRED
    running = _at(S.UPLOADING)
    assert running.advance(S.PRECOMMITTING) is True and running.state is S.PRECOMMITTING
    with pytest.raises(CheckpointLifecycleError):
        _at(S.SNAPSHOTTED).advance(S.PRECOMMITTING)  # skipping UPLOADING is still illegal


def test_failure_reasons_end_in_their_state() -> None:
    assert ending_for(FailureReason.EXPIRED) is S.EXPIRED
    assert ending_for(FailureReason.EXPIRED, subsumed=True) is S.SUBSUMED
    for reason in set(FailureReason) - {FailureReason.EXPIRED}:
        assert ending_for(reason) is S.FAILED
