"""The generator's options as Spark's workers read them (barrierflow.spec.generator_params): the
same values as the spec model, the same records, and no spec models imported in the workers."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from barrierflow.errors import SourceError
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec.generator_params import GeneratorParams
from barrierflow.spec.models import GeneratorSourceSpec

#: Every field away from its default, so a field read from the wrong key cannot pass.
SPEC = GeneratorSourceSpec(
    type="generator", name="gen-ü", partitions=3, rows_per_second=250.0, max_records_per_batch=77, keys=13,
    event_time_start="2026-03-04T05:06:07+02:00", event_time_skew_ms=[0, 1500], partition_rate_factors=[1.0, 0.25],
    event_time_step_ms=3.5, malformed_every=5, records_per_partition=400,
    silent_periods=[{"partition": 1, "start": 2, "end": 5}, {"partition": 2, "start": 0.5, "end": 9}])


def test_params_hold_every_field_of_the_spec_with_its_value() -> None:
    params = GeneratorParams.from_json(SPEC.model_dump_json())
    names = {f.name for f in dataclasses.fields(GeneratorParams)}
    # A new generator field must be decided here: read by the workers (a field of the params) or not.
    assert names == set(GeneratorSourceSpec.model_fields) - {"type"}
    for name in names - {"silent_periods"}:
        value = getattr(SPEC, name)
        assert getattr(params, name) == (tuple(value) if isinstance(value, list) else value), name
    assert [(p.partition, p.start, p.end) for p in params.silent_periods] == \
        [(p.partition, p.start, p.end) for p in SPEC.silent_periods]
    assert GeneratorParams.from_json(GeneratorSourceSpec(type="generator").model_dump_json()).event_time_step_ms is None


def test_params_and_spec_give_the_same_records_offsets_and_silences() -> None:
    by_spec, by_params = GeneratorModel(SPEC), GeneratorModel(GeneratorParams.from_json(SPEC.model_dump_json()))
    for p in range(SPEC.partitions):
        assert by_params.rows(p, 3, 140) == by_spec.rows(p, 3, 140)
        assert by_params.malformed(p, 0, 60) == by_spec.malformed(p, 0, 60)
        moment = datetime(2026, 3, 4, 3, 6, 9, tzinfo=UTC)  # 2 s after the start, past every skew
        assert by_params.offset_at(p, moment) == by_spec.offset_at(p, moment) > 0
        for elapsed in (0.2, 1, 3, 6, 8.5, 20):
            assert by_params.spec.silent_seconds(p, elapsed) == SPEC.silent_seconds(p, elapsed)
    assert by_spec.spec.silent_seconds(1, 6) == 3 and by_spec.spec.silent_seconds(0, 20) == 0


def test_options_without_a_field_name_it_and_the_fix() -> None:
    data = json.loads(SPEC.model_dump_json())
    del data["keys"]
    with pytest.raises(SourceError, match=r"lack 'keys'.*install one version on both"):
        GeneratorParams.from_json(json.dumps(data))


def test_a_worker_that_unpickles_the_generator_imports_no_spec_model() -> None:
    """What a Spark Python worker imports to read the generator: neither pydantic nor the spec models."""
    probe = ("import sys, barrierflow.sources.generator; "
             "print(sorted(m for m in sys.modules if m == 'pydantic' or m.startswith('barrierflow.spec.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().replace("'", '"')) == ["barrierflow.spec.generator_params"]


def test_a_worker_reading_with_dead_letters_to_a_relative_uri_imports_no_spec_model(tmp_path: Path) -> None:
    """The reader, pickled as Spark ships it, reads a partition with malformed records in a fresh
    process whose dead letters go to a relative ``file://`` URI (resolved against the project
    home): the rows come back and neither pydantic nor the spec loader was imported on the way."""
    import pickle

    from barrierflow.sources.generator import GeneratorStreamReader
    from pyspark.sql.datasource import InputPartition

    spec = SPEC.model_copy(update={"malformed_every": 7})
    reader = GeneratorStreamReader({"spec": spec.model_dump_json(), "control_dir": str(tmp_path / "control"),
                                    "dead_letter_uri": "file://dead-letters"})
    shipped = tmp_path / "reader.pickle"
    shipped.write_bytes(pickle.dumps((reader, InputPartition((0, 0, 50)))))
    probe = ("import pickle, sys; reader, part = pickle.loads(open(sys.argv[1], 'rb').read()); "
             "rows = sum(b.num_rows for b in reader.read(part)); "
             "print(rows, sorted(m for m in sys.modules if m == 'pydantic' or m.startswith('barrierflow.spec.')))")
    done = subprocess.run([sys.executable, "-c", probe, str(shipped)], capture_output=True, text=True, check=True,
                          cwd=tmp_path, env={**os.environ, "BARRIERFLOW_HOME": str(tmp_path)})
    rows, loaded = done.stdout.strip().split(" ", 1)
    assert int(rows) == 50 - 50 // 7
    assert json.loads(loaded.replace("'", '"')) == ["barrierflow.spec.generator_params", "barrierflow.spec.paths"]
    assert any((tmp_path / "dead-letters").rglob("*")), "no dead letters written under the project home"
