"""Checking a stage's transformation against its input without running it (``validate --deep``).

:func:`check_transformation` builds the stage's input as a streaming DataFrame with exactly the
columns its source gives (the schema its Spark data source reports, from the source registry)
over an empty streaming file source, so nothing is read and no broker or database is asked;
calls the transformation on it the way every run does
(:func:`~barrierflow.runtime.stage_query.apply_transformation`); and asks Spark's own check of
streaming plans (``UnsupportedOperationChecker.checkForStreaming``, what ``writeStream.start()``
runs before a query starts) whether the result can run in the spec's output mode. What it
refuses, each a :class:`~barrierflow.errors.SpecError` naming the spec field:

* ``transformation.function``: the module or callable cannot be imported; calling it raises
  (Spark's AnalysisException for a column the input does not have, with the input's columns);
  it returns something other than a streaming DataFrame built on its input;
* ``event_time.column``: not among the input's columns, or not a timestamp;
* ``sources.json_fields``: a field named like one of the Kafka source's own columns;
* ``transformation.output_mode``: Spark refuses the output mode for the plan (an aggregation
  without a watermark in ``append``, ``complete`` without an aggregation, ...);
* ``transformation.deterministic``: the plan holds a nondeterministic expression (``rand()``,
  ``uuid()``, ...) while the spec declares the transformation deterministic;
* ``sinks.key_columns`` / ``sinks.key_column``: a key column the output does not have.

Fields are prefixed with ``stages[i].`` for a stage of a multi-stage pipeline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from barrierflow.errors import SpecError, UserInputError
from barrierflow.runtime.stage_query import apply_transformation
from barrierflow.sources.registry import kind_named
from barrierflow.spec.models import KafkaSinkSpec, PostgresSinkSpec, StageSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class TransformationShape:
    """What a stage's transformation takes and gives: column name -> Spark type (simple string)."""

    stage: str
    input_columns: dict[str, str]
    output_columns: dict[str, str]


#: PySpark logs every AnalysisException with a DataFrame context (a stack of JSON) on these;
#: the check reports the error itself.
_QUERY_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")


@contextlib.contextmanager
def _quiet_query_context() -> Iterator[None]:
    """Silence PySpark's query-context loggers for the block. They are taken through
    ``PySparkLogger.getLogger``: a plain ``logging.getLogger`` would create them as standard
    loggers first, and PySpark's own logging call (keyword ``errorClass``) would then fail
    with a TypeError for every later AnalysisException of the process."""
    from pyspark.logger import PySparkLogger

    loggers = [PySparkLogger.getLogger(name) for name in _QUERY_CONTEXT_LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, before, strict=True):
            logger.disabled = disabled


def _columns(df: DataFrame) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


def _listing(columns: dict[str, str]) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns.items())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _spark_message(exc: BaseException) -> str:
    """Spark's message without its plan dump and SQLSTATE suffix."""
    line = _first_line(exc)
    return line.split(" SQLSTATE:")[0].rstrip(";").rstrip()


def check_transformation(spark: SparkSession, spec: StageSpec, *, spec_path: str, source_type: str,
                         scratch_dir: str, prefix: str = "", stage: str | None = None,
                         channel_key_column: str | None = None) -> TransformationShape:
    """Check the transformation of the stage whose (derived) spec is ``spec`` (module docstring).

    Args:
        spark: any local session (nothing is executed).
        source_type: the registered source kind the stage reads (``channel`` for channel inputs).
        scratch_dir: an empty directory the empty streaming input reads.
        prefix: ``stages[i].`` for a stage of a multi-stage pipeline, else empty.
        stage: the stage's name in messages (default: the spec's name).
        channel_key_column: the ``key_column`` of the channel the stage writes, if any.

    Raises:
        SpecError: one problem, naming the field (module docstring).
    """
    name = stage or spec.name
    where = f"stage {name!r}: " if prefix else ""
    function = spec.transformation.function
    try:
        ddl = kind_named(source_type).row_schema(spec.source)
    except UserInputError as exc:
        raise SpecError(spec_path, [(f"{prefix}sources.json_fields", f"{where}{exc}")]) from None
    df = spark.readStream.schema(ddl).format("json").load(scratch_dir)
    given = _columns(df)
    if spec.event_time is not None:
        column = spec.event_time.column
        if column not in given:
            raise SpecError(spec_path, [("event_time.column", (
                f"{where}column {column!r} is not among the columns the source gives ({_listing(given)}); name "
                "the timestamp column the watermarks follow (for a Kafka source in format json, a json_fields "
                "entry of type timestamp; 'timestamp' is the record's own time)"))])
        if given[column] != "timestamp":
            raise SpecError(spec_path, [("event_time.column", (
                f"{where}column {column!r} is of type {given[column]}, not timestamp; event time needs a timestamp "
                "column (declare it as type timestamp in json_fields)"))])
    out = _transformed(df, spec, spec_path=spec_path, prefix=prefix, where=where, given=given)
    _check_output_mode(spark, out, spec, spec_path=spec_path, prefix=prefix, where=where)
    if spec.transformation.deterministic and not out._jdf.queryExecution().analyzed().deterministic():
        raise SpecError(spec_path, [(f"{prefix}transformation.deterministic", (
            f"{where}{function} returns rows computed with a nondeterministic expression (such as rand() or "
            "uuid()), so a replay after a failure can give other rows; make the rows depend on the input only, "
            "or declare deterministic: false (barrierflow chaos then refuses the pipeline)"))])
    produced = _columns(out)
    _check_keys(spec, produced, spec_path=spec_path, prefix=prefix, where=where, channel_key_column=channel_key_column)
    return TransformationShape(name, given, produced)


def _transformed(df: DataFrame, spec: StageSpec, *, spec_path: str, prefix: str, where: str,
                 given: dict[str, str]) -> DataFrame:
    from pyspark.errors import AnalysisException
    from pyspark.sql import DataFrame

    function = spec.transformation.function
    field = f"{prefix}transformation.function"
    try:
        with _quiet_query_context():
            out = apply_transformation(df, spec, spec_path)
    except SpecError as exc:
        problems = [(f"{prefix}{f}" if f.startswith("transformation") else f, f"{where}{m}") for f, m in exc.problems]
        raise SpecError(spec_path, problems) from None
    except AnalysisException as exc:
        raise SpecError(spec_path, [(field, (
            f"{where}{function} does not fit the columns the source gives ({_listing(given)}): Spark says "
            f"{_spark_message(exc)}"))]) from None
    except Exception as exc:  # the user's code: whatever it raises is reported, naming it
        raise SpecError(spec_path, [(field, (
            f"{where}{function} raised {type(exc).__name__} when called on the source's columns "
            f"({_listing(given)}): {_first_line(exc)}"))]) from None
    if not isinstance(out, DataFrame):
        raise SpecError(spec_path, [(field, f"{where}{function} returned {type(out).__name__}, not a DataFrame")])
    if not out.isStreaming:
        raise SpecError(spec_path, [(field, (
            f"{where}{function} returned a DataFrame that does not read its input (not streaming); build the "
            "result from the DataFrame it is given"))])
    return out


def _check_output_mode(spark: SparkSession, out: DataFrame, spec: StageSpec, *, spec_path: str, prefix: str,
                       where: str) -> None:
    from pyspark.errors import AnalysisException

    mode = spec.transformation.output_mode
    jvm = spark._jvm
    assert jvm is not None
    modes = jvm.org.apache.spark.sql.streaming.OutputMode
    output_mode = {"append": modes.Append, "update": modes.Update, "complete": modes.Complete}[mode]()
    try:
        jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker.checkForStreaming(
            out._jdf.queryExecution().analyzed(), output_mode)
    except AnalysisException as exc:
        message = _spark_message(exc)
        hint = ""
        if mode == "append" and "watermark" in message.lower():
            hint = ("; in append mode an aggregation emits a row once the watermark passed its event-time window: "
                    "call df = ctx.with_watermark(df) before the aggregation and group by a window of "
                    "event_time.column, or use output_mode update")
        raise SpecError(spec_path, [(f"{prefix}transformation.output_mode", (
            f"{where}Spark refuses output mode {mode!r} for what {spec.transformation.function} returns: "
            f"{message}{hint}"))]) from None


def _check_keys(spec: StageSpec, produced: dict[str, str], *, spec_path: str, prefix: str, where: str,
                channel_key_column: str | None) -> None:
    sink = spec.sink
    wanted: list[tuple[str, str]] = []
    if isinstance(sink, PostgresSinkSpec) and sink.mode == "upsert":
        wanted = [(f"{prefix}sinks.key_columns", c) for c in sink.key_columns]
    elif isinstance(sink, KafkaSinkSpec) and sink.key_column:
        wanted = [(f"{prefix}sinks.key_column", sink.key_column)]
    if channel_key_column:
        wanted = [(f"{prefix}sinks.key_column", channel_key_column)]
    for field, column in wanted:
        if column not in produced:
            raise SpecError(spec_path, [(field, (
                f"{where}key column {column!r} is not among the columns {spec.transformation.function} returns "
                f"({_listing(produced)})"))])
