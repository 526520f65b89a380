"""The watermark-skew report on a real checkpoint store (no Spark): exact skew, lag and
offsets advanced, idle and unknown partitions, Great Expectations limits, CLI and HTML."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.errors import SpecError, UserInputError
from barrierflow.reports.skew import (
    NO_CHECKPOINTS,
    SKEW_REPORT_KEY,
    SkewExpectationError,
    build_skew_report,
    raise_for_failures,
    render_skew_html,
    skew_report,
)
from barrierflow.spec import load_spec
from barrierflow.spec.models import ReportsSpec

from tests.pipeline_specs import make_spec, spec_dict, write_spec
from tests.reports.skew_store import T0, completion, healthy_store, rewrite
from tests.verification.checkpoint_factory import CheckpointFactory


def test_skew_lag_and_advanced_are_exact(tmp_path: Path) -> None:
    factory = healthy_store(tmp_path)
    report = build_skew_report(make_spec(tmp_path), factory.store)

    assert [c.checkpoint_id for c in report.checkpoints] == [1, 2, 3, 4]
    for c in report.checkpoints:
        assert c.skew_seconds == 3.0 and c.max_lag_seconds == 5.0
        assert c.completion_time == completion(c.checkpoint_id)
        points = {p.name: p for p in c.partitions}
        assert list(points) == ["events/0", "events/1", "events/2"]
        assert points["events/0"].lag_seconds == 2.0 and points["events/1"].lag_seconds == 5.0
        assert points["events/0"].max_event_time == completion(c.checkpoint_id) - timedelta(seconds=2)
        assert points["events/0"].offset == 10 * c.checkpoint_id
        expected = None if c.checkpoint_id == 1 else 10  # the first has no previous checkpoint
        assert points["events/0"].advanced == expected and points["events/1"].advanced == expected
    assert report.checks and report.passed


def test_idle_partition_detected_over_the_last_k_checkpoints(tmp_path: Path) -> None:
    factory = healthy_store(tmp_path)
    spec = make_spec(tmp_path)
    # events/2 stays at offset 7 from checkpoint 1 on: no advance in 2, 3 and 4 (K=3 default).
    assert build_skew_report(spec, factory.store).idle_partitions == ["events/2"]
    # Over the last 4 checkpoints its advance at checkpoint 1 is unknown: not idle.
    k4 = make_spec(tmp_path, reports={"idle_checkpoints": 4, "max_skew": None})
    assert build_skew_report(k4, factory.store).idle_partitions == []
    # A partition that advances again is no longer idle.
    newest = factory.store.get(4)
    rewrite(factory, newest, {"0": 40, "1": 40, "2": 8}, dict(newest.max_event_time["events"]),
            newest.completion_time)
    assert build_skew_report(spec, factory.store).idle_partitions == []


def test_unknown_event_times_are_reported_not_dropped(tmp_path: Path) -> None:
    factory = healthy_store(tmp_path)
    report = build_skew_report(make_spec(tmp_path), factory.store)

    assert report.unknown_event_time_partitions == ["events/2"]
    assert all(c.unknown_event_time == ["events/2"] for c in report.checkpoints)
    doc = report.as_dict()
    newest = {p["partition"]: p for p in doc["checkpoints"][-1]["partitions"]}
    assert newest["events/2"] == {"partition": "events/2", "source": "events", "offset": 7, "advanced": 0,
                                  "max_event_time": None, "lag_seconds": None, "watermark": None, "idle": False,
                                  "paused": False, "pauses": 0, "paused_seconds": 0.0}
    assert "unknown event time: events/2" in doc["message"]


def test_all_unknown_event_times_like_kafka_today(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(2)  # the factory records no event times, as a Kafka source does today
    report = build_skew_report(make_spec(tmp_path, reports={"max_lag": "1h"}), factory.store)

    assert report.unknown_event_time_partitions == ["events/0", "events/1"]
    assert all(c.skew_seconds is None and c.max_lag_seconds is None for c in report.checkpoints)
    assert report.passed  # unknown values are reported, not checked
    assert [c.name for c in report.checks] == ["skew", "lag"]
    assert "0 checkpoints with a known value (2 unknown)" in report.checks[0].message


def test_expectations_fail_naming_checkpoint_and_value(tmp_path: Path) -> None:
    factory = healthy_store(tmp_path, skewed={3: 125.0})
    report = build_skew_report(make_spec(tmp_path), factory.store)

    assert [c.skew_seconds for c in report.checkpoints] == [3.0, 3.0, 123.0, 3.0]
    assert not report.passed
    assert [(c.name, c.message) for c in report.failures] == [("skew", "checkpoint 3: skew 123s > max_skew 60s")]
    with pytest.raises(SkewExpectationError, match=r"checkpoint 3: skew 123s > max_skew 60s") as info:
        raise_for_failures(report, "t.yaml")
    assert info.value.summary["failures"] == ["checkpoint 3: skew 123s > max_skew 60s"]
    assert info.value.summary["passed"] is False


def test_lag_limit_from_the_spec(tmp_path: Path) -> None:
    factory = healthy_store(tmp_path, count=2)
    report = build_skew_report(make_spec(tmp_path, reports={"max_lag": "4s", "max_skew": "1 minute"}),
                               factory.store)
    assert report.settings.max_lag == 4.0 and report.settings.max_skew == 60.0
    lag = next(c for c in report.checks if c.name == "lag")
    assert not lag.passed
    assert lag.message == "checkpoint 1: lag 5s > max_lag 4s; checkpoint 2: lag 5s > max_lag 4s"
    assert next(c for c in report.checks if c.name == "skew").passed


def test_last_n_and_no_checkpoints(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    empty = build_skew_report(spec, CheckpointStore.for_spec(spec))
    assert empty.checkpoints == [] and empty.passed and empty.message == NO_CHECKPOINTS

    factory = healthy_store(tmp_path)
    last = build_skew_report(spec, factory.store, last=2)
    assert [c.checkpoint_id for c in last.checkpoints] == [3, 4]
    assert last.checkpoints[0].partitions[0].advanced == 10  # against checkpoint 2, outside the window
    with pytest.raises(UserInputError, match="--last"):
        build_skew_report(spec, factory.store, last=0)


def test_reports_spec_is_optional_and_validated(tmp_path: Path) -> None:
    assert make_spec(tmp_path).reports is None
    assert ReportsSpec() == ReportsSpec(max_skew=60.0, max_lag=None, idle_checkpoints=3)
    spec = make_spec(tmp_path, reports={"max_skew": "2 minutes", "max_lag": "500ms", "idle_checkpoints": 5})
    assert spec.reports == ReportsSpec(max_skew=120.0, max_lag=0.5, idle_checkpoints=5)
    for bad, field in (({"max_skew": "soon"}, "max_skew"), ({"max_lag": -1}, "max_lag"),
                       ({"idle_checkpoints": 0}, "idle_checkpoints"), ({"max_skw": "1s"}, "max_skw")):
        path = write_spec(tmp_path, spec_dict(tmp_path, reports=bad), "bad.yaml")
        assert main(["skew", str(path)]) == 2
        with pytest.raises(SpecError, match=rf"reports\.{field}"):
            load_spec(path)


def only_stage(outcome: dict[str, Any]) -> dict[str, Any]:
    """The one stage's report of a single-stage pipeline's ``skew --json`` document."""
    assert list(outcome) == ["pipeline", "passed", "stages"] and len(outcome["stages"]) == 1, outcome
    return next(iter(outcome["stages"].values()))


def test_cli_json_exit_codes_and_stored_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = write_spec(tmp_path, spec_dict(tmp_path))

    # No checkpoint yet is not bad input.
    assert main(["skew", str(spec_path)]) == 0
    assert NO_CHECKPOINTS in capsys.readouterr().out
    assert main(["skew", str(spec_path), "--json"]) == 0
    assert only_stage(json.loads(capsys.readouterr().out))["message"] == NO_CHECKPOINTS

    factory = healthy_store(tmp_path)
    assert main(["skew", str(spec_path), "--json", "--last", "3"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    doc = only_stage(outcome)
    assert outcome["passed"] is True
    assert doc["format"] == "barrierflow-skew-report" and doc["passed"] is True
    assert [c["checkpoint_id"] for c in doc["checkpoints"]] == [2, 3, 4]
    assert [c["skew_seconds"] for c in doc["checkpoints"]] == [3.0, 3.0, 3.0]
    assert doc["idle_partitions"] == ["events/2"] and doc["unknown_event_time_partitions"] == ["events/2"]
    assert doc["checkpoints"][0]["partitions"][0]["max_event_time"] == (
        T0 + timedelta(seconds=18)).isoformat()
    stored = json.loads((tmp_path / "checkpoints" / SKEW_REPORT_KEY).read_text())
    assert {k: v for k, v in stored.items() if k != "generated"} == {
        k: v for k, v in doc.items() if k != "generated"}
    assert factory.store.checkpoint_ids() == [1, 2, 3, 4]  # the report is not mistaken for a checkpoint

    assert main(["skew", str(spec_path)]) == 0
    text = capsys.readouterr().out
    assert "idle partitions (last 3 checkpoints): events/2" in text and "skew: passed" in text

    # Bad input: exit 2.
    assert main(["skew", str(spec_path), "--last", "0"]) == 2
    assert main(["skew", str(tmp_path / "missing.yaml")]) == 2


def test_cli_exits_1_naming_the_skewed_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = write_spec(tmp_path, spec_dict(tmp_path))
    healthy_store(tmp_path, skewed={3: 125.0})

    assert main(["skew", str(spec_path), "--json"]) == 1
    captured = capsys.readouterr()
    outcome = json.loads(captured.out)
    assert outcome["passed"] is False
    assert only_stage(outcome)["failures"] == ["checkpoint 3: skew 123s > max_skew 60s"]
    assert "checkpoint 3: skew 123s > max_skew 60s" in captured.err
    stored = json.loads((tmp_path / "checkpoints" / SKEW_REPORT_KEY).read_text())
    assert stored["passed"] is False  # the failing report is stored too


def test_html_embeds_the_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = write_spec(tmp_path, spec_dict(tmp_path))
    healthy_store(tmp_path, skewed={3: 125.0})
    out = tmp_path / "skew.html"

    assert main(["skew", str(spec_path), "--html", str(out)]) == 1
    page = out.read_text(encoding="utf-8")
    images = page.split("src='data:image/png;base64,")[1:]
    assert len(images) == 2
    for image in images:
        assert base64.b64decode(image.split("'", 1)[0]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "alt='event time per partition'" in page and "alt='skew per checkpoint'" in page
    assert "checkpoint 3: skew 123s &gt; max_skew 60s" in page
    assert "events/2" in page and "unknown" in page
    assert "<script" not in page

    empty = render_skew_html(skew_report(make_spec(tmp_path / "none"), CheckpointStore.for_spec(
        make_spec(tmp_path / "none"))))
    assert NO_CHECKPOINTS in empty and "<img" not in empty


def _with_event_time(factory: CheckpointFactory, dropped: dict[int, int | None]) -> None:
    """Give every manifest an ``event_time`` section: watermark = max event time - 5 s, partition
    1 paused (pauses = checkpoint id), partition 2 idle, ``dropped[c]`` late rows."""
    from barrierflow.checkpointing.manifest import EventTimeSummary, PartitionWatermark
    from barrierflow.checkpointing.store import manifest_key

    for m in factory.store.completed():
        c = m.checkpoint_id
        times = m.max_event_time["events"]
        summary = EventTimeSummary(
            watermark_delay_seconds=5.0, alignment_group="g", max_drift_seconds=2.0,
            partitions={"events": {
                p: PartitionWatermark(watermark=t - timedelta(seconds=5) if t else None, idle=p == "2",
                                      paused=p == "1", pauses=c if p == "1" else 0,
                                      paused_seconds=1.5 * c if p == "1" else 0.0)
                for p, t in times.items()}},
            rows_dropped_by_watermark=dropped.get(c, 0), rows_dropped_total=sum(v or 0 for v in dropped.values()))
        changed = m.model_copy(update={"event_time": summary})
        factory.store.objects.put_bytes(manifest_key(c), changed.model_dump_json(indent=2).encode())


def test_watermarks_idleness_pauses_and_late_rows_are_reported(tmp_path: Path) -> None:
    factory = healthy_store(tmp_path, count=2)
    _with_event_time(factory, {1: 0, 2: None})
    spec = make_spec(tmp_path, event_time={"watermark_delay": "5s", "alignment": {"max_drift": "2s"}},
                     reports={"idle_checkpoints": 5})
    report = build_skew_report(spec, factory.store)
    assert report.passed, report.message
    newest = {p.name: p for p in report.checkpoints[-1].partitions}
    assert newest["events/0"].watermark == newest["events/0"].max_event_time - timedelta(seconds=5)
    assert (newest["events/1"].paused, newest["events/1"].pauses, newest["events/1"].paused_seconds) == (True, 2, 3.0)
    assert report.idle_partitions == ["events/2"]  # marked idle by the manifest, fewer than 5 checkpoints
    assert [c.rows_dropped_by_watermark for c in report.checkpoints] == [0, None]
    late = next(c for c in report.checks if c.name == "late_rows")
    assert late.passed and "1 unknown" in late.message
    doc = report.as_dict()
    assert doc["settings"]["max_late_rows"] == 0 and doc["checkpoints"][0]["rows_dropped_by_watermark"] == 0
    page = render_skew_html(report)
    assert "rows dropped as late" in page and "paused" in page


def test_late_rows_fail_the_suite_when_alignment_is_on_and_are_not_checked_without(tmp_path: Path) -> None:
    factory = healthy_store(tmp_path, count=3)
    _with_event_time(factory, {1: 0, 2: 42, 3: 0})
    aligned = make_spec(tmp_path, event_time={"watermark_delay": "5s", "alignment": {"max_drift": "2s"}})
    report = build_skew_report(aligned, factory.store)
    assert not report.passed
    assert [c.message for c in report.failures] == ["checkpoint 2: late_rows 42 rows > max_late_rows 0 rows"]
    with pytest.raises(SkewExpectationError, match="max_drift below"):
        raise_for_failures(report, "spec.yaml")
    plain = make_spec(tmp_path, event_time={"watermark_delay": "5s"})
    assert build_skew_report(plain, factory.store).passed
    limited = make_spec(tmp_path, event_time={"watermark_delay": "5s"}, reports={"max_late_rows": 41})
    assert not build_skew_report(limited, factory.store).passed


def test_cli_shows_watermarks_pauses_and_late_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    factory = healthy_store(tmp_path, count=2)
    _with_event_time(factory, {1: 3, 2: 0})
    data = spec_dict(tmp_path, event_time={"watermark_delay": "5s"})
    assert main(["skew", str(write_spec(tmp_path, data))]) == 0
    out = capsys.readouterr().out
    assert "late rows" in out and "events/1: watermark" in out and "alignment pauses 2 (3 s)" in out
    assert "events/2: watermark unknown idle" in out
