"""A sink's write-ahead area is ``write_ahead_path``; ``staging_path``, its former name, is still
read (with a FutureWarning naming the new one), and the two at once are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.errors import SpecError
from barrierflow.spec import load_spec

from tests.pipeline_specs import spec_dict, write_spec

POSTGRES = {"name": "pg", "type": "postgres", "table": "public.totals"}


def test_write_ahead_path_is_read_and_resolved_like_every_storage_uri(tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec_dict(tmp_path, sinks=[{**POSTGRES, "write_ahead_path": "file://pg-ahead"}]))
    assert load_spec(path).sink.write_ahead_path == f"file://{tmp_path / 'pg-ahead'}"


def test_the_former_name_staging_path_is_still_read_with_a_warning(tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec_dict(tmp_path, sinks=[{**POSTGRES, "staging_path": "file://pg-ahead"}]))
    with pytest.warns(FutureWarning, match="'staging_path' is deprecated, name it 'write_ahead_path'"):
        spec = load_spec(path)
    assert spec.sink.write_ahead_path == f"file://{tmp_path / 'pg-ahead'}"


def test_both_names_at_once_are_refused_naming_the_one_to_keep(tmp_path: Path) -> None:
    sink = {**POSTGRES, "staging_path": "file://a", "write_ahead_path": "file://b"}
    with pytest.raises(SpecError, match="give write_ahead_path only"):
        load_spec(write_spec(tmp_path, spec_dict(tmp_path, sinks=[sink])))
