"""Acceptance: the Checkpoints page in a real Airflow, opened in headless Chromium.

1. The demo pipeline (include/pipelines/demo.yaml, its paths moved under tmp_path and its
   generator slowed down) runs for real: ``barrierflow run SPEC --checkpoints 3`` in a
   subprocess, while an Airflow API server (the only component the page needs) starts on a
   free 127.0.0.1 port with the project's plugins folder. Its checkpoints are then verified
   and a skew report stored, as the scheduled DAGs do.
2. Without a session (no cookie, no token, or a forged token) the page and its API answer 401.
3. Logged in (the admin's JWT from Airflow's ``POST /auth/token``, sent as the UI's session
   cookie ``_token``), Chromium renders the page: its table lists every completed checkpoint
   with the values of its manifest, and the JSON API returns the same.
4. Inside Airflow's UI (``/plugin/checkpoints``, Browse -> Checkpoints) the page renders in its
   frame; the screenshot is saved to tmp_path and to ``var/test-artifacts/`` (git-ignored).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml
from barrierflow.airflow.verification import verify_latest_checkpoints
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.skew import skew
from barrierflow.spec import load_spec
from barrierflow.ui import URL_PREFIX, VIEW_ROUTE

from tests.drivers import short_lived_driver_java_options
from tests.support.airflow_server import AirflowServer
from tests.support.browser import HeadlessChromium, find_chromium
from tests.ui.test_app import read_cells

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600), pytest.mark.slow(150)]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts"
CHECKPOINTS = 3


def demo_spec(tmp_path: Path) -> Path:
    """The demo spec with everything under ``tmp_path`` and a gentler generator."""
    data = yaml.safe_load((ROOT / "include" / "pipelines" / "demo.yaml").read_text(encoding="utf-8"))
    data["work_dir"] = str(tmp_path / "work")
    data["sources"][0].update(rows_per_second=200, max_records_per_batch=2000)
    data["sinks"][0]["path"] = f"file://{tmp_path / 'output'}"
    data["checkpoint"].update(storage=f"file://{tmp_path / 'checkpoints'}", interval="1s")
    data["verification"]["expectations"] = str(ROOT / "include" / "expectations" / "demo.json")
    folder = tmp_path / "pipelines"
    folder.mkdir()
    path = folder / "demo.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_checkpoints_page_lists_the_demo_checkpoints_in_airflow(tmp_path: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.fail("no chromium binary on PATH: install it (Debian: apt-get install chromium; `make test` does) "
                    "- this test drives the page in a real browser and is not skipped")
    started = time.monotonic()
    spec_path = demo_spec(tmp_path)
    bin_dir = Path(sys.executable).parent

    # Step 1: the real run and Airflow start side by side.
    run_log = tmp_path / "run.log"
    with open(run_log, "wb") as log:
        run = subprocess.Popen([str(bin_dir / "barrierflow"), "run", str(spec_path), "--checkpoints",
                                str(CHECKPOINTS), "--quiet"], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                               env={**os.environ, "_JAVA_OPTIONS": short_lived_driver_java_options()})
    (tmp_path / "dags").mkdir()
    server = AirflowServer(tmp_path / "airflow", tmp_path / "dags", plugins_folder=ROOT / "plugins",
                           components=("api-server",),
                           env={"BARRIERFLOW_PIPELINES_DIR": str(spec_path.parent), "BARRIERFLOW_HOME": str(tmp_path)})
    try:
        server.start()
        assert run.wait(timeout=300) == 0, run_log.read_text(errors="replace")[-4000:]
        logged = run_log.read_text(errors="replace")
        # A successful run ends with its summary: no traceback of PySpark's accumulator server
        # (EOFError) or of py4j when the driver and its JVM exit.
        assert "Traceback" not in logged and "EOFError" not in logged, logged[-4000:]
        ran = time.monotonic() - started
        verify_latest_checkpoints(spec_path, CHECKPOINTS)
        skew(spec_path).raise_for_failures(str(spec_path))  # stores reports/skew-latest.json
        spec = load_spec(spec_path)
        manifests = {m.checkpoint_id: m for m in CheckpointStore.for_spec(spec).completed()}
        assert len(manifests) >= CHECKPOINTS

        page_url = f"{server.url}{URL_PREFIX}/?pipeline=demo"
        api_url = f"{server.url}{URL_PREFIX}/api/pipelines/demo"

        # Step 2: no session, no page.
        for url in (page_url, api_url, f"{server.url}{URL_PREFIX}/api/pipelines"):
            assert requests.get(url, timeout=30).status_code == 401, url
            forged = requests.get(url, headers={"Authorization": "Bearer not-a-jwt"}, timeout=30)
            assert forged.status_code == 401, (url, forged.text)
            assert requests.get(url, cookies={"_token": "not-a-jwt"}, timeout=30).status_code == 401, url

        # Step 3: logged in, the page and the API show the manifests.
        token = server.token()
        api = requests.get(api_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert api.status_code == 200, api.text
        api_rows = {c["checkpoint_id"]: c for c in api.json()["checkpoints"]}
        with HeadlessChromium(chromium) as browser:
            browser.set_cookie("_token", token, server.url)
            browser.open(page_url)
            cells = read_cells(browser.html())
            assert set(manifests) <= set(cells), (sorted(manifests), sorted(cells))
            for cid, manifest in manifests.items():
                row, api_row = cells[cid], api_rows[cid]  # the page's cut and stage rows, read into one
                [api_stage] = api_row["stages"].values()  # one stage: its checkpoint is the cut
                assert row["status"] == api_row["status"] == "COMPLETED"
                assert row["kind"] == manifest.kind.value == api_stage["kind"]
                assert row["barrier_batch"] == str(manifest.spark_batch_id) == str(api_stage["barrier_batch"])
                assert row["trigger_time"] == manifest.trigger_time.isoformat() == api_row["trigger_time"]
                assert row["completion_time"] == manifest.completion_time.isoformat() == api_row["completion_time"]
                for field in ("sync_ms", "async_ms"):
                    assert float(row[field]) == getattr(manifest, field) == api_stage[field], field
                assert float(row["total_ms"]) == manifest.total_ms == api_row["total_ms"]
                assert float(row["barrier_batch_ms"]) == api_stage["barrier_batch_ms"]
                assert int(row["full_bytes"]) == manifest.full_bytes == api_stage["full_bytes"]
                assert int(row["incremental_bytes"]) == manifest.incremental_bytes == api_stage["incremental_bytes"]
                assert row["verification"] == "passed"
            assert browser.evaluate("document.getElementById('history-plot').naturalWidth > 0")
            assert browser.evaluate("document.getElementById('skew-plot').naturalWidth > 0")
            assert browser.evaluate("[...document.links].some(a => a.href.endsWith('/reports/skew-latest.json'))")

            # Step 4: inside Airflow's UI, under Browse.
            plugins = requests.get(f"{server.url}/api/v2/plugins", headers={"Authorization": f"Bearer {token}"},
                                   timeout=30).json()["plugins"]
            views = [v for p in plugins for v in p["external_views"]]
            assert any(v["url_route"] == VIEW_ROUTE and v["category"] == "browse" for v in views), views
            browser.open(f"{server.url}/plugin/{VIEW_ROUTE}")
            shown = browser.wait_for(
                "(() => { const f = document.querySelector('iframe');"
                " const d = f && f.contentDocument;"
                " return d ? d.querySelectorAll('tr[data-checkpoint-id]').length : 0; })()",
                60, "the Checkpoints page inside Airflow's UI")
            assert shown >= CHECKPOINTS
            browser.wait_for("document.querySelector('iframe').contentDocument.getElementById('history-plot')"
                             ".complete", 30, "the history plot")
            shot = browser.screenshot(tmp_path / "checkpoints-page.png")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, ARTIFACTS / "checkpoints-page.png")
        print(json.dumps({"run_and_airflow_start_s": round(ran, 1), "total_s": round(time.monotonic() - started, 1),
                          "screenshot": str(ARTIFACTS / "checkpoints-page.png")}))
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
        server.stop()
