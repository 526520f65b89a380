"""The one query builder: the Structured Streaming query of one stage, whatever the pipeline's shape.

Every stage of a running pipeline (:class:`~barrierflow.runtime.running.RunningPipeline`; a
single-stage pipeline is a pipeline of one stage) is built here the same way, so what the
reader is told is told to every stage:

* the source's spec, control dir (barrier requests, holds, replays), dead-letter and
  event-time URIs, event-time column;
* ``planning`` (:class:`~barrierflow.sources.planning.PlanningOptions` of the stage's derived
  spec): per-partition watermarks, idleness, watermark alignment, adaptive batch sizing;
* anything the source kind adds (``extra_options``: the channel source's ``alignment``).

A run's stage observes its input before the transformation (``observe_arrival``): the oldest
and newest arrival of each micro-batch's records, for the freshness of committed output
(:mod:`barrierflow.runtime.freshness`).

Before the query starts, ``before_start`` sees the stage's streaming DataFrame (the stage
runner refuses changes its saved state cannot honour there,
:mod:`barrierflow.runtime.state_compat`).

Each micro-batch goes to ``batch_writer`` (``foreachBatch``: a channel writer or the stager of a
two-phase-commit sink, :func:`barrierflow.sinks.factory.micro_batch_writer`), or to Spark's
``noop`` sink when there is none (``discard``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from barrierflow.sources.planning import PlanningOptions
from barrierflow.sources.registry import ReadInput
from barrierflow.spark.session import apply_query_conf
from barrierflow.spec.models import StageSpec
from barrierflow.transforms.context import TransformContext, load_transformation
from barrierflow.workdir.layout import JobLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from barrierflow.keyed_state.figures import KeyCounters


def reader_options(spec: StageSpec, layout: JobLayout) -> dict[str, str]:
    """The options every stage's reader gets (see the module docstring)."""
    return {
        "spec": spec.source.model_dump_json(),
        "control_dir": str(layout.control),
        "dead_letter_uri": layout.dead_letter_uri(spec),
        "event_time_uri": layout.event_time_uri(spec),
        "event_time_column": spec.event_time.column if spec.event_time else "timestamp",
        "planning": PlanningOptions.from_spec(spec).to_json(),
    }


def apply_transformation(df: DataFrame, spec: StageSpec, spec_path: str,
                         key_counters: KeyCounters | None = None) -> DataFrame:
    """The spec's transformation applied to ``df``, the stage's input rows: how every run,
    and ``barrierflow validate --deep`` (:mod:`barrierflow.runtime.transform_check`), calls it;
    a keyed function counts its keys in ``key_counters`` (the run's; None: not counted).

    Raises:
        SpecError: the transformation cannot be loaded. Whatever the transformation raises.
    """
    transform = load_transformation(spec, spec_path)
    return transform(df, TransformContext(spec, dict(spec.transformation.options), key_counters))


def build_stage_frame(spark: SparkSession, spec: StageSpec, layout: JobLayout, *, spec_path: str,
                      source_format: str, extra_options: Mapping[str, str] | None = None,
                      read_input: ReadInput | None = None, observe_arrival: bool = False,
                      arrival_column: str | None = None, key_counters: KeyCounters | None = None) -> DataFrame:
    """The streaming DataFrame of the stage whose derived spec is ``spec``, not started: read
    with Spark data source ``source_format`` (registered by the caller) and the reader options
    (module docstring), or by ``read_input`` with them (a source kind that reads its input
    otherwise: Spark's Kafka connector), the spec's transformation applied. With
    ``observe_arrival``, the input is observed first
    (:func:`~barrierflow.runtime.freshness.observe_arrival` of ``arrival_column``); a keyed
    function counts its keys in ``key_counters``.

    Raises:
        SpecError: the transformation cannot be loaded. Whatever the transformation raises.
    """
    from barrierflow.runtime.freshness import observe_arrival as observed

    apply_query_conf(spark, spec.spark)
    options = {**reader_options(spec, layout), **(extra_options or {})}
    if read_input is not None:
        frame = read_input(spark, spec.source, options)
    else:
        reader = spark.readStream.format(source_format)
        for key, value in options.items():
            reader = reader.option(key, value)
        frame = reader.load()
    if observe_arrival:
        frame = observed(frame, arrival_column)
    return apply_transformation(frame, spec, spec_path, key_counters)


def start_stage_query(spark: SparkSession, spec: StageSpec, layout: JobLayout, *, spec_path: str,
                      source_format: str, batch_writer: Callable[[Any, int], None] | None,
                      extra_options: Mapping[str, str] | None = None, frame: DataFrame | None = None,
                      read_input: ReadInput | None = None,
                      before_start: Callable[[DataFrame], None] | None = None, observe_arrival: bool = False,
                      arrival_column: str | None = None) -> StreamingQuery:
    """Start the query of the stage whose derived spec is ``spec``: its DataFrame (``frame``,
    else :func:`build_stage_frame`), each micro-batch written with ``batch_writer`` (None: the
    ``noop`` sink), checkpointed to ``layout.spark_checkpoint``, triggered every
    ``spec.trigger.interval``. ``before_start`` is called with the DataFrame before anything is
    started.

    Raises:
        SpecError: the transformation cannot be loaded. Whatever ``before_start`` raises (then
            nothing was started). Spark's errors for a query that does not start.
    """
    apply_query_conf(spark, spec.spark)
    out = frame if frame is not None else build_stage_frame(spark, spec, layout, spec_path=spec_path,
                                                            source_format=source_format,
                                                            extra_options=extra_options, read_input=read_input,
                                                            observe_arrival=observe_arrival,
                                                            arrival_column=arrival_column)
    if before_start is not None:
        before_start(out)
    writer = out.writeStream.outputMode(spec.transformation.output_mode)
    writer = writer.foreachBatch(batch_writer) if batch_writer is not None else writer.format("noop")
    return (writer.option("checkpointLocation", str(layout.spark_checkpoint))
            .queryName(f"barrierflow_{spec.name}_{int(time.time() * 1000)}")
            .trigger(processingTime=f"{int(spec.trigger.interval * 1000)} milliseconds")
            .start())
