"""The kept history of a pipeline's upgrades (barrierflow.upgrade.record): every finished
upgrade is kept as its own object under ``_upgrades/``, and readers list them all, newest first,
the current unfinished one first. Records are written directly (through ``write_record``, as
``barrierflow upgrade`` writes them) into a local store: the upgrade's own steps are tested in
tests/state/test_upgrade_canary.py and test_staged_upgrade.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.storage.local import LocalObjectStore
from barrierflow.upgrade.record import (
    HISTORY_PREFIX,
    RECORD_KEY,
    UpgradeInProgressError,
    UpgradeRecord,
    UpgradeStep,
    history_key,
    read_record,
    recorded_upgrades,
    refuse_unfinished,
    write_record,
)


def new_upgrade(source: int, savepoint: int, digest: str = "a") -> UpgradeRecord:
    """An upgrade as ``barrierflow upgrade`` starts it (not yet recorded)."""
    return UpgradeRecord(pipeline="t", spec="t.yaml", new_spec=f"t-{digest}.yaml", new_spec_sha256=digest * 64,
                         step=UpgradeStep.REPORT, source_savepoint=source, savepoint=savepoint)


def run_through(objects: LocalObjectStore, record: UpgradeRecord, *steps: UpgradeStep) -> UpgradeRecord:
    for step in (UpgradeStep.REPORT, *steps):
        record = write_record(objects, record, step)
    return record


def test_two_finished_upgrades_are_two_entries_newest_first(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    first = run_through(objects, new_upgrade(2, 4).model_copy(update={"rescaled": {"t": [4, 8]}}),
                        UpgradeStep.REWRITTEN, UpgradeStep.CANARY_RUNNING, UpgradeStep.CANARY_PASSED)
    assert [i.key for i in objects.list(HISTORY_PREFIX)] == [history_key(first)]
    second = run_through(objects, new_upgrade(6, 6, "b"), UpgradeStep.CANARY_RUNNING, UpgradeStep.ROLLING_BACK)
    second = write_record(objects, second, UpgradeStep.ROLLED_BACK, failure="sink_counts: 3 rows missing")

    assert first.started is not None and second.started is not None and first.started < second.started
    assert first.started < first.updated  # started is kept from the first step on
    assert read_record(objects) == second  # _upgrade.json keeps its role: the latest upgrade's record
    assert [i.key for i in objects.list(HISTORY_PREFIX)] == [history_key(first), history_key(second)]
    listed = recorded_upgrades(objects)
    assert [(u.record, u.problem, u.in_progress) for u in listed] == [(second, "", False), (first, "", False)]
    assert [u.as_dict()["verdict"] for u in listed] == ["compatible", "needs rewrite"]
    assert listed[1].as_dict()["key"] == history_key(first) and listed[1].as_dict()["problem"] is None

    # A rerun that repeats the final step (after a crash between the entry's write and
    # _upgrade.json's) rewrites that upgrade's own entry: still one object per upgrade.
    again = write_record(objects, second, UpgradeStep.ROLLED_BACK, attempt=9)
    assert history_key(again) == history_key(second) and len(objects.list(HISTORY_PREFIX)) == 2
    assert [u.record for u in recorded_upgrades(objects)] == [again, first]


def test_an_unfinished_upgrade_is_shown_first_as_in_progress(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    finished = run_through(objects, new_upgrade(2, 2), UpgradeStep.CANARY_RUNNING, UpgradeStep.CANARY_PASSED)
    running = run_through(objects, new_upgrade(5, 7, "c"), UpgradeStep.REWRITTEN, UpgradeStep.CANARY_RUNNING)

    listed = recorded_upgrades(objects)
    assert [(u.record, u.key, u.in_progress) for u in listed] == [
        (running, RECORD_KEY, True), (finished, history_key(finished), False)]
    assert listed[0].as_dict()["in_progress"] is True and listed[0].as_dict()["step"] == "canary-running"
    assert [i.key for i in objects.list(HISTORY_PREFIX)] == [history_key(finished)]  # kept only once final
    with pytest.raises(UpgradeInProgressError, match=r"unfinished upgrade to t-c\.yaml"):
        refuse_unfinished(objects, "t")  # run still refuses, whatever the history holds


def test_an_unreadable_entry_is_a_problem_and_the_others_are_still_shown(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    first = run_through(objects, new_upgrade(2, 2), UpgradeStep.CANARY_RUNNING, UpgradeStep.CANARY_PASSED)
    second = run_through(objects, new_upgrade(3, 3, "b"), UpgradeStep.CANARY_RUNNING, UpgradeStep.CANARY_PASSED)
    objects.put_bytes(history_key(first), b"{not json")

    listed = recorded_upgrades(objects)
    assert [u.record for u in listed] == [second, None]
    assert listed[1].key == history_key(first) and not listed[1].in_progress
    assert f"{history_key(first)} in the checkpoint store does not parse" in listed[1].problem
    assert "the others are" in listed[1].problem

    objects.put_bytes(RECORD_KEY, b'{"pipeline": "t"}')  # JSON, but no upgrade record: said first
    listed = recorded_upgrades(objects)
    assert [(u.key, u.record) for u in listed] == [(RECORD_KEY, None), (history_key(second), second),
                                                    (history_key(first), None)]
    assert f"{RECORD_KEY} in the checkpoint store does not parse" in listed[0].problem


def test_a_finished_record_without_a_kept_entry_is_still_listed(tmp_path: Path) -> None:
    """A record finished before upgrades were kept (no ``started``, no ``_upgrades/`` entry), or
    whose entry was lost, is listed from ``_upgrade.json`` by its time."""
    objects = LocalObjectStore(tmp_path)
    older = run_through(objects, new_upgrade(1, 1), UpgradeStep.CANARY_RUNNING, UpgradeStep.CANARY_PASSED)
    legacy = new_upgrade(4, 4, "d").model_copy(update={"step": UpgradeStep.CANARY_PASSED})
    assert legacy.started is None
    objects.put_bytes(RECORD_KEY, legacy.model_dump_json().encode())

    listed = recorded_upgrades(objects)
    assert [(u.record, u.current) for u in listed] == [(legacy, True), (older, False)]
    assert not listed[0].in_progress and listed[0].as_dict()["started"] is None
