"""The Checkpoints page's data layer (and page, in-process) on a multi-stage store written by
hand, no Spark and no broker: stage manifests from CheckpointFactory in ``stages/<stage>/``,
stage ``b``'s given an alignment with channel state (one range on a back-edge), global
manifests and a global failure through GlobalCheckpointStore, stage verification results
stored beside the stage checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest, GlobalTrigger
from barrierflow.checkpointing.global_store import GlobalCheckpointStore, stage_snapshot
from barrierflow.checkpointing.manifest import AlignmentSummary, ChannelStateEntry, CheckpointKind, Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.spec.loader import load_any_spec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.ui import create_app
from barrierflow.ui.history import Verdict, cut_history, history_of, list_pipelines
from barrierflow.verification.report import CheckResult, VerificationReport, store_report
from fastapi.testclient import TestClient

from tests.pipeline_specs import write_spec
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import two_stage_spec
from tests.ui.test_app import signed_in_as_tester

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class GlobalTableReader(HTMLParser):
    """``{cut id: {field: data-value}}`` and ``{(cut id, stage): {field: data-value}}`` of the
    page's ``#checkpoints`` table (rows ``tr.cut`` and ``tr.stage``)."""

    def __init__(self) -> None:
        super().__init__()
        self.globals: dict[int, dict[str, str]] = {}
        self.stages: dict[tuple[int, str], dict[str, str]] = {}
        self.stage_order: list[tuple[int, str]] = []
        self._row: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "tr" and attr.get("data-checkpoint-id"):
            cid = int(attr["data-checkpoint-id"] or 0)
            if attr.get("data-stage"):
                key = (cid, attr["data-stage"] or "")
                self.stage_order.append(key)
                self._row = self.stages.setdefault(key, {})
            else:
                self._row = self.globals.setdefault(cid, {})
        elif tag == "tr":
            self._row = None
        elif tag == "td" and self._row is not None and attr.get("data-field"):
            self._row[attr["data-field"] or ""] = attr.get("data-value") or ""


def read_global_table(page: str) -> GlobalTableReader:
    reader = GlobalTableReader()
    reader.feed(page)
    return reader


def _report(pipeline: str, cid: int, passed: bool) -> VerificationReport:
    check = CheckResult.ok("files", "3 files present") if passed else CheckResult.fail("files", "1.delta missing")
    return VerificationReport(pipeline=pipeline, checkpoint_id=cid, deep=False, started=T0,
                              finished=T0 + timedelta(seconds=1), checks=[check])


@pytest.fixture
def staged(tmp_path: Path) -> tuple[Path, dict[str, dict[int, Manifest]]]:
    """A two-stage spec (``two``: a -> channel ab -> b) and its store: global checkpoints 1
    and 2 completed (stage b's 1 failed verification, both stages' 2 passed), 3 failed with
    only stage a's manifest written. Returns the spec file and the stage manifests."""
    from tests.verification.checkpoint_factory import CheckpointFactory

    data = two_stage_spec(tmp_path, KafkaEndpoint("unused", True), mode="unaligned")
    data["channels"][0]["bootstrap"] = "embedded"
    folder = tmp_path / "pipelines"
    folder.mkdir()
    spec_path = write_spec(folder, data, "two.yaml")
    root = tmp_path / "chk"
    a = CheckpointFactory(tmp_path / "fa", objects=LocalObjectStore(root / "stages" / "a"), pipeline="two-a")
    b = CheckpointFactory(tmp_path / "fb", objects=LocalObjectStore(root / "stages" / "b"), pipeline="two-b")
    manifests: dict[str, dict[int, Manifest]] = {"a": {m.checkpoint_id: m for m in a.take(3)}, "b": {}}
    for m in b.take(2):
        cid = m.checkpoint_id
        ranges = [ChannelStateEntry(partition="ab:0", start=10 * cid, end=10 * cid + 4, records=3),
                  ChannelStateEntry(partition="ba:1", start=5, end=5 + cid, records=cid, back_edge=True)]
        aligned = m.model_copy(update={"alignment": AlignmentSummary(
            mode="unaligned", alignment_ms=1.5 * cid, barrier_offsets={"ab:0": 10 * cid + 4, "ab:1": 7 * cid},
            channel_state=ranges, channel_state_records=3 + cid)})
        b.objects.put_bytes(manifest_key(cid), aligned.model_dump_json(indent=2).encode())
        manifests["b"][cid] = aligned
    cuts = GlobalCheckpointStore(LocalObjectStore(root), "two")
    for cid in (1, 2):
        cuts.write_manifest(GlobalManifest(
            pipeline="two", checkpoint_id=cid, attempt=0, trigger_time=T0 + timedelta(seconds=cid),
            completion_time=T0 + timedelta(seconds=cid, milliseconds=400), total_ms=400.0 + cid,
            stages={s: stage_snapshot(f"stages/{s}/", manifests[s][cid]) for s in ("a", "b")}))
    cuts.record_trigger(GlobalTrigger(pipeline="two", checkpoint_id=3, attempt=0,
                                      trigger_time=T0 + timedelta(seconds=3)))
    cuts.record_failure(GlobalFailure(pipeline="two", checkpoint_id=3, reason="EXPIRED", message="b never answered",
                                      failure_time=T0 + timedelta(seconds=9)))
    store_report(b.objects, _report("two-b", 1, passed=False))
    store_report(a.objects, _report("two-a", 1, passed=True))
    store_report(a.objects, _report("two-a", 2, passed=True))
    store_report(b.objects, _report("two-b", 2, passed=True))
    return spec_path, manifests


def test_global_rows_carry_each_stages_alignment_and_channel_state(
        staged: tuple[Path, dict[str, dict[int, Manifest]]]) -> None:
    spec_path, manifests = staged
    history = cut_history(spec_path, load_any_spec(spec_path))

    assert history.stages == ("a", "b") and history.noun == "global checkpoint"
    assert (history.total_completed, history.total_failed, history.shown) == (2, 1, 3)
    assert [g.checkpoint_id for g in history.rows] == [3, 2, 1]
    failed, second, first = history.rows
    assert failed.status == "FAILED" and failed.failure_reason == "EXPIRED" and failed.total_ms is None
    assert failed.trigger_time == T0 + timedelta(seconds=3) and failed.failure_message == "b never answered"
    assert [(s.stage, s.present) for s in failed.stages] == [("a", True), ("b", False)]
    assert failed.stages[1].alignment_ms is None and failed.stages[1].channel_state_records is None
    for row in (second, first):
        cid = row.checkpoint_id
        assert row.status == "COMPLETED" and row.attempt == 0 and row.total_ms == 400.0 + cid
        assert row.trigger_time == T0 + timedelta(seconds=cid)
        a, b = row.stages
        assert (a.stage, a.mode, a.alignment_ms, a.channel_state_records) == ("a", None, None, 0)
        assert a.back_edge_ranges == []
        alignment = manifests["b"][cid].alignment
        assert alignment is not None
        assert (b.stage, b.mode, b.alignment_ms) == ("b", "unaligned", alignment.alignment_ms)
        assert b.channel_state_records == alignment.channel_state_records
        assert b.barrier_batch == manifests["b"][cid].spark_batch_id and b.sync_ms == manifests["b"][cid].sync_ms
        assert (b.kind, b.full_bytes) == (manifests["b"][cid].kind.value, manifests["b"][cid].full_bytes)
        assert [(r.partition, r.start, r.end, r.records) for r in b.back_edge_ranges] == [
            (e.partition, e.start, e.end, e.records) for e in alignment.channel_state if e.back_edge]
    assert second.verification.verdict is Verdict.PASSED
    assert first.verification.verdict is Verdict.FAILED and "1.delta missing" in first.verification.reason
    assert [s.verification.verdict for s in first.stages] == [Verdict.PASSED, Verdict.FAILED]
    assert failed.verification.verdict is Verdict.NOT_VERIFIED

    document = history.as_dict()
    assert document["stages"] == ["a", "b"] and document["noun"] == "global checkpoint"
    assert document["checkpoints"][1]["stages"]["b"]["back_edge_ranges"] == [
        {"partition": "ba:1", "start": 5, "end": 7, "records": 2}]
    assert history_of(list_pipelines(str(spec_path.parent))[0], limit=1).shown == 1
    assert (history.savepoints, document["upgrades"], document["upgrade_problems"]) == ([], [], [])

    # A cut is a savepoint when every stage's manifest is one; no upgrade record: none shown.
    chk = spec_path.parent.parent / "chk"
    stores = {s: CheckpointStore(LocalObjectStore(chk / "stages" / s), f"two-{s}") for s in ("a", "b")}
    promoted = {s: store.promote(2, CheckpointKind.SAVEPOINT) for s, store in stores.items()}
    stores["a"].promote(1, CheckpointKind.SAVEPOINT)  # stage b's 1 stays a checkpoint
    history = cut_history(spec_path, load_any_spec(spec_path))
    [savepoint] = history.savepoints
    assert savepoint.checkpoint_id == 2 and savepoint.attempt == promoted["a"].attempt
    assert savepoint.barrier_batches == {s: m.spark_batch_id for s, m in promoted.items()}
    assert savepoint.completion_time == max(m.completion_time for m in promoted.values())
    assert [s.kind for s in history.rows[1].stages] == ["savepoint", "savepoint"]
    assert history.upgrades == []
    assert [s["checkpoint_id"] for s in history.as_dict()["savepoints"]] == [2]


def test_the_page_and_api_show_a_multi_stage_pipeline(staged: tuple[Path, dict[str, dict[int, Manifest]]]) -> None:
    spec_path, manifests = staged
    client = TestClient(create_app(str(spec_path.parent), authenticate=signed_in_as_tester))

    page = client.get("/?pipeline=two")
    assert page.status_code == 200, page.text
    table = read_global_table(page.text)
    assert sorted(table.globals) == [1, 2, 3] and "no checkpoints yet" not in page.text
    assert table.stage_order == [(3, "a"), (3, "b"), (2, "a"), (2, "b"), (1, "a"), (1, "b")]
    assert table.globals[2]["status"] == "COMPLETED" and table.globals[3]["status"] == "FAILED"
    assert (table.globals[2]["verification"], table.globals[1]["verification"]) == ("passed", "failed")
    b2 = table.stages[(2, "b")]
    alignment = manifests["b"][2].alignment
    assert alignment is not None
    assert float(b2["alignment_ms"]) == alignment.alignment_ms
    assert int(b2["channel_state_records"]) == alignment.channel_state_records
    assert b2["back_edge_ranges"] == "ba:1 [5, 7) 2" and b2["mode"] == "unaligned"
    assert "href='/pipelines/two/checkpoints/1/verification'" in page.text
    assert "id='no-savepoints'" in page.text and "id='no-upgrades'" in page.text

    api = client.get("/api/pipelines/two").json()
    assert [g["checkpoint_id"] for g in api["checkpoints"]] == [3, 2, 1]
    verification = client.get("/api/pipelines/two/checkpoints/1/verification").json()
    assert verification["stages"]["b"]["passed"] is False and verification["stages"]["a"]["passed"] is True
    assert "1.delta missing" in client.get("/pipelines/two/checkpoints/1/verification").text
    assert client.get("/api/pipelines/two/checkpoints/3/verification").status_code == 404
    assert "1.delta missing" in client.get("/pipelines/two/verification").text
