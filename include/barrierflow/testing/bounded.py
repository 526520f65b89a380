"""Running a user's pipeline to the end of a bounded input in a test: :func:`run_bounded`.

The spec is copied into the test's folder with every path of the run there (checkpoint store,
work dir, dead letters, a Parquet sink's output), then run as ``barrierflow run SPEC
--until-exhausted`` does, in this process's SparkSession (created or reused):

* a **generator** source is bounded to ``records_per_partition`` records per partition,
  unthrottled; its records are computed from the generator's model (``source_records``);
* a **Kafka** source is bounded by its topics' end offsets when the run starts: the run stops
  after the checkpoints that cover every record up to them. ``source_records`` are the records
  of that offset range, read back from the topics;
* a **Parquet** sink writes under the folder; a **PostgreSQL** sink writes into its table (the
  connection string from the spec's ``dsn_env`` variable; the table must exist, barrierflow never
  creates it); a **Kafka** sink produces to its topic (created, with its commit-marker topic, when
  missing); an **Iceberg** sink writes its table in the default catalog under the folder (unless
  the spec names a catalog), a **Delta** sink its table under the folder. ``output`` is what the
  sink committed, read back from it (a table: as of the newest cut).

A pipeline of several stages runs the same way: every generator and Kafka source of its stages
is bounded as above, the channels between them are the run's own (an embedded broker keeps its
data under the folder), and ``outputs`` holds what each final stage's sink committed.

The run is the pipeline's own: what the sink committed is exactly once, so a test compares
``output`` with an expected result it computes independently (from the records it produced,
or from ``source_records``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from barrierflow.errors import UserInputError
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from barrierflow.spec.models import (
    GeneratorSourceSpec,
    KafkaSinkSpec,
    KafkaSourceSpec,
    ParquetSinkSpec,
    PostgresSinkSpec,
    StageSpec,
)
from barrierflow.spec.stages import PipelineSpec

__all__ = ["BoundedRun", "run_bounded"]

#: Partitions of a Kafka sink's output topic that :func:`run_bounded` creates when it is missing
#: (its commit-marker topic is created with one: a topic shared by pipelines may have no more).
CREATED_TOPIC_PARTITIONS = 2


@dataclass(frozen=True)
class _Part:
    """One stage of the spec as run_bounded sees it: its ``stage`` name (None for a single-stage
    spec), the ``name`` its sinks commit under (the pipeline's, or the stage's derived one),
    where its fields are (``where``: '' or 'stages.N.') and its sources and sinks."""

    stage: str | None
    name: str
    where: str
    sources: list[Any]
    sinks: list[Any]


def _parts(spec: PipelineSpec) -> list[_Part]:
    """Each stage of ``spec``: named apart from the pipeline (``stage``; its fields below
    ``stages.N.``) or not (None: a stage keeping its own checkpoints, whose fields are the YAML's
    top-level ones), with the name of its runnable spec (what its output is named after)."""
    from barrierflow.pipeline.layout import cut_layout, stage_specs
    from barrierflow.pipeline.model import OFFLINE_SERVERS

    named = cut_layout(spec).named_stages
    specs = stage_specs(spec, servers={c.name: OFFLINE_SERVERS for c in spec.channels})
    return [_Part(stage.name if named else None, specs[stage.name].name, f"stages.{i}." if named else "",
                  list(stage.sources), list(stage.sinks))
            for i, stage in enumerate(spec.stages)]


@dataclass(frozen=True)
class BoundedRun:
    """What :func:`run_bounded` ran and what came out.

    Attributes:
        spec: the spec that ran (the given one with the test's paths and the bounded input): a
            single-stage YAML's runnable :class:`~barrierflow.spec.models.StageSpec` (its
            ``transformation``, ``sources`` and ``sinks`` at the top, as written), else the
            :class:`~barrierflow.spec.stages.PipelineSpec`.
        spec_path: where that spec was written (in the test's folder).
        source_records: the input, as dicts (a pipeline of several stages: of every generator and
            Kafka source of its stages, each dict with a ``stage`` key too). A generator's valid
            records (malformed ones go to the dead letters): partition, offset, key, value,
            event_time (UTC). A Kafka source's records of the range the run read, per partition in
            offset order: topic, partition, offset, timestamp (UTC, or None) and, for
            ``format: json``, the fields of each value that is a JSON object (as ``json.loads``
            gives them; other values are left out, as the source dead-letters them), for
            ``format: raw`` key and value (bytes).
        outputs: every row each sink committed, by the name of its stage (a single-stage
            spec: the pipeline's name), as dicts. Parquet and PostgreSQL: its columns,
            timestamps in UTC; Kafka: each committed record's value as ``json.loads`` gives it
            (timestamps as ISO-8601 strings, as the sink writes them). Channel sinks (between
            stages) are not outputs.
    """

    spec: PipelineSpec | StageSpec
    spec_path: Path
    source_records: list[dict[str, Any]]
    outputs: dict[str, list[dict[str, Any]]]

    @property
    def output(self) -> list[dict[str, Any]]:
        """The committed rows of the pipeline's one output (its sink, or its one final stage's).

        Raises:
            UserInputError: the pipeline has several final stages (read ``outputs``).
        """
        if len(self.outputs) != 1:
            raise UserInputError(f"pipeline {self.spec.name!r} has {len(self.outputs)} final stages "
                                 f"({', '.join(self.outputs)}): read run.outputs[stage]")
        return next(iter(self.outputs.values()))


def run_bounded(spec_path: str | os.PathLike[str], folder: str | os.PathLike[str], *,
                records_per_partition: int | None = None, home: str | os.PathLike[str] | None = None,
                master: str = "local[2]") -> BoundedRun:
    """Run the spec at ``spec_path`` (one stage or several) to the end of a bounded input and
    return its input and committed output (:class:`BoundedRun`; the module docstring says what
    each source and sink gives).

    The spec is copied to ``folder`` (created if missing) with: every generator source bounded to
    ``records_per_partition`` records per partition, unthrottled (a Kafka source takes no bound:
    it is read to its topics' end offsets as of the start); the checkpoint store, every Parquet
    sink's path, the work dir (where a PostgreSQL or Kafka sink writes ahead, and the embedded
    channels' broker keeps its data) and the dead letters under ``folder``; a 0 s trigger, a
    200 ms checkpoint interval; ``spark.master`` = ``master``; the spec's relative paths taken
    relative to ``home`` (default: ``$BARRIERFLOW_HOME``, else the spec file's folder:
    :mod:`barrierflow.spec.paths`). Then it runs as ``barrierflow run SPEC --until-exhausted``
    does, in this process.

    Raises:
        UserInputError: a generator without ``records_per_partition`` or a Kafka source with it;
            a Kafka source starting at ``latest`` (nothing to read); a sink whose output cannot be
            read back (``discard``); a PostgreSQL sink's ``dsn_env`` variable is unset or its
            table does not exist (each naming the field and the fix). SpecError: the spec does
            not load. The run's own errors.
    """
    from barrierflow.ops.run import run
    from barrierflow.spec import load_any_spec

    original = load_any_spec(spec_path, home=home)
    parts = _parts(original)
    for part in parts:
        _check_bounded(part, spec_path, records_per_partition)
    base = Path(folder).resolve()
    base.mkdir(parents=True, exist_ok=True)
    # defaults stay defaults; a stage keeping its own checkpoints is written back as the
    # single-stage YAML it was loaded from
    from barrierflow.pipeline.layout import cut_layout
    from barrierflow.pipeline.stage_options import own_stage_spec

    named = cut_layout(original).named_stages
    written = original if named else own_stage_spec(original)
    data = written.model_dump(mode="json", exclude_unset=True)
    for part in parts:
        fields = data if part.stage is None else next(s for s in data["stages"] if s["name"] == part.stage)
        for source in fields["sources"]:
            if source["type"] == "generator":
                source.update(records_per_partition=records_per_partition, rows_per_second=0)
        for sink, model in zip(fields["sinks"], part.sinks, strict=True):
            if isinstance(model, ParquetSinkSpec):
                sink["path"] = f"file://{base / 'output' / (part.stage or '') / model.name}"
            elif isinstance(model, DeltaSinkSpec):
                sink["path"] = f"file://{base / 'tables' / (part.stage or '') / model.name}"
    data["checkpoint"].update(storage=f"file://{base / 'checkpoints'}", interval=0.2)
    data.setdefault("trigger", {})["interval"] = 0.0
    data["work_dir"] = str(base / "work")
    data["dead_letter_path"] = f"file://{base / 'dead-letter'}"
    data["event_times_path"] = ""
    data.setdefault("spark", {}).update(master=master)  # py_packages: made absolute by load_spec
    derived = base / f"{original.name}.yaml"
    derived.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    spec = load_any_spec(derived)
    parts = _parts(spec)

    from barrierflow.kafka_io.admin import ensure_topic

    for sink in (s for part in parts for s in part.sinks if isinstance(s, KafkaSinkSpec)):
        ensure_topic(sink.bootstrap_servers, sink.topic, CREATED_TOPIC_PARTITIONS, sink.client)
        ensure_topic(sink.bootstrap_servers, sink.commit_marker_topic, 1, sink.client)
    kafka_ranges = {(part.stage, source.name): _kafka_range(source) for part in parts for source in part.sources
                    if isinstance(source, KafkaSourceSpec)}

    run(derived, until_exhausted=True)

    records: list[dict[str, Any]] = []
    for part in parts:
        for source in part.sources:
            if isinstance(source, GeneratorSourceSpec):
                assert records_per_partition is not None
                found = _generator_records(source, records_per_partition)
            elif isinstance(source, KafkaSourceSpec):
                found = _kafka_records(source, *kafka_ranges[(part.stage, source.name)])
            else:
                continue  # a channel: what another stage wrote
            records += found if part.stage is None else [{**r, "stage": part.stage} for r in found]
    outputs = {part.stage or part.name: _committed_output(part.name, sink) for part in parts for sink in part.sinks
               if isinstance(sink, ParquetSinkSpec | PostgresSinkSpec | KafkaSinkSpec)}
    for part in parts:
        for sink in part.sinks:
            if isinstance(sink, IcebergSinkSpec | DeltaSinkSpec):
                outputs[part.stage or part.name] = _table_rows(derived, f"{part.stage or spec.name}/{sink.name}")
    return BoundedRun(spec if named else own_stage_spec(spec), derived, records, outputs)


def _check_bounded(part: _Part, spec_path: str | os.PathLike[str], records_per_partition: int | None) -> None:
    """UserInputError unless ``part`` can run bounded with ``records_per_partition`` and its
    sinks' output can be read back."""
    for i, source in enumerate(part.sources):
        field = f"{part.where}sources[{i}]"
        if isinstance(source, GeneratorSourceSpec) and records_per_partition is None:
            raise UserInputError(f"{spec_path}: the generator source {source.name!r} ({field}) is unbounded: give "
                                 "run_bounded records_per_partition=N (records per partition)")
        if isinstance(source, KafkaSourceSpec):
            if records_per_partition is not None:
                raise UserInputError(f"{spec_path}: the Kafka source {source.name!r} ({field}) is read to its topics' "
                                     "end offsets as of the start; drop records_per_partition and produce the "
                                     "records the test needs")
            if source.starting_offsets == "latest":
                raise UserInputError(f"{spec_path}: the Kafka source {source.name!r} starts at 'latest', so a bounded "
                                     f"run reads nothing; set {field}.starting_offsets to 'earliest' (or explicit "
                                     "offsets)")
    for i, sink in enumerate(part.sinks):
        if getattr(sink, "type", "") == "channel":
            continue
        if not isinstance(sink, ParquetSinkSpec | PostgresSinkSpec | KafkaSinkSpec | IcebergSinkSpec | DeltaSinkSpec):
            raise UserInputError(f"{spec_path}: run_bounded reads back the committed output of a parquet, postgres, "
                                 f"kafka, iceberg or delta sink ({part.where}sinks[{i}] type), not {sink.type!r}")
        if isinstance(sink, PostgresSinkSpec):
            if not os.environ.get(sink.dsn_env):
                raise UserInputError(f"{spec_path}: the PostgreSQL sink {sink.name!r} reads its connection string "
                                     f"from ${sink.dsn_env}, which is unset: set it to the test database's DSN (e.g. "
                                     "barrierflow.testing.throwaway_postgres())")
            if not _table_exists(os.environ[sink.dsn_env], sink.table):
                raise UserInputError(f"{spec_path}: the PostgreSQL sink {sink.name!r} writes into table "
                                     f"{sink.table!r}, which does not exist in the database of ${sink.dsn_env}: "
                                     "create it before the run (barrierflow never creates a sink's table), e.g. "
                                     "with the project's DDL")


def _table_exists(dsn: str, table: str) -> bool:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(row and row[0])


def _generator_records(source: GeneratorSourceSpec, records_per_partition: int) -> list[dict[str, Any]]:
    from barrierflow.sources.generator import GeneratorModel

    model = GeneratorModel(source)
    names = ("partition", "offset", "key", "value", "event_time")
    return [dict(zip(names, row, strict=True)) for p in range(source.partitions)
            for row in model.rows(p, 0, records_per_partition)]


def _kafka_range(source: KafkaSourceSpec) -> tuple[dict[str, int], dict[str, int]]:
    """Where the bounded run starts and ends, per partition id (``topic:N``): its starting
    offsets (explicit, or the log start for ``earliest``) and the end offsets now, which are
    the ends ``--until-exhausted`` reads to."""
    from barrierflow.kafka_io.admin import beginning_offsets, end_offsets
    from barrierflow.kafka_io.partition_ids import partition_id

    ends = end_offsets(source)
    starts = beginning_offsets(source)
    if isinstance(source.starting_offsets, dict):
        for topic, offsets in source.starting_offsets.items():
            for partition, offset in offsets.items():
                starts[partition_id(topic, int(partition))] = offset
    return starts, ends


def _kafka_records(source: KafkaSourceSpec, starts: dict[str, int], ends: dict[str, int]) -> list[dict[str, Any]]:
    from barrierflow.kafka_io.partition_ids import parse_partition_id
    from barrierflow.kafka_io.range_reads import read_range

    records: list[dict[str, Any]] = []
    for pid in sorted(ends, key=parse_partition_id):
        topic, partition = parse_partition_id(pid)
        for record in read_range(source, topic, partition, starts.get(pid, 0), ends[pid]):
            row: dict[str, Any] = {"topic": topic, "partition": partition, "offset": record.offset,
                                   "timestamp": (datetime.fromtimestamp(record.timestamp / 1000, UTC)
                                                 if record.timestamp is not None else None)}
            if source.format == "json":
                try:
                    value = json.loads(record.value) if record.value is not None else None
                except ValueError:
                    continue
                if not isinstance(value, dict):
                    continue
                row.update(value)
            else:
                row.update(key=record.key, value=record.value)
            records.append(row)
    return records


def _committed_output(pipeline: str, sink: ParquetSinkSpec | PostgresSinkSpec | KafkaSinkSpec
                      ) -> list[dict[str, Any]]:
    """What ``sink`` committed; ``pipeline``: the name its commits are recorded under."""
    if isinstance(sink, ParquetSinkSpec):
        from barrierflow.sinks.parquet import read_committed

        table = read_committed(sink.path)
        return [{k: _utc(v) for k, v in row.items()} for row in (table.to_pylist() if table is not None else [])]
    if isinstance(sink, PostgresSinkSpec):
        return _postgres_rows(sink)
    assert isinstance(sink, KafkaSinkSpec)
    from barrierflow.kafka_io.committed_output import committed_records

    records = committed_records(sink.bootstrap_servers, sink.topic, sink.commit_marker_topic, pipeline=pipeline,
                                sink=sink.name, client=sink.client)
    return [json.loads(r.value) for r in records]


def _table_rows(spec_path: Path, table: str) -> list[dict[str, Any]]:
    """The rows of the Iceberg or Delta ``table`` (``<stage>/<sink>``) as of the newest cut."""
    from barrierflow.batch.lake_cut import read_table_as_of

    return [{k: _utc(v) for k, v in row.items()} for row in read_table_as_of(spec_path, table).to_pylist()]


def _postgres_rows(sink: PostgresSinkSpec) -> list[dict[str, Any]]:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    table = sql.Identifier(*sink.table.split("."))
    with psycopg.connect(os.environ[sink.dsn_env], row_factory=dict_row) as conn:
        rows = conn.execute(sql.SQL("SELECT * FROM {}").format(table)).fetchall()
    return [{k: _utc(v) for k, v in row.items()} for row in rows]


def _utc(value: Any) -> Any:
    """A timestamp read back in UTC (Spark writes Parquet timestamps without a zone)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value
