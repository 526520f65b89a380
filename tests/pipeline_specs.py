"""Building small pipeline specs for tests (everything under the test's tmp_path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from barrierflow.spec import StageSpec, parse_spec


def spec_dict(tmp_path: Path, name: str = "t", **overrides: Any) -> dict[str, Any]:
    """A fast pipeline: unthrottled generator -> running totals per key -> discard."""
    data: dict[str, Any] = {
        "version": 1,
        "name": name,
        "work_dir": str(tmp_path / "work"),
        "sources": [{
            "name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
            "max_records_per_batch": 2000, "keys": 500,
        }],
        "transformation": {
            "function": "barrierflow.transforms.aggregations:keyed_running_totals",
            "output_mode": "update",
        },
        "sinks": [{"name": "out", "type": "discard"}],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "500ms", "timeout": "60s"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        elif key == "source":
            data["sources"] = [{**data["sources"][0], **value}]
        else:
            data[key] = value
    return data


def make_spec(tmp_path: Path, **overrides: Any) -> StageSpec:
    return parse_spec(spec_dict(tmp_path, **overrides))


def write_spec(tmp_path: Path, data: dict[str, Any], filename: str = "pipeline.yaml") -> Path:
    path = tmp_path / filename
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path
