"""A Kafka source read by Spark's own connector (``reader: spark``), with barrierflow's checkpoints.

Spark's Kafka connector (``spark.readStream.format("kafka")``, the ``spark-kafka`` JVM artifact
set) plans its own batches: barrierflow cannot cap a partition, pause it or write a barrier into
its offsets. So the stage reads two sources, unioned into the one DataFrame its transformation
sees:

* the connector, decoded to the rows barrierflow's Kafka reader gives
  (:func:`~barrierflow.sources.kafka.schema_for`): ``raw`` as it is, ``json`` with
  ``json_fields`` parsed in Spark;
* a barrier-only Python source (``format("barrierflow_barrier")``, :class:`BarrierStreamReader`)
  that never yields a row. Its ``latestOffset`` reads the coordinator's barrier request
  (:class:`~barrierflow.barriers.control.ControlChannel`) and returns barrierflow's offset
  format with no partitions: ``{"partitions": {}, "barrier": n, "barrier_triggered_ms": t,
  "connector": "kafka"}``; the barrier is sticky, like every barrierflow source's.

Spark asks every source of the query for its latest offset when it plans batch V and writes
all of them into ``offsets/V`` before V runs. The batch whose barrier-only offset first carries
barrier n is the barrier batch of checkpoint n, and its cut is the connector's end offsets in
the same file: the batch runs whole before ``commits/V`` is written, so the state of version V
holds exactly the records before those offsets. A replayed batch (``offsets/V`` without
``commits/V``) replays both lines, hence the same barrier at the same offsets.
:func:`barrierflow.spark.offset_log.merge_connector_offsets` folds the two lines into one
barrierflow offset (partitions ``"topic:p"``), so the stage tracker, manifests, restore,
savepoints, verification (the source range check included) and the sinks' batch ends read it
as they read the Python reader's. A barrier requested while the topics have no new data still
closes its epoch: the barrier-only offset changed, so Spark runs an (empty) batch.

What this costs: a Python planner round trip per batch (the barrier-only source's
``latestOffset``), no rows through Python on the read path; each record's JSON is parsed once,
in the JVM, by barrierflow's decoder with Spark's ``from_json`` rows (:func:`decoded_rows`,
:mod:`barrierflow.sources.flat_json`). On one topic it runs at about plain Spark's rate with Spark's own
checkpoints (bench/results/kafka-side-by-side/).

Malformed records (``format: json``: not a JSON object; a field missing, null or of the wrong
type) are rows of nulls, as Spark's ``from_json`` gives them, unless the source sets
``malformed: dead_letter``: then they go to the dead-letter output in the same micro-batch,
with the reason barrierflow's reader gives, and are not rows (:func:`_dead_lettered`: the
connector reads each batch twice for it). ``barrierflow validate`` warns about the default.

What needs barrierflow's planner is refused when the spec loads
(:func:`barrierflow.spec.models.spark_reader_problems`): watermark alignment, idle partitions,
adaptive batch sizing and the synchronous-upload baseline. Spark's own watermark
(``withWatermark``) is part of the cut as it always is (``batchWatermarkMs`` in ``offsets/V``).
A restore whose committed epochs beyond the checkpoint must be replayed batch by batch with
their output suppressed is refused too (the connector cannot be told where a batch ends):
:func:`refuse_replay`.

Options of the connector: ``subscribe`` (the topics), ``startingOffsets`` from
``starting_offsets`` (``earliest``, ``latest``, or every partition of the topics with the
explicit ones given and ``-2`` = earliest for the rest, as barrierflow's reader starts them),
``maxOffsetsPerTrigger`` = ``max_records_per_batch`` times the topics' partitions when the
query starts (Spark splits it over the partitions by their backlog), ``failOnDataLoss`` true
(a range deleted by retention fails the query instead of being skipped),
``kafka.isolation.level`` ``read_committed`` (like barrierflow's reader: no open or aborted
transaction is read), the consumer settings of :data:`CONSUMER_SETTINGS` and the ``client``
block as Kafka's Java client settings
(:func:`barrierflow.kafka_io.security.java_client_config`; resolved on the driver, they travel
in Spark's plan to the executors; Spark redacts them in its logs and UI).

The consumer settings (:data:`CONSUMER_SETTINGS`):

* ``fetch.max.wait.ms`` 50 (:data:`FETCH_MAX_WAIT_MS`, the wait of barrierflow's own reader):
  with the Java client's 500 ms a range that reaches its partition's end, as a query's ranges do
  once it has caught up, was read in 0.8-1.1 s more than a range of the same size inside the
  log, 4 partitions on 2 cores (bench/results/kafka-side-by-side/); the broker holds a fetch
  that finds no new data up to this long.
* ``max.poll.records`` 10,000 (:data:`MAX_POLL_RECORDS`) and ``max.partition.fetch.bytes``
  4 MiB (:data:`MAX_PARTITION_FETCH_BYTES`). The connector asks the broker for its partition's
  earliest and latest offsets after every ``poll`` (two requests, which also move the
  consumer's position away from the data it fetched ahead), and seeks back before the next:
  with the Java client's 500 records per poll and 1 MiB per fetch, a task reading 50,000
  records made about 100 polls and 200 offset requests. Fewer, larger polls read the Nexmark
  passthrough, conversion and selection queries (JSON events of a few hundred bytes, 4
  partitions, ``local[2]``) 1.23-1.44x faster, medians of 3 alternating rounds
  (bench/results/nexmark/). The cost is memory on the executors: each pooled consumer may hold
  one fetch of up to 4 MiB (Spark keeps up to 64 consumers per executor,
  ``spark.kafka.consumer.cache.capacity``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.errors import SourceError, UserInputError
from barrierflow.spec.kafka_params import KafkaSourceParams

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from barrierflow.spec.sources import KafkaSourceSpec

log = logging.getLogger(__name__)

#: The JVM artifact set of the connector (``include/barrierflow/jvm/artifacts.lock``).
JVM_SET = "spark-kafka"
#: The value of ``"connector"`` in the barrier-only source's offsets (see :mod:`barrierflow.spark.offset_log`).
CONNECTOR = "kafka"
_EARLIEST, _LATEST = -2, -1
#: The connector's ``kafka.fetch.max.wait.ms``: what barrierflow's own reader waits for
#: (``fetch.wait.max.ms`` of :class:`barrierflow.kafka_io.consumer.ConsumerSettings`); the
#: module docstring ("Options of the connector") says why not the Java client's 500 ms.
FETCH_MAX_WAIT_MS = 50
#: The connector's ``kafka.max.poll.records`` (the Java client's default: 500; module docstring).
MAX_POLL_RECORDS = 10_000
#: The connector's ``kafka.max.partition.fetch.bytes`` (the Java client's default: 1 MiB).
MAX_PARTITION_FETCH_BYTES = 4 * 1024 * 1024
#: Kafka's Java client settings the connector's consumers are given (without the ``kafka.``
#: prefix); the module docstring says why each.
CONSUMER_SETTINGS: Mapping[str, str] = MappingProxyType({
    "fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
    "max.poll.records": str(MAX_POLL_RECORDS),
    "max.partition.fetch.bytes": str(MAX_PARTITION_FETCH_BYTES),
})
#: The column holding a record's parsed JSON object between the parse and the fields' projection.
_RECORD = "__barrierflow_record"
#: The column holding a record's value on the way to the dead-letter split (:func:`_dead_lettered`).
_PAYLOAD = "__barrierflow_payload"


# --------------------------------------------------------------------------- the barrier-only source


class BarrierDataSource(DataSource):
    """Options: ``schema`` (the DDL of the rows it would give: the connector's, so the two union),
    ``control_dir``, ``source`` (the Kafka source's name, for logs)."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_barrier"

    def schema(self) -> str:
        return self.options["schema"]

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return BarrierStreamReader(dict(self.options))


class BarrierStreamReader(DataSourceStreamReader):
    """Gives no rows; its offsets carry the sticky barrier (module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.control = ControlChannel(options["control_dir"])
        self.source = options.get("source", "kafka")

    def initialOffset(self) -> dict:
        return SourceOffset({}, 0, {"connector": CONNECTOR}).to_json()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        """``start`` with barrier n when the coordinator requests a newer one than it carries."""
        begin = SourceOffset.from_json(start)
        request = self.control.barrier_request()
        if request.checkpoint_id <= begin.barrier:
            return start
        log.info("source %s (Spark's connector): the next batch closes epoch %d", self.source, request.checkpoint_id)
        return begin.with_barrier(request.checkpoint_id, request.triggered_ms).to_json()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return []

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return iter(())

    def commit(self, end: dict) -> None:
        """Nothing to release."""


# --------------------------------------------------------------------------- the connector's options


def starting_offsets(spec: KafkaSourceSpec, partitions: list[str]) -> str:
    """The connector's ``startingOffsets`` for ``spec.starting_offsets``; ``partitions`` are
    the topics' partitions now (``"topic:p"``): explicit offsets name every one of them (the
    connector wants them all), those not given start at earliest (``-2``).

    Raises:
        UserInputError: a topic that is not in ``topics``, or a negative offset other than -1/-2.
        SourceError: a partition that does not exist.
    """
    wanted = spec.starting_offsets
    if isinstance(wanted, str):
        return wanted
    unknown = sorted(set(wanted) - set(spec.topics))
    if unknown:
        raise UserInputError(f"Kafka source {spec.name!r}: starting_offsets names topics {unknown} that are not in "
                             f"topics {spec.topics}")
    chosen: dict[str, dict[str, int]] = {topic: {} for topic in spec.topics}
    for key in partitions:
        topic, _, number = key.rpartition(":")
        chosen.setdefault(topic, {})[number] = _EARLIEST
    for topic, by_partition in wanted.items():
        for number, offset in by_partition.items():
            if str(int(number)) not in chosen.get(topic, {}):
                raise SourceError(f"Kafka source {spec.name!r}: starting_offsets names partition {topic}:{number} "
                                  f"that does not exist (the topics have {sorted(partitions)})")
            if offset < 0 and offset not in (_EARLIEST, _LATEST):
                raise UserInputError(f"Kafka source {spec.name!r}: starting offset {offset} of {topic}:{number} is "
                                     "invalid (use an offset >= 0, -2 for earliest or -1 for latest)")
            chosen[topic][str(int(number))] = int(offset)
    return json.dumps(chosen, sort_keys=True)


def connector_options(spec: KafkaSourceSpec, partitions: list[str]) -> dict[str, str]:
    """The options of ``spark.readStream.format("kafka")`` for ``spec`` (module docstring),
    ``partitions`` being the topics' partitions now. The result holds resolved secrets: hand it
    to the reader and nowhere else.

    Raises:
        KafkaSecurityError: a secret reference or TLS file of ``client`` does not resolve here.
        UserInputError, SourceError: ``starting_offsets`` does not fit the topics.
    """
    from barrierflow.kafka_io.security import java_client_config

    options = {
        "kafka.bootstrap.servers": spec.bootstrap_servers,
        "subscribe": ",".join(spec.topics),
        "startingOffsets": starting_offsets(spec, partitions),
        "failOnDataLoss": "true",
        "kafka.isolation.level": "read_committed",
        "maxOffsetsPerTrigger": str(spec.max_records_per_batch * max(1, len(partitions))),
        "includeHeaders": "true" if spec.format == "raw" else "false",
        **{f"kafka.{name}": value for name, value in CONSUMER_SETTINGS.items()},
    }
    options.update({f"kafka.{name}": value for name, value in java_client_config(spec.client).items()})
    return options


# --------------------------------------------------------------------------- the stage's input


def decoded_rows(raw: DataFrame, spec: KafkaSourceSpec, carry: Sequence[str] = (), *,
                 keep_payload: bool = False) -> DataFrame:
    """The connector's rows as barrierflow's reader gives them: ``raw`` (topic, partition,
    offset, timestamp, key, value, headers) or ``json`` (the metadata columns and the
    ``json_fields``; a field missing, null or of the wrong type is null, a value that is not a
    JSON object gives nulls in every field; :func:`_dead_lettered` takes such records out).
    The stream's decoding, and the batch re-read's (:mod:`barrierflow.batch.source_records`);
    ``carry``: columns of ``raw`` kept beside them; ``keep_payload`` (``json``): the record's
    value too, as column :data:`_PAYLOAD`."""
    from pyspark.sql import functions as F

    from barrierflow.sources.flat_json import decoded_record
    from barrierflow.sources.kafka import JSON_SPARK_TYPES

    meta = [F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp")]
    kept = [F.col(f"`{name}`") for name in carry]
    if spec.format == "raw":
        return raw.select(*meta, F.col("key"), F.col("value"), F.col("headers"), *kept)
    # timestamps are parsed as text first: an ISO-8601 string (UTC without an offset) or epoch ms
    parsed = {name: ("STRING" if kind == "timestamp" else JSON_SPARK_TYPES[kind])
              for name, kind in spec.json_fields.items()}
    # Parsed once into one struct column, the fields taken from it in a projection of their own:
    # a field taken straight off ``from_json(...)`` carries its own copy of the parse, which
    # Spark's optimizer prunes to that one field, so every record was parsed once per field used.
    payload = [F.col("value").alias(_PAYLOAD)] if keep_payload else []
    parsed_rows = raw.select(*meta, *payload, decoded_record(raw.sparkSession, F.col("value"), parsed).alias(_RECORD),
                             *kept)
    record = F.col(_RECORD)
    fields: list[Column] = []
    for name, kind in spec.json_fields.items():
        value = record.getField(name)
        if kind == "timestamp":
            value = F.coalesce(F.try_to_timestamp(value), F.timestamp_millis(value.try_cast("bigint")))
        fields.append(value.alias(name))
    return parsed_rows.select(*meta, *(F.col(_PAYLOAD) for _ in payload), *fields, *kept)


def _dead_lettered(decoded: DataFrame, spec: KafkaSourceSpec, dead_letter_uri: str) -> DataFrame:
    """``decoded`` (:func:`decoded_rows` with the payload) without its malformed records, which go to
    the dead-letter output in the same micro-batch, as barrierflow's reader writes them
    (``malformed: dead_letter``; without it they stay rows of nulls).

    A record is malformed when one of its ``json_fields`` is null after decoding (the value is
    not a JSON object, or the field is missing, null or of the wrong type: the records
    barrierflow's reader dead-letters). The split is two branches of the batch's rows, unioned:
    the good rows, decoded in the JVM as before, and the malformed rows, which alone reach Python
    (``mapInArrow`` on the executors, :func:`_write_dead_letters`): there they are written, with
    the reason barrierflow's reader gives, and dropped. Nothing reaches the driver. What it
    costs: the connector reads each batch's records twice (each branch scans the batch's
    offset ranges); only malformed records cross into Python. Spark counts the connector twice
    among the query's sources (its offset log has a line for each branch), so a query's state
    cannot switch between the two ways: the run refuses that as a change of streaming sources
    (:mod:`barrierflow.runtime.state_compat`)."""
    from functools import partial, reduce

    from pyspark.sql import functions as F

    malformed = reduce(lambda a, b: a | b, [F.col(name).isNull() for name in spec.json_fields])
    good = decoded.filter(~malformed).drop(_PAYLOAD)
    writer = partial(_write_dead_letters, uri=dead_letter_uri, spec_json=spec.model_dump_json())
    return good.unionByName(decoded.filter(malformed).mapInArrow(writer, good.schema))


def _write_dead_letters(batches: Iterator[Any], *, uri: str, spec_json: str) -> Iterator[Any]:
    """On an executor: write one task's malformed records (Arrow batches of :func:`decoded_rows`'s
    columns with the payload) as dead letters, one file per Kafka partition named by the range
    of their offsets (a replayed batch rewrites the same file); yields no row. The reason is
    the one barrierflow's reader gives; a record that reader would have read (a form only it
    parses) names the fields Spark could not decode."""
    from barrierflow.kafka_io.decoding import RecordDecoder
    from barrierflow.sources.dead_letter import write_dead_letters

    spec = KafkaSourceParams.from_json(spec_json)
    decoder = RecordDecoder(spec)
    found: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        for row in batch.to_pylist():
            failed = [name for name in spec.json_fields if row[name] is None]
            letter = decoder.dead_letter(row["topic"], row["partition"], row["offset"], row[_PAYLOAD],
                                         otherwise=f"fields {failed} did not decode in Spark's connector "
                                                   "(reader: spark)")
            found.setdefault(letter["partition"], []).append(letter)
    for key, letters in found.items():
        offsets = [letter["offset"] for letter in letters]
        if uri:
            write_dead_letters(uri, spec.name, key, min(offsets), max(offsets) + 1, letters)
        else:
            log.warning("source %s: dropped %d malformed records of %s: no dead_letter_uri", spec.name, len(letters),
                        key)
    return iter(())


def load_connector(reader: Any, needs: str) -> DataFrame:
    """``reader.load()`` of Spark's Kafka connector (a streaming or batch reader).

    Raises:
        SourceError: the connector is not on this Spark driver's class path; the message starts
            with ``needs`` (what wanted it) and names the fix.
    """
    try:
        return reader.load()
    except Exception as exc:
        text = str(exc)
        if "kafka" in text.lower() and ("DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text):
            raise SourceError(
                f"{needs} needs Spark's Kafka connector on this Spark driver's class path: run `make install` "
                f"(JVM artifact set {JVM_SET!r}) and start the pipeline with barrierflow (its session adds the "
                f"jars), or pass them to spark-submit (--jars $(python -m barrierflow.jvm classpath {JVM_SET} | "
                "tr : ,))") from None
        raise


def read_stream(spark: SparkSession, spec: KafkaSourceSpec, options: Mapping[str, str]) -> DataFrame:
    """The stage's input rows: the connector's, decoded, unioned with the barrier-only source
    (module docstring). ``options`` are the reader options every stage gets
    (:func:`barrierflow.runtime.stage_query.reader_options`: ``control_dir`` is used).

    Raises:
        SourceError: the topics cannot be listed, or the connector's jars are not on the driver's
            class path (naming the fix).
        KafkaSecurityError, UserInputError: as :func:`connector_options`.
    """
    from barrierflow.kafka_io.admin import beginning_offsets
    from barrierflow.sources.kafka import schema_for

    partitions = sorted(beginning_offsets(spec))
    reader = spark.readStream.format("kafka")
    for key, value in connector_options(spec, partitions).items():
        reader = reader.option(key, value)
    raw = load_connector(reader, f"Kafka source {spec.name!r} has reader: spark, but it")
    barriers = (spark.readStream.format(BarrierDataSource.name()).option("schema", schema_for(spec))
                .option("control_dir", options["control_dir"]).option("source", spec.name).load())
    if spec.format == "json" and spec.dead_letters_malformed:
        rows = _dead_lettered(decoded_rows(raw, spec, keep_payload=True), spec, options.get("dead_letter_uri", ""))
    else:
        rows = decoded_rows(raw, spec)
    return rows.unionByName(barriers)


def refuse_replay(spec: KafkaSourceSpec, checkpoint_id: int) -> None:
    """Raise: restoring checkpoint ``checkpoint_id`` would replay committed epochs with their
    output suppressed batch by batch, which needs barrierflow's reader (module docstring).

    Raises:
        UserInputError: always, naming the source and the fix.
    """
    raise UserInputError(
        f"restoring checkpoint {checkpoint_id} would replay epochs whose output a sink already committed, batch by "
        f"batch as they first ran; Kafka source {spec.name!r} is read by Spark's connector (reader: spark), which "
        "cannot be told where each batch ends. Restore the latest checkpoint (--latest), or pass "
        "--accept-duplicates if writing that output again is what you want")
