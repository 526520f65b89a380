"""Typed pipeline spec models (YAML files in ``include/pipelines/``).

Every model forbids unknown fields, so a typo is an error naming the field rather than a
silently ignored setting. Durations accept ``"500ms"``, ``"5s"``, ``"2 minutes"`` or a
number of seconds. Storage URIs are ``file://PATH`` (a relative PATH of a spec file is taken
relative to ``$BARRIERFLOW_HOME``, else the spec file's folder: :mod:`barrierflow.spec.paths`)
or ``s3://BUCKET/PREFIX`` (endpoint, region and credentials come from the standard AWS
environment: ``AWS_ENDPOINT_URL_S3``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``;
never from the spec).
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AliasChoices, Field, field_validator, model_validator

from barrierflow.spec.alerts import AlertsSpec
from barrierflow.spec.checkpoint_mode import CheckpointMode
from barrierflow.spec.durations import parse_duration_seconds
from barrierflow.spec.kafka_client import KafkaClientField, NestedClientFields
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec, atomic_problems
from barrierflow.spec.metrics import MetricsSpec
from barrierflow.spec.restart import RestartSpec
from barrierflow.spec.sink_set import several_sinks_problem
from barrierflow.spec.sources import KAFKA_METADATA_COLUMNS as KAFKA_METADATA_COLUMNS
from barrierflow.spec.sources import GeneratorSourceSpec, KafkaSourceSpec, SourceSpec
from barrierflow.spec.sources import SilentPeriod as SilentPeriod
from barrierflow.spec.sources import refuse_metadata_names as refuse_metadata_names
from barrierflow.spec.strict import Strict as _Strict

SPEC_VERSION = 1


def _storage_uri(value: str) -> str:
    if not isinstance(value, str) or not (value.startswith("file://") or value.startswith("s3://")):
        raise ValueError(
            f"expected a storage URI 'file://PATH' or 's3://BUCKET/PREFIX', got {value!r}"
        )
    if value.startswith("s3://") and len(value) <= len("s3://"):
        raise ValueError("an s3:// URI needs a bucket: 's3://BUCKET/PREFIX'")
    if value.startswith("file://") and len(value) <= len("file://"):
        raise ValueError("a file:// URI needs a path: 'file://var/checkpoints' or 'file:///abs/path'")
    return value


def _positive_seconds_or_null(value: Any, refusal: str) -> float | None:
    """``value`` as seconds (a number or a duration like ``'10s'``), None for null; ``refusal``
    is the error when it is not above 0 seconds."""
    if value is None:
        return None
    seconds = parse_duration_seconds(value)
    if seconds <= 0:
        raise ValueError(refusal)
    return seconds


def spark_reader_problems(sources: list[Any], *, where: str, event_time: EventTimeSpec | None,
                          trigger: TriggerSpec, checkpoint: CheckpointSpec) -> str | None:
    """Why a pipeline whose ``sources`` (at ``where``, e.g. ``sources``) include a Kafka source
    with ``reader: spark`` cannot run as given, or None. Spark's connector plans its own
    batches, so what needs barrierflow's batch planner is refused, naming the field and the fix:
    watermark alignment and idleness (per-partition decisions), adaptive batch sizing and the
    synchronous-upload baseline (holding the source)."""
    spark_readers = [(i, s) for i, s in enumerate(sources)
                     if isinstance(s, KafkaSourceSpec) and s.reader == "spark"]
    if not spark_readers:
        return None
    index, source = spark_readers[0]
    named = f"{where}.{index} ({source.name!r}, reader: spark)"
    fix = "set reader: python on that source, or remove the setting"
    if event_time is not None and event_time.alignment is not None:
        return (f"event_time.alignment (watermark alignment) needs barrierflow's Kafka reader, which pauses "
                f"partitions per batch; {named} is read by Spark's connector: {fix}")
    if event_time is not None and event_time.idle_timeout is not None:
        return (f"event_time.idle_timeout (idle partitions) needs barrierflow's Kafka reader, which tracks "
                f"each partition's watermark; {named} is read by Spark's connector: {fix}")
    if trigger.target_batch_duration is not None:
        return (f"trigger.target_batch_duration (adaptive batch sizing) needs barrierflow's Kafka reader, which "
                f"sizes each batch; {named} is read by Spark's connector: {fix} (the connector caps each batch at "
                "max_records_per_batch times the topics' partitions)")
    if checkpoint.synchronous_upload:
        return (f"checkpoint.synchronous_upload holds the source until an upload finished, which Spark's "
                f"connector cannot be told; {named}: {fix}")
    return None


def ttl_problems(transformation: TransformationSpec, *, where: str, event_time: EventTimeSpec | None,
                 spark: SparkSpec) -> str | None:
    """Why ``transformation`` (at ``where``, e.g. ``transformation``) cannot have its ``ttl``, or
    None: an event-time TTL needs the spec's ``event_time`` (the watermark drives the expiry)
    and RocksDB state (Spark's ``transformWithState`` runs on RocksDB only)."""
    if transformation.ttl is None:
        return None
    if event_time is None:
        return (f"{where}.ttl needs event_time: a key's state expires when the watermark passes its newest event "
                "time plus ttl; add event_time.column and event_time.watermark_delay, or remove ttl")
    if transformation.output_mode == "complete":
        return (f"{where}.ttl with output_mode complete: complete mode writes every key's state in every batch, "
                "which a keyed function with a TTL does not keep; use output_mode update or append, or remove ttl")
    if spark.state_store != "rocksdb":
        return (f"{where}.ttl needs RocksDB state (Spark's transformWithState, which keeps the expiring state, runs "
                "on RocksDB only); set spark.state_store: rocksdb, or remove ttl")
    return None


class ParquetSinkSpec(_Strict):
    """Parquet files, written ahead per micro-batch and published when the epoch's checkpoint completes."""

    name: str = "parquet"
    type: Literal["parquet"]
    path: str

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        return _storage_uri(value)


class DiscardSinkSpec(_Strict):
    """Drops every row (benchmarks)."""

    name: str = "discard"
    type: Literal["discard"]



def _former_write_ahead_name(data: Any, sink: str) -> Any:
    """``staging_path`` (the former name of ``write_ahead_path``) is still read, with a
    FutureWarning naming the new name; both at once are refused."""
    if isinstance(data, dict) and "staging_path" in data:
        if "write_ahead_path" in data:
            raise ValueError(f"{sink} sink: give write_ahead_path only (staging_path is its former name)")
        warnings.warn(f"{sink} sink: 'staging_path' is deprecated, name it 'write_ahead_path' (same meaning)",
                      FutureWarning, stacklevel=2)
    return data


class PostgresSinkSpec(_Strict):
    """Rows into a PostgreSQL table with PREPARE TRANSACTION / COMMIT PREPARED per epoch.

    The connection string comes from the environment variable named by ``dsn_env`` (never
    from the spec); the server needs ``max_prepared_transactions`` > 0."""

    name: str = "postgres"
    type: Literal["postgres"]
    dsn_env: str = Field("BARRIERFLOW_POSTGRES_DSN", pattern=r"^[A-Z_][A-Z0-9_]*$")
    table: str = Field(..., pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
    mode: Literal["insert", "upsert"] = "insert"
    key_columns: list[str] = Field(default_factory=list, description="conflict target for upsert")
    write_ahead_path: str = Field("", validation_alias=AliasChoices("write_ahead_path", "staging_path"),
                                  description="storage URI of the write-ahead area; default in work_dir "
                                              "(staging_path: its deprecated former name, still read)")

    @model_validator(mode="before")
    @classmethod
    def _former_name(cls, data: Any) -> Any:
        return _former_write_ahead_name(data, "postgres")

    @model_validator(mode="after")
    def _upsert_needs_keys(self) -> PostgresSinkSpec:
        if self.mode == "upsert" and not self.key_columns:
            raise ValueError("mode 'upsert' needs key_columns (the table's unique key)")
        return self


class KafkaSinkSpec(_Strict, NestedClientFields):
    """Records into a Kafka topic, exactly once through Kafka transactions (confluent-kafka's
    transactional producer; the commit markers are read with kafka-python)."""

    client_owner = "Kafka sink"

    name: str = "kafka"
    type: Literal["kafka"]
    bootstrap_servers: str
    topic: str
    key_column: str | None = None
    commit_marker_topic: str = "__barrierflow_commits"
    write_ahead_path: str = Field("", validation_alias=AliasChoices("write_ahead_path", "staging_path"),
                                  description="storage URI of the write-ahead area; default in work_dir "
                                              "(staging_path: its deprecated former name, still read)")
    transaction_timeout_ms: int = Field(60_000, ge=1000)
    client: KafkaClientField = None

    @model_validator(mode="before")
    @classmethod
    def _former_name(cls, data: Any) -> Any:
        return _former_write_ahead_name(data, "kafka")


SinkSpec = Annotated[
    ParquetSinkSpec | DiscardSinkSpec | PostgresSinkSpec | KafkaSinkSpec | IcebergSinkSpec | DeltaSinkSpec,
    Field(discriminator="type"),
]


class CheckpointSpec(_Strict):
    """Checkpoint options, named after Flink's where they fit."""

    storage: str
    interval: float = 5.0
    timeout: float = 600.0
    min_pause: float = 0.0
    max_concurrent: int = Field(1, ge=1, le=16)
    tolerable_failed_checkpoints: int = Field(0, ge=0)
    retained: int = Field(3, ge=1)
    mode: CheckpointMode = CheckpointMode.ALIGNED
    alignment_timeout: float = 0.0
    synchronous_upload: bool = Field(
        False, description="wait for the upload before processing continues (paper's baseline)"
    )
    async_nice: int = Field(
        0, ge=0, le=19,
        description="nice value (Linux) of the asynchronous phase's threads (hashing, upload, sink pre-commit): "
                    "19 gives them only the CPU processing leaves, 0 the same priority as processing")
    sink_commit_retries: int = Field(
        5, ge=0, le=30, description="retries of a completed checkpoint's sink commit before the job stops")
    sink_commit_backoff: float = Field(
        1.0, description="wait before the first commit retry; doubles per retry, at most 30 s")

    @field_validator("storage")
    @classmethod
    def _check_storage(cls, value: str) -> str:
        return _storage_uri(value)

    @field_validator("interval", "timeout", "min_pause", "alignment_timeout", "sink_commit_backoff", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    # Settings named after Flink's that barrierflow does not implement yet are refused rather
    # than silently ignored; the issue that implements them (pipelines of several stages)
    # lifts these checks.
    @field_validator("mode")
    @classmethod
    def _implemented_mode(cls, value: CheckpointMode) -> CheckpointMode:
        if value is not CheckpointMode.ALIGNED:
            raise ValueError(f"{value.value!r} is not implemented yet: single-stage pipelines are always aligned "
                             "(all partitions are cut at one batch boundary); remove the setting or use 'aligned'")
        return value

    @field_validator("alignment_timeout")
    @classmethod
    def _implemented_alignment_timeout(cls, value: float) -> float:
        if value != 0.0:
            raise ValueError("an alignment timeout is not implemented yet: single-stage pipelines never wait for "
                             "alignment; remove the setting or set it to 0s")
        return value

    @model_validator(mode="after")
    def _positive(self) -> CheckpointSpec:
        if self.interval <= 0:
            raise ValueError("interval must be greater than 0 seconds")
        if self.timeout <= 0:
            raise ValueError("timeout must be greater than 0 seconds")
        if self.sink_commit_backoff <= 0:
            raise ValueError("sink_commit_backoff must be greater than 0 seconds, e.g. '1s'")
        return self


class AlignmentSpec(_Strict):
    """Watermark alignment (Flink's FLIP-182): the batch planner pauses a source partition whose
    watermark is more than ``max_drift`` ahead of the slowest active (not idle) partition of
    its ``group`` and resumes it when the others caught up. ``update_interval``: how often the
    paused set is recomputed (0 = before every batch). A pipeline has one source, so every
    partition of it belongs to ``group``; the name is recorded in manifests."""

    group: str = Field("default", min_length=1)
    max_drift: float
    update_interval: float = 1.0

    @field_validator("max_drift", "update_interval", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    @model_validator(mode="after")
    def _positive_drift(self) -> AlignmentSpec:
        if self.max_drift <= 0:
            raise ValueError("max_drift must be greater than 0 seconds, e.g. '2s' (below watermark_delay keeps "
                             "the slow partitions' records from arriving late)")
        return self


class EventTimeSpec(_Strict):
    """Event time: ``column`` and Spark's ``watermark_delay``; per source partition the
    watermark is its newest event time minus ``watermark_delay``.

    ``idle_timeout``: a partition that received no new record for this long (and has nothing
    left to read) is idle: it does not hold back alignment and is reported idle; its next record
    makes it active again. ``null`` = never idle. ``alignment``: see :class:`AlignmentSpec`."""

    column: str = "event_time"
    watermark_delay: float = 10.0
    idle_timeout: float | None = None
    alignment: AlignmentSpec | None = None

    @field_validator("watermark_delay", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    @field_validator("idle_timeout", mode="before")
    @classmethod
    def _idle(cls, value: Any) -> float | None:
        return _positive_seconds_or_null(
            value, "idle_timeout must be greater than 0 seconds (or null: partitions are never idle)")


class TriggerSpec(_Strict):
    """``interval``: the micro-batch trigger. ``target_batch_duration`` (adaptive batch sizing,
    the micro-batch analogue of Flink's buffer debloating): the planner sizes each batch from a
    batch-time model fitted over recent batches (:mod:`barrierflow.flow_control.batch_sizing`) so that
    it takes about this long, bounded below by ``MIN_RECORDS_PER_PARTITION`` and above by the
    source's ``max_records_per_batch``;
    ``null`` = every batch takes up to ``max_records_per_batch`` per partition."""

    interval: float = 1.0
    target_batch_duration: float | None = None

    @field_validator("interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    @field_validator("target_batch_duration", mode="before")
    @classmethod
    def _target(cls, value: Any) -> float | None:
        return _positive_seconds_or_null(
            value, "target_batch_duration must be greater than 0 seconds, e.g. '1s' (or null: off)")

    @model_validator(mode="after")
    def _target_not_below_interval(self) -> TriggerSpec:
        if self.target_batch_duration is not None and self.target_batch_duration < self.interval:
            raise ValueError(f"target_batch_duration ({self.target_batch_duration:g}s) is below trigger.interval "
                             f"({self.interval:g}s): a batch starts at most once per interval; raise "
                             "target_batch_duration or lower trigger.interval")
        return self


class TransformationSpec(_Strict):
    """``function`` is ``'package.module:callable'``; it receives ``(df, TransformContext)``
    and returns the DataFrame to write. ``options`` are passed through untouched.

    ``deterministic``: whether the same input always gives the same output rows (no wall-clock
    time, random numbers or lookups of changing data in the rows). ``barrierflow chaos``
    compares a run under kills with a failure-free run row by row, so it refuses a
    transformation declared ``false``.

    ``state_defaults``: value column (an aggregate's alias) -> the value its state starts from in
    every key stored before ``barrierflow upgrade`` added the column to an aggregation with state
    (``null``: as if no row had been aggregated); read only by ``upgrade`` (docs/upgrades.md).

    ``ttl``: event-time TTL of the function's keyed state (a duration): a key's state expires when
    the watermark passes its newest event time plus ``ttl`` (docs/state.md, "Event-time TTL"); it
    needs ``event_time`` and ``spark.state_store: rocksdb`` and a function that supports it
    (:func:`barrierflow.keyed_state.supports_ttl`). ``emit_on_expiry``: write a final row per key
    when its state expires (needs ``ttl``)."""

    function: str
    output_mode: Literal["append", "update", "complete"] = "append"
    options: dict[str, Any] = Field(default_factory=dict)
    deterministic: bool = True
    state_defaults: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    ttl: float | None = None
    emit_on_expiry: bool = False

    @field_validator("ttl", mode="before")
    @classmethod
    def _ttl(cls, value: Any) -> float | None:
        return _positive_seconds_or_null(value, "ttl must be greater than 0 seconds, e.g. '10 minutes' (or null: "
                                                "state never expires)")

    @model_validator(mode="after")
    def _emit_needs_ttl(self) -> TransformationSpec:
        if self.emit_on_expiry and self.ttl is None:
            raise ValueError("emit_on_expiry is set without ttl: nothing expires; add ttl (e.g. '10 minutes') or "
                             "remove emit_on_expiry")
        return self

    @field_validator("function")
    @classmethod
    def _import_path(cls, value: str) -> str:
        module, sep, attr = value.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"expected an import path 'package.module:function', got {value!r}")
        return value


class SparkSpec(_Strict):
    """Where and how Spark runs the job.

    ``state_store``: Spark's state store provider, ``hdfs`` (HDFSBackedStateStoreProvider,
    the default) or ``rocksdb`` (RocksDBStateStoreProvider; see docs/pipeline-spec.md). The
    provider of an existing Spark checkpoint is recorded in it: Spark keeps using that one.

    ``py_packages``: the user's own code, shipped with every job (see
    :mod:`barrierflow.spark.user_code`); checked to exist when a job builds its session."""

    master: str = "local[2]"
    shuffle_partitions: int = Field(4, ge=1)
    state_store: Literal["hdfs", "rocksdb"] = "hdfs"
    conf: dict[str, str] = Field(default_factory=dict)
    py_packages: list[str] = Field(
        default_factory=list,
        description="local directories of Python packages (each with an __init__.py) the transformation imports; "
                    "every job zips each one and ships it to its driver and executors (barrierflow.spark.user_code). "
                    "A relative path is taken relative to $BARRIERFLOW_HOME, else the spec file's folder")

    @field_validator("py_packages")
    @classmethod
    def _package_paths(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry.strip():
                raise ValueError("an empty path: give the directory of a Python package, e.g. 'my_pkg'")
            if "://" in entry:
                raise ValueError(f"{entry!r} is a URI; py_packages are local directories the driver zips, e.g. "
                                 "'my_pkg' or '/srv/project/my_pkg'")
        return value


class VerificationSpec(_Strict):
    """Checkpoint verification (``barrierflow verify``) and how its results are used.

    ``expectations``: path of the Great Expectations suite (JSON) run on the checkpoint's
    state in deep verification; empty = ``include/expectations/<pipeline name>.json``.
    ``output_expectations`` / ``rollup_expectations``: the suites the data-quality DAG
    (``barrierflow quality``) runs on the committed output of the newest ``quality_epochs``
    epochs and on the daily rollups; empty = ``include/expectations/<name>-output.json`` /
    ``<name>-rollups.json`` (a suite that does not exist is reported as skipped).
    ``prefer_verified``: retention keeps the newest ``checkpoint.retained`` checkpoints whose
    stored verification passed (topped up with the newest unverified ones if fewer passed).

    The scheduled verification (Airflow DAG ``barrierflow_verify__<name>``) runs every
    ``interval`` (at least a minute) and verifies the newest ``latest`` checkpoints (unset:
    ``checkpoint.retained``, the ones retention keeps); with ``deep`` it also restores each one
    and runs the suite on its state, which needs Spark where Airflow runs the task."""

    expectations: str = ""
    output_expectations: str = ""
    rollup_expectations: str = ""
    quality_epochs: int = Field(3, ge=1)
    prefer_verified: bool = True
    interval: float = 600.0
    latest: int | None = Field(None, ge=1)
    deep: bool = False

    @field_validator("interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        seconds = parse_duration_seconds(value)
        if seconds < 60:
            raise ValueError(f"the scheduled verification runs at most once a minute; got {seconds:g}s")
        return seconds


class ChaosSpec(_Strict):
    """Chaos runs of the pipeline (``barrierflow chaos``) and its Airflow DAG.

    ``dag``: make the triggered DAG ``barrierflow_chaos__<name>`` (default false: a pipeline
    gets no chaos DAG unless its spec asks for one, so nobody triggers scratch runs against
    production servers by a click).

    A chaos run works on scratch copies of the pipeline; files and object stores move under the
    scratch dir or prefix, but the copies' PostgreSQL tables and Kafka topics are created on the
    servers the spec names unless these send them elsewhere:

    * ``postgres_dsn_env``: the environment variable holding the connection string of a scratch
      database; every PostgreSQL sink of a copy writes there (its table and its
      ``barrierflow_commits`` rows). The scratch database must hold a table of each sink's name
      (chaos creates its scratch tables like it).
    * ``kafka_bootstrap_servers``: a scratch Kafka cluster; every Kafka sink of a copy writes its
      topic and commit-marker topic there, and every channel on a real cluster its topic. It must
      hold each sink's topic and commit-marker topic (chaos copies their partition counts). Kafka
      sources are read where they are: a copy only reads them.

    With ``dag: true`` a spec with a PostgreSQL sink needs ``postgres_dsn_env`` (another variable
    than its sinks'), one with a Kafka sink or a channel on a real cluster
    ``kafka_bootstrap_servers`` (not its sinks'): :func:`chaos_dag_problems`."""

    dag: bool = False
    postgres_dsn_env: str = Field("", pattern=r"^$|^[A-Z_][A-Z0-9_]*$")
    kafka_bootstrap_servers: str = ""


def chaos_dag_problems(chaos: ChaosSpec | None, sinks: list[tuple[str, Any]], external_channels: list[str]) -> str:
    """Why the chaos DAG the spec asks for (``chaos.dag``) would write on the pipeline's own
    servers, as one message naming each sink and the field to set; '' when it would not (or no
    DAG is asked for). ``sinks``: (where, sink spec) of every sink; ``external_channels``: the
    names of the channels on a real Kafka cluster."""
    if chaos is None or not chaos.dag:
        return ""
    problems: list[str] = []
    postgres = [(where, s) for where, s in sinks if isinstance(s, PostgresSinkSpec)]
    if postgres and not chaos.postgres_dsn_env:
        problems.append(f"PostgreSQL sink(s) {', '.join(w for w, _ in postgres)}: set chaos.postgres_dsn_env to the "
                        "variable holding the DSN of a scratch database (the copies create their tables there)")
    problems += [f"{where}: chaos.postgres_dsn_env is the sink's own dsn_env {sink.dsn_env}; name a scratch "
                 "database's variable" for where, sink in postgres if sink.dsn_env == chaos.postgres_dsn_env]
    kafka = [(where, s) for where, s in sinks if isinstance(s, KafkaSinkSpec)]
    if (kafka or external_channels) and not chaos.kafka_bootstrap_servers:
        named = [w for w, _ in kafka] + [f"channel {c!r}" for c in external_channels]
        problems.append(f"Kafka sink(s) or channel(s) {', '.join(named)}: set chaos.kafka_bootstrap_servers to a "
                        "scratch Kafka cluster (the copies create their topics there)")
    problems += [f"{where}: chaos.kafka_bootstrap_servers is the sink's own cluster; name a scratch cluster"
                 for where, sink in kafka if sink.bootstrap_servers == chaos.kafka_bootstrap_servers]
    if not problems:
        return ""
    return ("chaos.dag: true would let the chaos DAG create scratch tables and topics on the pipeline's own servers; "
            + "; ".join(problems) + " (or remove chaos.dag)")


class ReportsSpec(_Strict):
    """Data-quality reports over the completed checkpoints (``barrierflow skew``, Airflow DAG
    ``barrierflow_skew__<name>``, hourly).

    ``max_skew``: largest allowed event-time skew of one checkpoint (newest minus oldest known
    per-partition max event time at the barrier); ``null`` = not checked.
    ``max_lag``: largest allowed lag of a partition (checkpoint completion time minus its max
    event time); ``null`` (the default) = not checked, because the generator's event times are
    synthetic (they start at ``event_time_start``); set it for Kafka sources, whose event
    times are recorded per range read (``sources/event_times.py``).
    ``idle_checkpoints``: a partition whose offset did not advance over this many consecutive
    checkpoints (the newest ones) is reported idle (as is one the newest manifest marks idle
    by ``event_time.idle_timeout``).
    ``max_late_rows``: largest allowed number of rows Spark dropped as late in one checkpoint's
    epoch (manifest ``event_time.rows_dropped_by_watermark``); ``auto`` (the default) = 0 when
    ``event_time.alignment`` is set, else not checked."""

    max_skew: float | None = 60.0
    max_lag: float | None = None
    idle_checkpoints: int = Field(3, ge=1)
    max_late_rows: int | Literal["auto"] | None = Field(
        "auto", description="largest allowed Spark numRowsDroppedByWatermark of one checkpoint's epoch; 'auto' = "
                            "0 with event_time.alignment, else not checked; null = not checked")

    @field_validator("max_late_rows")
    @classmethod
    def _late_rows(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 0:
            raise ValueError(f"max_late_rows must be 0 or more, 'auto' or null; got {value}")
        return value

    @field_validator("max_skew", "max_lag", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float | None:
        return None if value is None else parse_duration_seconds(value)


class BatchSpec(_Strict):
    """The batch side over the committed Parquet output (``barrierflow rollup``, ``recompute``).

    ``rollups``: storage URI of the daily rollups (Parquet, partitioned by ``day``); empty =
    ``rollups`` next to the sink's folder (``file://var/demo/output`` -> ``file://var/demo/rollups``).
    ``time_column``: the output column whose UTC date is the rollup day (``window_start``).
    ``keys``: the columns a rollup row is per (besides the day); ``measures``: the columns
    summed. ``window_columns``: the columns that, with ``keys``, identify one output row
    (the stream-vs-batch comparison compares row by row on them). The defaults fit
    ``keyed_window_counts``. ``output_event_interval``: the Airflow asset of the output (on
    which the rollup and data-quality DAGs run) is updated at most this often, although epochs
    commit every checkpoint interval."""

    rollups: str = ""
    time_column: str = "window_start"
    window_columns: list[str] = Field(default_factory=lambda: ["window_start", "window_end"], min_length=1)
    keys: list[str] = Field(default_factory=lambda: ["key"], min_length=1)
    measures: list[str] = Field(default_factory=lambda: ["count", "value_sum"], min_length=1)
    output_event_interval: float = 600.0

    @field_validator("output_event_interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    @field_validator("rollups")
    @classmethod
    def _rollups(cls, value: str) -> str:
        return _storage_uri(value) if value else value


CheckpointT = TypeVar("CheckpointT", bound=CheckpointSpec)


class PipelineWide(_Strict, Generic[CheckpointT]):
    """The sections that apply to a whole pipeline, declared once for both spec classes: the
    pipeline (:class:`barrierflow.spec.stages.PipelineSpec`, what the loader returns for every
    YAML) and the runnable spec of one of its stages (:class:`StageSpec`), which carries the
    pipeline's sections as its stage runs them (:mod:`barrierflow.pipeline.stage_options`).
    ``CheckpointT``: the checkpoint section's class (a pipeline of several stages allows
    ``mode`` and ``alignment_timeout``, a single-stage YAML does not)."""

    version: Literal[1] = SPEC_VERSION
    name: str = Field(..., pattern=r"^[a-z][a-z0-9_-]{0,62}$")
    description: str = ""
    work_dir: str = Field(
        "",
        description=("local Spark checkpoint, snapshots, write-ahead batches (a pipeline of several stages: each "
                     "stage's work dir below it); default var/<name> (see barrierflow.spec.paths)"),
    )
    trigger: TriggerSpec = TriggerSpec()
    checkpoint: CheckpointT
    event_time: EventTimeSpec | None = None
    dead_letter_path: str = Field(
        "", description="storage URI of the malformed records (written by the executors; a pipeline of several "
                        "stages: each stage below <uri>/stages/<stage>); default <work_dir>/dead-letter. On a "
                        "cluster: shared storage (s3://...)")
    event_times_path: str = Field(
        "", description="storage URI where the executors record the newest event time of each Kafka (and channel) "
                        "range they read (sources/event_times.py; the driver folds them into manifests; a pipeline "
                        "of several stages: each stage below <uri>/stages/<stage>); default <work_dir>/event-times. "
                        "On a cluster: shared storage (s3://...)")
    spark: SparkSpec = SparkSpec()
    verification: VerificationSpec | None = None
    reports: ReportsSpec | None = None
    restart: RestartSpec | None = Field(
        None, description="restart strategy of 'barrierflow run' (fixed-delay, exponential-delay, failure-rate); "
                          "none = a failure ends the run")
    metrics: MetricsSpec | None = Field(
        None, description="serve Prometheus metrics while 'barrierflow run' runs; none = not served")
    alerts: AlertsSpec | None = Field(
        None, description="where alerts go (failed tasks, checkpoint age, verification, restarts); none = no alerts")
    chaos: ChaosSpec | None = None

    @field_validator("dead_letter_path", "event_times_path")
    @classmethod
    def _shared_paths(cls, value: str) -> str:
        return _storage_uri(value) if value else value


#: The names of the pipeline-wide fields (declared on :class:`PipelineWide` only).
PIPELINE_WIDE_FIELDS: tuple[str, ...] = ("version", "name", "description", "work_dir", "trigger", "checkpoint",
                                         "event_time", "dead_letter_path", "event_times_path", "spark",
                                         "verification", "reports", "restart", "metrics", "alerts", "chaos")


class StageSpec(PipelineWide[CheckpointSpec]):
    """The runnable spec of one stage: one source, a transformation, its sinks (one, or several
    Parquet/Iceberg/Delta sinks, :mod:`barrierflow.spec.sink_set`), and the
    pipeline's sections (:class:`PipelineWide`). A single-stage YAML is validated as one (its
    fields are top-level), and the loader makes it a pipeline of that one stage; a stage of
    several runs as one derived by :func:`barrierflow.pipeline.stage_options.derive_stage_spec`."""

    sources: list[SourceSpec] = Field(..., min_length=1, max_length=1)
    transformation: TransformationSpec
    sinks: list[SinkSpec] = Field(..., min_length=1)
    batch: BatchSpec = BatchSpec()

    @model_validator(mode="after")
    def _sinks_written_together(self) -> StageSpec:
        problem = several_sinks_problem("this pipeline", list(self.sinks))
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _spark_reader_supported(self) -> StageSpec:
        problem = spark_reader_problems(list(self.sources), where="sources", event_time=self.event_time,
                                        trigger=self.trigger, checkpoint=self.checkpoint)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _ttl_supported(self) -> StageSpec:
        problem = ttl_problems(self.transformation, where="transformation", event_time=self.event_time,
                               spark=self.spark)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _chaos_dag_on_scratch_servers(self) -> StageSpec:
        sinks = [(f"sink {s.name!r}", s) for s in self.sinks]
        problem = chaos_dag_problems(self.chaos, sinks, []) or atomic_problems(sinks)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def source(self) -> GeneratorSourceSpec | KafkaSourceSpec:
        return self.sources[0]

    @property
    def sink(self) -> (ParquetSinkSpec | DiscardSinkSpec | PostgresSinkSpec | KafkaSinkSpec | IcebergSinkSpec
                       | DeltaSinkSpec):
        """The stage's first sink (its only one, unless it writes several Parquet/Iceberg/Delta
        sinks: code that handles each sink iterates :attr:`sinks`)."""
        return self.sinks[0]
