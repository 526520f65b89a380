"""The Checkpoints app in-process (FastAPI TestClient): page, JSON API, reports, and that every
route refuses requests without an Airflow session (the real check, no Airflow server needed
for the refusal; the signed-in path is covered by test_checkpoints_page_in_airflow.py)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.ui import create_app
from barrierflow.ui.exceptions import NotAuthorizedError
from barrierflow.ui.store_reader import barrier_batch_ms
from barrierflow.upgrade.record import RECORD_KEY, UpgradeRecord, UpgradeStep, history_key, write_record
from fastapi import Request
from fastapi.testclient import TestClient

from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory

ROUTES = ("/", "/?pipeline=t", "/api/pipelines", "/api/pipelines/t", "/api/pipelines/t/checkpoints/1/verification",
          "/pipelines/t/verification", "/pipelines/t/checkpoints/1/verification",
          "/pipelines/t/reports/skew-latest.json")


class CellReader(HTMLParser):
    """``{checkpoint id: {field: data-value}}`` of the page's checkpoint table: the cut's row and
    its stages' rows (one stage: its checkpoint's values) read into one."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, dict[str, str]] = {}
        self._row: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "tr" and attr.get("data-checkpoint-id"):
            self._row = self.rows.setdefault(int(attr["data-checkpoint-id"] or 0), {})
        elif tag == "td" and self._row is not None and attr.get("data-field"):
            self._row[attr["data-field"] or ""] = attr.get("data-value") or ""


def read_cells(page: str) -> dict[int, dict[str, str]]:
    reader = CellReader()
    reader.feed(page)
    return reader.rows


class TableReader(HTMLParser):
    """``{row key: {field: data-value}}`` of the rows of one table, keyed by the attribute ``key``
    of their ``tr`` (``data-savepoint-id``, ``data-from``)."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.rows: dict[str, dict[str, str]] = {}
        self._row: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "tr":
            key = attr.get(self.key)
            self._row = self.rows.setdefault(key, {}) if key else None
        elif tag == "td" and self._row is not None and attr.get("data-field"):
            self._row[attr["data-field"] or ""] = attr.get("data-value") or ""


def read_rows(page: str, key: str) -> dict[str, dict[str, str]]:
    reader = TableReader(key)
    reader.feed(page)
    return reader.rows


async def signed_in_as_tester(request: Request) -> str:
    return "tester"


@pytest.fixture
def factory(tmp_path: Path) -> CheckpointFactory:
    factory = CheckpointFactory(tmp_path)
    factory.take(3)
    return factory


@pytest.fixture
def pipelines_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write_spec(folder, spec_dict(tmp_path), "t.yaml")
    (folder / "broken.yaml").write_text("version: 1\nname: [", encoding="utf-8")
    return folder


def test_page_and_api_show_the_manifests(factory: CheckpointFactory, pipelines_dir: Path) -> None:
    client = TestClient(create_app(str(pipelines_dir), authenticate=signed_in_as_tester))
    manifests = {m.checkpoint_id: m for m in factory.store.completed()}
    # The run stores each checkpoint's freshness beside it once its sinks committed; here for 2 only.
    factory.store.put_freshness(2, {"out": {"seconds": 1.25}, "audit": {"seconds": 0.5}})

    page = client.get("/")
    assert page.status_code == 200, page.text
    cells = read_cells(page.text)
    assert sorted(cells) == [1, 2, 3]
    for cid, manifest in manifests.items():
        row = cells[cid]
        assert row["status"] == "COMPLETED"
        assert row["barrier_batch"] == str(manifest.spark_batch_id)
        assert row["trigger_time"] == manifest.trigger_time.isoformat()
        assert row["completion_time"] == manifest.completion_time.isoformat()
        assert float(row["sync_ms"]) == manifest.sync_ms and float(row["async_ms"]) == manifest.async_ms
        assert float(row["barrier_batch_ms"]) == barrier_batch_ms(manifest)
        assert int(row["full_bytes"]) == manifest.full_bytes
        assert int(row["incremental_bytes"]) == manifest.incremental_bytes
        assert row["verification"] == "not verified"
        assert row["freshness"] == ("audit=0.5;out=1.25" if cid == 2 else "")
    assert "audit 0.50; out 1.25" in page.text and "freshness s (per sink)" in page.text
    assert "id='history-plot'" in page.text and "data:image/svg+xml;base64," in page.text
    assert "broken.yaml does not load" in page.text
    assert "id='no-savepoints'" in page.text and "id='no-upgrades'" in page.text
    assert "http://" not in page.text.replace("http://www.w3.org", "")  # no internet resources

    api = client.get("/api/pipelines/t").json()
    assert [c["checkpoint_id"] for c in api["checkpoints"]] == [3, 2, 1]
    assert api["checkpoints"][0]["stages"]["t"]["full_bytes"] == manifests[3].full_bytes
    assert api["checkpoints"][1]["stages"]["t"]["freshness_seconds"] == {"out": 1.25, "audit": 0.5}
    assert api["checkpoints"][0]["stages"]["t"]["freshness_seconds"] == {}
    assert api["noun"] == "checkpoint" and api["stages"] == ["t"]
    assert (api["savepoints"], api["upgrades"], api["upgrade_problems"]) == ([], [], [])
    assert "Recent checkpoints (newest first; one row per stage under each)" in page.text
    listing = client.get("/api/pipelines").json()["pipelines"]
    assert {p["name"]: p["error"] is None for p in listing} == {"t": True, "broken": False}


def test_report_links_appear_with_the_reports(factory: CheckpointFactory, pipelines_dir: Path) -> None:
    client = TestClient(create_app(str(pipelines_dir), authenticate=signed_in_as_tester))
    assert "quality" not in client.get("/").text.lower()
    skew = {"generated": "2026-03-01T12:00:00+00:00", "settings": {"max_skew_seconds": 60.0},
            "checkpoints": [{"checkpoint_id": c, "skew_seconds": 1.0 + c, "max_lag_seconds": 3.0} for c in (1, 2, 3)]}
    factory.objects.put_bytes("reports/skew-latest.json", json.dumps(skew).encode())
    factory.objects.put_bytes("reports/quality-latest.json", b'{"passed": true}')

    page = client.get("/").text
    assert "href='/pipelines/t/reports/skew-latest.json'" in page
    assert "href='/pipelines/t/reports/quality-latest.json'" in page
    assert "id='skew-plot'" in page
    served = client.get("/pipelines/t/reports/skew-latest.json")
    assert served.status_code == 200 and served.json() == skew
    # The stream-vs-batch comparison's report stored under its name before the rename is linked and served.
    factory.objects.put_bytes("reports/reconciliation-latest.json", b'{"passed": true}')
    assert "href='/pipelines/t/reports/reconciliation-latest.json'" in client.get("/").text
    assert client.get("/pipelines/t/reports/reconciliation-latest.json").json() == {"passed": True}
    assert client.get("/pipelines/t/reports/../_pipeline.json").status_code == 404
    assert client.get("/pipelines/t/reports/nothing.json").status_code == 404
    assert client.get("/api/pipelines/nope").status_code == 404


def test_verification_results_are_linked_and_served(factory: CheckpointFactory, pipelines_dir: Path) -> None:
    from tests.ui.test_history import _verify

    _verify(factory, 2, passed=False)
    client = TestClient(create_app(str(pipelines_dir), authenticate=signed_in_as_tester))
    page = client.get("/").text
    assert read_cells(page)[2]["verification"] == "failed"
    assert "href='/pipelines/t/checkpoints/2/verification'" in page
    assert "sha256 differs" in client.get("/pipelines/t/checkpoints/2/verification").text
    assert client.get("/api/pipelines/t/checkpoints/2/verification").json()["stages"]["t"]["passed"] is False
    assert client.get("/api/pipelines/t/checkpoints/1/verification").status_code == 404


def _record(**changes: object) -> UpgradeRecord:
    fields: dict[str, object] = {"pipeline": "t", "spec": "t.yaml", "new_spec": "t-new.yaml",
                                 "new_spec_sha256": "0" * 64, "step": UpgradeStep.REPORT, "source_savepoint": 2,
                                 "savepoint": 2}
    return UpgradeRecord.model_validate({**fields, **changes})


def test_page_and_api_list_savepoints_and_every_recorded_upgrade(factory: CheckpointFactory,
                                                                pipelines_dir: Path) -> None:
    client = TestClient(create_app(str(pipelines_dir), authenticate=signed_in_as_tester))
    promoted = factory.store.promote(2, CheckpointKind.SAVEPOINT)
    first = write_record(factory.objects, _record(savepoint=4, rescaled={"t": [4, 8]}, verified=[5],
                                                  canary_checkpoints=2),
                         UpgradeStep.ROLLED_BACK, failure="sink_counts: 3 rows missing", attempt=2)
    second = write_record(factory.objects, _record(new_spec="t-v2.yaml", new_spec_sha256="1" * 64),
                          UpgradeStep.CANARY_PASSED, verified=[6, 7])  # S itself restored, passed

    page = client.get("/").text
    savepoints = read_rows(page, "data-savepoint-id")
    assert list(savepoints) == ["2"]
    assert savepoints["2"]["completion_time"] == promoted.completion_time.isoformat()
    assert savepoints["2"]["barrier_batches"] == f"t {promoted.spark_batch_id}"
    assert read_cells(page)[2]["kind"] == "savepoint" and read_cells(page)[3]["kind"] == "checkpoint"
    upgrades = read_rows(page, "data-upgrade")
    assert list(upgrades) == [history_key(second), history_key(first)]  # newest first, one row per upgrade
    newer, older = upgrades.values()
    assert (older["from_savepoint"], older["to_savepoint"], older["new_spec"]) == ("2", "4", "t-new.yaml")
    assert (older["verdict"], older["rescale"], older["step"]) == ("needs rewrite", "t 4 -> 8", "rolled-back")
    assert older["failure"] == "sink_counts: 3 rows missing" and older["canary_verified"] == "5"
    assert (older["started"], older["updated"]) == (first.started.isoformat(), first.updated.isoformat())
    assert (newer["from_savepoint"], newer["to_savepoint"], newer["new_spec"]) == ("2", "2", "t-v2.yaml")
    assert (newer["new_spec_sha256"], newer["verdict"], newer["rescale"]) == ("1" * 64, "compatible", "")
    assert (newer["step"], newer["canary_verified"]) == ("canary-passed", "6, 7")

    api = client.get("/api/pipelines/t").json()
    assert [s["checkpoint_id"] for s in api["savepoints"]] == [2] and api["upgrade_problems"] == []
    assert [(u["source_savepoint"], u["savepoint"], u["verdict"], u["step"], u["in_progress"])
            for u in api["upgrades"]] == [(2, 2, "compatible", "canary-passed", False),
                                          (2, 4, "needs rewrite", "rolled-back", False)]
    assert api["upgrades"][1]["rescaled"] == {"t": [4, 8]} and api["upgrades"][1]["key"] == history_key(first)

    running = write_record(factory.objects, _record(source_savepoint=3, savepoint=3), UpgradeStep.CANARY_RUNNING)
    listed = client.get("/api/pipelines/t").json()["upgrades"]
    assert [(u["source_savepoint"], u["step"], u["in_progress"]) for u in listed] == [
        (3, "canary-running", True), (2, "canary-passed", False), (2, "rolled-back", False)]
    row = read_rows(client.get("/").text, "data-upgrade")[RECORD_KEY]
    assert (row["step"], row["started"]) == ("canary-running", running.started.isoformat())
    assert "canary-running (in progress)" in client.get("/").text


def test_an_unreadable_upgrade_record_is_said_not_raised(factory: CheckpointFactory, pipelines_dir: Path) -> None:
    factory.objects.put_bytes(RECORD_KEY, b"{not json")
    client = TestClient(create_app(str(pipelines_dir), authenticate=signed_in_as_tester))
    page = client.get("/")
    assert page.status_code == 200, page.text
    assert "id='upgrade-problems'" in page.text and "_upgrade.json in the checkpoint store does not parse" in page.text
    assert sorted(read_cells(page.text)) == [1, 2, 3] and read_rows(page.text, "data-upgrade") == {}
    kept = write_record(factory.objects, _record(), UpgradeStep.CANARY_PASSED)
    factory.objects.put_bytes(RECORD_KEY, b'{"pipeline": "t"}')  # JSON, but no upgrade record
    api = client.get("/api/pipelines/t").json()
    [problem] = api["upgrade_problems"]
    assert problem["key"] == RECORD_KEY and "does not parse" in problem["problem"]
    assert [u["key"] for u in api["upgrades"]] == [history_key(kept)]  # the kept one is still shown
    assert list(read_rows(client.get("/").text, "data-upgrade")) == [history_key(kept)]


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_answers_401_without_an_airflow_session(pipelines_dir: Path, route: str) -> None:
    client = TestClient(create_app(str(pipelines_dir)))  # the real Airflow session check
    response = client.get(route)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "not signed in" in response.text


def test_a_user_who_may_not_read_dags_gets_403(pipelines_dir: Path) -> None:
    async def refused(request: Request) -> str:
        raise NotAuthorizedError("Airflow user 'viewer' may not read DAGs")

    client = TestClient(create_app(str(pipelines_dir), authenticate=refused))
    assert client.get("/api/pipelines").status_code == 403
    assert client.get("/").status_code == 403


def test_only_get_exists(pipelines_dir: Path) -> None:
    client = TestClient(create_app(str(pipelines_dir), authenticate=signed_in_as_tester))
    assert client.post("/api/pipelines/t").status_code == 405
