"""Which specs chaos can judge, and the scratch copies it runs.

A copy is the user's YAML with everything a run writes moved aside: the pipeline name (and so
every transaction id, marker and derived channel topic), ``work_dir``, every storage URI
outside the sources and the transformation (the checkpoint storage, ``dead_letter_path``,
``event_times_path``, Parquet paths, write-ahead paths, rollups), explicit channel topics, the
PostgreSQL tables, the Kafka topics and their commit-marker topics, the Iceberg tables (a
scratch table name; a scratch SQLite catalog in place of a local SQLite one) and the Delta
tables (their paths are storage URIs). Sources, the
transformation and every other setting stay as written, so both copies read the same input and
run the same code. No store of a copy may lie in one of the spec's (or the other way round):
a copy never writes what the spec's own pipeline keeps.

Storage stays of the kind the spec uses: ``file://`` stores move under the scratch dir,
``s3://BUCKET/...`` ones to ``s3://BUCKET/barrierflow-chaos/<pipeline>-<stamp>/<copy>/<field>``
(chaos checks the user's storage, not a local stand-in).

Not moved, because the spec does not name it: a PostgreSQL sink's commit-marker table
``barrierflow_commits`` (the copies' rows there carry the copies' pipeline names, which the
pipeline never reads). Not moved, because it is a server: an Iceberg sink's PostgreSQL or REST
catalog (the copies' tables in it have scratch names).

Servers: the copies' tables and topics live on the servers the spec names, unless its ``chaos``
block names scratch ones (:class:`barrierflow.spec.models.ChaosSpec`): ``postgres_dsn_env``
replaces every PostgreSQL sink's ``dsn_env`` (so ``barrierflow_commits`` moves too),
``kafka_bootstrap_servers`` every Kafka sink's ``bootstrap_servers`` and the ``bootstrap`` of
every channel on a real cluster. Sources keep theirs: a copy only reads them.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barrierflow.errors import UserInputError
from barrierflow.pipeline.layout import cut_layout
from barrierflow.pipeline.words import WORDS
from barrierflow.spec.loader import raw_parts
from barrierflow.spec.models import GeneratorSourceSpec, KafkaSinkSpec, KafkaSourceSpec
from barrierflow.spec.stages import PipelineSpec

AnySpec = PipelineSpec
#: The sink kinds whose committed output chaos reads and compares (:mod:`barrierflow.chaos.outputs`).
OUTPUT_KINDS: tuple[str, ...] = ("parquet", "postgres", "kafka", "iceberg", "delta")
#: The sink kinds that write lakehouse tables (their histories are checked too).
TABLE_KINDS: tuple[str, ...] = ("iceberg", "delta")
#: A Kafka sink's ``commit_marker_topic`` when the spec does not set it.
DEFAULT_MARKER_TOPIC: str = KafkaSinkSpec.model_fields["commit_marker_topic"].default


class ChaosRefusedError(UserInputError):
    """The spec cannot be judged by comparing runs: the message says why and what to change."""


def stages_of(spec: AnySpec) -> list[tuple[str, Any]]:
    """(stage name, stage-like object with ``sources``, ``sinks``, ``transformation``) pairs;
    a single-stage spec is one stage named after the pipeline."""
    return [(s.name, s) for s in spec.stages]


def check_judgeable(spec: AnySpec) -> list[KafkaSourceSpec]:
    """Refuse what chaos cannot judge; return the Kafka sources (their end offsets must not move).

    Raises:
        ChaosRefusedError: an unbounded source (a generator without ``records_per_partition``,
            a source kind chaos cannot bound), a Kafka source that starts at ``latest`` (as a
            whole or for one partition: ``-1``), a transformation declared non-deterministic,
            an update- or complete-mode transformation whose micro-batches are not reproducible
            (:func:`_check_reproducible_batches`), or no output to compare (only channel or
            discard sinks).
    """
    kafka: list[KafkaSourceSpec] = []
    outputs = 0
    said = WORDS[cut_layout(spec).name]
    for part in spec.stages:
        where = said.label(part.name)
        if not part.transformation.deterministic:
            raise ChaosRefusedError(
                f"{where}: its transformation {part.transformation.function} is declared 'deterministic: false'; "
                "chaos compares rows with a failure-free run, which only means something when the same input "
                "gives the same rows")
        _check_reproducible_batches(where, part)
        for source in part.sources:
            if isinstance(source, GeneratorSourceSpec):
                if source.records_per_partition is None:
                    raise ChaosRefusedError(
                        f"{where}: generator source {source.name!r} is unbounded; set records_per_partition so "
                        "that the runs end (chaos compares the complete output of two runs)")
            elif isinstance(source, KafkaSourceSpec):
                _check_start(where, source)
                kafka.append(source)
            elif getattr(source, "type", None) != "channel":
                raise ChaosRefusedError(f"{where}: source {getattr(source, 'name', '?')!r} of type "
                                        f"{getattr(source, 'type', '?')!r} cannot be bounded by chaos")
        outputs += sum(1 for sink in part.sinks if sink.type in OUTPUT_KINDS)
    if not outputs:
        raise ChaosRefusedError(f"pipeline {spec.name!r} has no Parquet, PostgreSQL or Kafka sink and no table sink "
                                "(Iceberg, Delta): there is no committed output to compare")
    return kafka


def _check_reproducible_batches(where: str, part: Any) -> None:
    """Refuse an update- or complete-mode transformation that reads a source whose micro-batches
    are cut by what has arrived when each is planned: a channel (its writing stage's progress) or
    a throttled generator (``rows_per_second`` > 0, the wall clock).

    Such a transformation writes one row per key and micro-batch (a running total as of the end
    of the batch). A run under kills restores at other moments than the failure-free run and so
    cuts other batches: its intermediate rows differ although nothing was lost or written twice
    (the final rows agree), and chaos, which compares rows, would report the difference as loss.
    Batches cut by ``max_records_per_batch`` from a generator at ``rows_per_second: 0`` or from a
    Kafka topic nobody writes to while chaos runs are the same in every run."""
    mode = part.transformation.output_mode
    if mode == "append":
        return
    for source in part.sources:
        if getattr(source, "type", None) == "channel":
            what = f"channel {source.channel!r}, whose batches depend on how far the writing stage has come"
        elif isinstance(source, GeneratorSourceSpec) and source.rows_per_second > 0:
            what = (f"generator source {source.name!r} at rows_per_second {source.rows_per_second:g}, whose "
                    "batches depend on the wall clock")
        else:
            continue
        raise ChaosRefusedError(
            f"{where}: its transformation writes in {mode} mode (a row per key and micro-batch) and reads {what}: "
            "a run under kills cuts other micro-batches than the failure-free run and writes other intermediate "
            "rows with the same final values, so comparing rows would report differences that are no loss; "
            "give chaos a copy of the pipeline whose update-mode stage reads a generator with rows_per_second: 0 "
            "or a Kafka topic (batches cut by max_records_per_batch), or write that output in append mode")


def _check_start(where: str, source: KafkaSourceSpec) -> None:
    """Refuse a Kafka source that starts at the end of a topic: each copy resolves ``latest``
    when its own run starts, so the reference and the run under kills would read different
    input, and a topic nobody writes to while chaos runs (which chaos requires) gives both
    nothing to read."""
    wanted = source.starting_offsets
    at_end: list[str] = [] if isinstance(wanted, str) else sorted(
        f"{topic}:{partition}" for topic, by_partition in wanted.items()
        for partition, offset in by_partition.items() if int(offset) == -1)
    if wanted == "latest" or at_end:
        at = f" for partition(s) {', '.join(at_end)} (offset -1)" if at_end else ""
        raise ChaosRefusedError(
            f"{where}: Kafka source {source.name!r} starts at 'latest'{at}: each copy would start at the end of "
            "its topics when it runs, so there is no fixed input for both to read (and with a topic nobody writes, "
            "nothing at all); set starting_offsets to 'earliest' or to fixed offsets {topic: {partition: offset}}")


@dataclass(frozen=True)
class InputCount:
    """How many records one source of the spec holds for a run: ``records`` from its start
    to its end (for Kafka: the end offsets chaos saw before the reference run)."""

    source: str
    records: int
    how: str  # e.g. "2 partitions x 700 records", "topic orders: offsets 0-0"


def nothing_to_compare(inputs: list[InputCount], unread: dict[str, str], dead_letters: int) -> str:
    """Why a failure-free reference run committed no row at all, as the message of the refusal.

    A run under kills of such a pipeline could lose or duplicate nothing, so its verdict would
    be a pass on nothing. The reason, first match wins:

    * **no input**: every source holds 0 records from its start to its end (an empty topic,
      fixed offsets at the end, ``records_per_partition: 0``);
    * **output not found**: ``unread`` names outputs whose location holds objects the reader
      does not read (``{output: what is there}``, see
      :func:`barrierflow.chaos.outputs.unread_output`);
    * **the transformation kept nothing**: there was input, but no row reached an output (a
      filter that drops every row, a window that never closes in append mode, or every record
      malformed: ``dead_letters`` says how many went to the dead letters).

    Args:
        inputs: the sources' record counts (external sources only, not channels).
        unread: output name -> what its location holds that the reader does not read.
        dead_letters: how many malformed records the reference run wrote to its dead letters.
    """
    head = ("nothing to compare: the failure-free reference run committed 0 rows, so a run under kills could "
            "lose or duplicate nothing and would pass on nothing. ")
    held = ", ".join(f"{i.source}: {i.records:,} ({i.how})" for i in inputs)
    if inputs and not any(i.records for i in inputs):
        return (head + f"Why: the sources held no records to read ({held}). Give chaos input: write records to "
                "the topics first (or start the Kafka source at 'earliest' or earlier fixed offsets), or raise "
                "records_per_partition.")
    if unread:
        found = "; ".join(f"output {name}: {what}" for name, what in sorted(unread.items()))
        return (head + f"Why: an output was not found where chaos reads it ({found}). chaos reads a Parquet sink's "
                      "committed part-*.parquet files at the top of its path; point the sink's path at the folder "
                      "the pipeline commits into.")
    malformed = (f"; {dead_letters:,} records went to the dead letters (malformed for the json_fields read)"
                 if dead_letters else "")
    return (head + f"Why: the transformation kept no rows: the sources held records ({held}) but none reached "
                   f"an output{malformed}. Give chaos input the transformation keeps rows of (a filter that drops "
                   "every row, or a window that never closes in append mode, commits nothing).")


@dataclass(frozen=True)
class ScratchOutput:
    """One output of a copy: the sink's kind, its name, and where the copy writes it."""

    stage: str
    sink: str
    kind: str
    target: str  # a storage URI, a table name or a topic
    original: str
    #: A Kafka sink's commit-marker topic: (the spec's, the copy's); None for other kinds.
    marker_topics: tuple[str, str] | None = None


def _name(name: str, copy_name: str, stamp: str) -> str:
    suffix = f"-x{stamp[-6:]}-{copy_name}"
    return name[:63 - len(suffix)] + suffix


#: The parts of a spec a run only reads (its input and code): never moved.
_READ_ONLY = frozenset({"sources", "transformation"})
#: The S3 prefix of a bucket under which chaos keeps its copies' objects.
S3_PREFIX = "barrierflow-chaos"

Where = tuple[str | int, ...]


def _storage_leaves(node: Any, where: Where = ()) -> Iterator[tuple[Where, str]]:
    """Every ``file://`` or ``s3://`` value of a YAML mapping with its location, outside the
    parts a run only reads (:data:`_READ_ONLY`)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in _READ_ONLY:
                yield from _storage_leaves(value, (*where, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _storage_leaves(value, (*where, index))
    elif isinstance(node, str) and node.startswith(("file://", "s3://")):
        yield where, node


def _put(data: Any, where: Where, value: str) -> None:
    for step in where[:-1]:
        data = data[step]
    data[where[-1]] = value


def _field(where: Where) -> str:
    return ".".join(str(step) for step in where)


def _uri(uri: str, root: Path, label: str, stamp: str, copy_name: str, pipeline: str) -> str:
    """Where the copy keeps what the spec keeps at ``uri``: ``file://`` under the copy's
    scratch dir ``root``, ``s3://BUCKET/...`` in the same bucket under
    ``barrierflow-chaos/<pipeline>-<stamp>/<copy>/`` (never inside a prefix of the spec)."""
    if uri.startswith("s3://"):
        bucket = uri.removeprefix("s3://").partition("/")[0]
        return f"s3://{bucket}/{S3_PREFIX}/{pipeline}-{stamp}/{copy_name}/{label}"
    return f"file://{root / label}"


def _location(value: str) -> tuple[str, tuple[str, ...]]:
    """A store as (scheme and bucket, path parts), so that containment is a prefix test."""
    if value.startswith("s3://"):
        bucket, _, prefix = value.removeprefix("s3://").partition("/")
        return f"s3:{bucket}", tuple(part for part in prefix.split("/") if part)
    from barrierflow.storage.uri import local_path_of

    return "file", local_path_of(value if value.startswith("file://") else f"file://{value}").resolve().parts


def _overlap(a: str, b: str) -> bool:
    """Whether one of the stores ``a`` and ``b`` lies in the other (or they are one)."""
    (kind_a, parts_a), (kind_b, parts_b) = _location(a), _location(b)
    shorter = min(len(parts_a), len(parts_b))
    return kind_a == kind_b and parts_a[:shorter] == parts_b[:shorter]


def _stores(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, location) of every store a run of the spec ``data`` writes that the spec names:
    its work dir (default ``var/<name>``: the default dead letters, event times, write-ahead batches and
    the embedded broker's data live under it) and every storage URI outside its input and code."""
    work_dir = str(data.get("work_dir") or f"var/{data['name']}")
    return [("work_dir", work_dir), *((_field(where), uri) for where, uri in _storage_leaves(data))]


def _table(table: str, stamp: str, copy_name: str) -> str:
    schema, _, name = table.rpartition(".")
    new = re.sub(r"[^A-Za-z0-9_]", "_", f"{name}_chaos_{stamp[-6:]}_{copy_name}")[:63]
    return f"{schema}.{new}" if schema else new


def _sinks(raw_stage: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from raw_stage.get("sinks") or []


def _to_scratch_catalog(sink: dict[str, Any], root: Path, stage: str) -> None:
    """Give the copy's Iceberg sink ``sink`` a scratch SQLite catalog when the spec's catalog is a
    local SQLite file (the default under the work dir, a ``sqlite:`` ``uri``, or a ``uri_env``
    whose value is one): ``<root>/iceberg/<stage>/catalog.db``, one per stage as the default
    is. A PostgreSQL or REST catalog is kept (a server, like a PostgreSQL sink's database): the
    copy's table has a scratch name in it (:func:`_table`), and its data goes under the copy's
    warehouse (moved like every storage URI, or the default under the copy's work dir)."""
    catalog = dict(sink.get("catalog") or {})
    uri = str(catalog.get("uri") or "")
    if catalog.get("uri_env"):
        uri = os.environ.get(str(catalog["uri_env"]), "").strip()
        if not uri.startswith("sqlite:"):
            return
    if str(catalog.get("type") or "sql") != "sql" or (uri and not uri.startswith("sqlite:")):
        return
    catalog.pop("uri_env", None)
    catalog["uri"] = f"sqlite:///{root / 'iceberg' / stage / 'catalog.db'}"
    sink["catalog"] = catalog


def _to_scratch_servers(data: dict[str, Any]) -> None:
    """Point the sinks and real-cluster channels of the copy ``data`` at the scratch servers its
    ``chaos`` block names (none named: left as they are). The block itself is dropped: the copy
    is no pipeline of a chaos DAG, and its servers are the scratch ones already."""
    settings = data.pop("chaos", None) or {}
    dsn_env, bootstrap = settings.get("postgres_dsn_env"), settings.get("kafka_bootstrap_servers")
    for part in raw_parts(data):
        for sink in _sinks(part.data):
            if dsn_env and sink.get("type") == "postgres":
                sink["dsn_env"] = dsn_env
            elif bootstrap and sink.get("type") == "kafka":
                sink["bootstrap_servers"] = bootstrap
    for channel in data.get("channels") or []:
        if bootstrap and str(channel.get("bootstrap") or "embedded").strip() != "embedded":
            channel["bootstrap"] = bootstrap


def scratch_copy(raw: dict[str, Any], *, copy_name: str, root: Path, stamp: str
                 ) -> tuple[dict[str, Any], list[ScratchOutput]]:
    """The YAML mapping of copy ``copy_name`` of the spec ``raw`` (as loaded from its file) and
    its outputs. ``root`` is the copy's scratch dir; ``stamp`` tells chaos runs apart.

    Contract: a run of the copy writes nothing the spec's own pipeline keeps. Moved are the
    name, ``work_dir``, every ``file://`` / ``s3://`` value outside ``sources`` and
    ``transformation`` (the checkpoint storage, ``dead_letter_path``, ``event_times_path``,
    Parquet paths, write-ahead paths, rollups, and any such field a spec gains), explicit channel
    topics, PostgreSQL tables, Kafka sink topics and their ``commit_marker_topic``, Iceberg
    tables (and a local SQLite catalog: :func:`_to_scratch_catalog`), Delta paths; the sinks'
    (and real-cluster channels') servers when the ``chaos`` block names scratch ones. ``raw``
    is not changed.

    Raises:
        ChaosRefusedError: a store of the copy would lie in one of the spec's, or one of the
            spec's in the copy's (a scratch dir inside the pipeline's work dir, an ``s3://``
            store that is a whole bucket): the message names both and the fix.
    """
    data = copy.deepcopy(raw)
    original_name = str(data["name"])
    data["name"] = _name(original_name, copy_name, stamp)
    data["work_dir"] = str(root / "work")
    data.setdefault("checkpoint", {})
    data["checkpoint"].setdefault("storage", "file://checkpoints")
    for channel in data.get("channels") or []:
        if channel.get("topic"):
            channel["topic"] = f"{channel['topic']}.chaos-{stamp}-{copy_name}"
    stages, originals = raw_parts(data), raw_parts(raw)  # the names are the original spec's
    labels: dict[Where, str] = {("checkpoint", "storage"): "checkpoints"}
    _to_scratch_servers(data)
    for stage, original_stage in zip(stages, originals, strict=True):
        stage_name = original_stage.name
        for number, sink in enumerate(_sinks(stage.data)):
            where: Where = (*stage.where, "sinks", number)
            labels[(*where, "path")] = f"out-{stage_name}-{number}-{sink.get('name', sink.get('type'))}"
            if sink.get("type") == "postgres":
                sink["table"] = _table(str(sink["table"]), stamp, copy_name)
            elif sink.get("type") == "kafka":
                sink["topic"] = f"{sink['topic']}.chaos-{stamp}-{copy_name}"
                marker = str(sink.get("commit_marker_topic") or DEFAULT_MARKER_TOPIC)
                sink["commit_marker_topic"] = f"{marker}.chaos-{stamp}-{copy_name}"
            elif sink.get("type") == "iceberg":
                sink["table"] = _table(str(sink["table"]), stamp, copy_name)
                _to_scratch_catalog(sink, root, stage_name)
    for where, uri in list(_storage_leaves(data)):
        label = labels.get(where) or re.sub(r"[^A-Za-z0-9_.-]", "_", _field(where))
        _put(data, where, _uri(uri, root, label, stamp, copy_name, original_name))
    for (field, mine), (their_field, theirs) in ((m, t) for m in _stores(data) for t in _stores(raw)):
        if _overlap(mine, theirs):
            raise ChaosRefusedError(
                f"the {copy_name} copy's {field} ({mine}) and the spec's {their_field} ({theirs}) overlap: the copy "
                "would write into (or clean up) the pipeline's own store; give --scratch a dir outside the "
                "pipeline's stores, and an s3:// store a prefix (s3://BUCKET/PREFIX), not a whole bucket")
    outputs: list[ScratchOutput] = []
    for stage, original_stage in zip(stages, originals, strict=True):
        stage_name = original_stage.name
        for sink, original in zip(_sinks(stage.data), _sinks(original_stage.data), strict=True):
            kind = str(sink.get("type"))
            name = str(sink.get("name", kind))
            if kind in OUTPUT_KINDS:
                field = {"parquet": "path", "postgres": "table", "kafka": "topic", "iceberg": "table",
                         "delta": "path"}[kind]
                marker = ((str(original.get("commit_marker_topic") or DEFAULT_MARKER_TOPIC),
                           str(sink["commit_marker_topic"])) if kind == "kafka" else None)
                outputs.append(ScratchOutput(stage_name, name, kind, str(sink[field]), str(original[field]),
                                             marker))
    return data, outputs
