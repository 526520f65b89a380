"""The spec of the lakehouse table sinks (``type: iceberg``, ``type: delta``): what parses, the
refusals naming the field and the fix, and the wiring around them (the write-ahead area inside the
table, the stage a commit names, chaos copying a table sink to a scratch table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.chaos.scratch import check_judgeable, scratch_copy
from barrierflow.errors import SpecError
from barrierflow.sinks.factory import pipeline_and_stage, write_ahead_uri_for
from barrierflow.spec import parse_any_spec, parse_spec
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from barrierflow.workdir.layout import JobLayout

from tests.pipeline_specs import spec_dict


def with_sink(tmp_path: Path, sink: dict[str, Any]) -> dict[str, Any]:
    data = spec_dict(tmp_path, name="lakes")
    data["sinks"] = [sink]
    return data


def test_iceberg_and_delta_sinks_parse_with_their_defaults(tmp_path: Path) -> None:
    spec = parse_spec(with_sink(tmp_path, {"type": "iceberg", "table": "lake.totals", "partitioned_by": ["key"]}))
    sink = spec.sink
    assert isinstance(sink, IcebergSinkSpec)
    assert (sink.name, sink.namespace, sink.table_name, sink.catalog.type, sink.catalog.uri) == (
        "iceberg", "lake", "totals", "sql", "")
    spec = parse_spec(with_sink(tmp_path, {"type": "delta", "path": f"file://{tmp_path}/t/"}))
    assert isinstance(spec.sink, DeltaSinkSpec) and spec.sink.path == f"file://{tmp_path}/t"


@pytest.mark.parametrize(("sink", "message"), [
    ({"type": "iceberg", "table": "totals"}, "table 'totals' is not 'namespace.table'"),
    ({"type": "iceberg", "table": "lake.t", "partitioned_by": ["a b"]}, "partitioned_by: 'a b' is not a column name"),
    ({"type": "iceberg", "table": "lake.t", "partitioned_by": ["k", "k"]}, "partitioned_by names k more than once"),
    ({"type": "iceberg", "table": "lake.t", "catalog": {"type": "rest"}}, "catalog type 'rest' needs uri"),
    ({"type": "iceberg", "table": "lake.t", "catalog": {"uri": "mysql://h/db"}},
     "neither 'sqlite:///PATH' nor 'postgresql"),
    ({"type": "iceberg", "table": "lake.t", "catalog": {"uri": "sqlite:///x", "uri_env": "X"}},
     "give uri or uri_env, not both"),
    ({"type": "iceberg", "table": "lake.t", "catalog": {"warehouse": "/tmp/wh"}}, "is not a storage URI"),
    ({"type": "delta", "path": "/data/t"}, "expected the table's storage URI"),
    ({"type": "delta", "path": "file://t", "commit_every": 0}, "commit_every"),
])
def test_bad_table_sinks_are_refused_naming_the_field(tmp_path: Path, sink: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(with_sink(tmp_path, sink))


def test_the_write_ahead_area_is_inside_the_table_and_commits_name_the_stage(tmp_path: Path) -> None:
    spec = parse_spec(with_sink(tmp_path, {"name": "out", "type": "delta", "path": f"file://{tmp_path}/t"}))
    layout = JobLayout.for_spec(spec)
    assert write_ahead_uri_for(spec, layout) == f"file://{tmp_path}/t/_barrierflow_staging/lakes/out"
    assert pipeline_and_stage(spec) == ("lakes", "lakes")
    spec = parse_spec(with_sink(tmp_path, {"name": "out", "type": "iceberg", "table": "lake.totals"}))
    assert write_ahead_uri_for(spec, JobLayout.for_spec(spec)) == (
        f"file://{tmp_path / 'work' / 'iceberg' / 'warehouse'}/lake/totals/_barrierflow_staging/lakes/out")
    derived = spec.model_copy(update={"name": "two-b", "work_dir": f"{tmp_path}/work/stages/b"})
    assert pipeline_and_stage(derived) == ("two", "b")


def test_chaos_copies_a_table_sink_to_a_scratch_table_instead_of_writing_the_real_one(tmp_path: Path) -> None:
    data = with_sink(tmp_path, {"name": "out", "type": "iceberg", "table": "lake.totals"})
    data["sources"][0]["records_per_partition"] = 100
    assert check_judgeable(parse_any_spec(data)) == []
    copied, outputs = scratch_copy(data, copy_name="chaos", root=tmp_path / "scratch", stamp="20261202081500")
    sink = parse_spec(copied).sink
    assert isinstance(sink, IcebergSinkSpec) and sink.table == "lake.totals_chaos_081500_chaos"
    assert sink.catalog.uri == f"sqlite:///{tmp_path / 'scratch' / 'iceberg' / 'lakes' / 'catalog.db'}"
    assert [(o.kind, o.target, o.original) for o in outputs] == [("iceberg", sink.table, "lake.totals")]
