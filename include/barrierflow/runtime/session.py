"""The SparkSession of a barrierflow job: Spark's session with barrierflow's data sources."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from barrierflow.spark import session as spark_session
from barrierflow.spark.s3a import s3a_conf, s3a_jars
from barrierflow.storage.object_dir import is_object_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.pipeline.model import OpenedPipeline
    from barrierflow.spec.models import SparkSpec

#: Sessions that have barrierflow's data sources (registering costs a Python round trip each).
_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def build_session(spec: SparkSpec, app_name: str = "barrierflow", *, sources: Sequence[Any] = (),
                  jvm_sets: Sequence[str] = (), work_dirs: Sequence[str] = ()) -> SparkSession:
    """Return a SparkSession configured for barrierflow (creating or reusing one), with the
    generator, Kafka, channel, barrier-only and write-ahead data sources
    registered. ``sources`` (the pipeline's source specs) put the jars their kinds need on the
    class path (:attr:`~barrierflow.sources.registry.SourceKind.jvm_set`: Spark's Kafka
    connector for ``reader: spark``), and only then; ``jvm_sets`` name sets to add beyond
    those (a session shared by pipelines of every kind, such as the test suite's). A work dir
    of ``work_dirs`` on object storage adds Hadoop's S3A file system and its configuration
    (:mod:`barrierflow.spark.s3a`).

    Raises:
        JvmArtifactError: a needed jar is not installed (naming ``make install``).
        S3AUnavailableError: a work dir is on object storage and the S3A jars are not installed.
    """
    jars = source_jars(sources, jvm_sets) + work_dir_jars(work_dirs)
    conf = s3a_conf() if any(is_object_uri(w) for w in work_dirs) else {}
    session = spark_session.build_session(spec, app_name, jars=jars, conf=conf)
    register_data_sources(session)
    return session


def source_jars(sources: Sequence[Any], extra_sets: Sequence[str] = ()) -> list[str]:
    """The installed jars (paths) of every JVM artifact set ``sources`` need, and of
    ``extra_sets``; empty for none.

    Raises:
        JvmArtifactError: a jar of such a set is not installed (naming ``make install``).
    """
    from barrierflow.jvm.classpath import set_jars
    from barrierflow.sources.registry import jvm_sets

    names = sorted({*jvm_sets(list(sources)), *extra_sets})
    return [str(jar) for name in names for jar in set_jars(name)]


def work_dir_jars(work_dirs: Sequence[str]) -> list[str]:
    """The installed jars of Hadoop's S3A file system when a work dir of ``work_dirs`` is on
    object storage (``s3://``, ``s3a://``); empty otherwise.

    Raises:
        S3AUnavailableError: they are not installed (naming the set and ``make install``).
    """
    remote = [w for w in work_dirs if is_object_uri(w)]
    return s3a_jars(remote[0]) if remote else []


def register_data_sources(session: SparkSession) -> None:
    """Register barrierflow's Python data sources on ``session`` (idempotent: once per session)."""
    if session in _REGISTERED:
        return
    from barrierflow.sinks.write_ahead import WriteAheadDataSource
    from barrierflow.sources.channel import ChannelDataSource
    from barrierflow.sources.generator import GeneratorDataSource
    from barrierflow.sources.kafka import KafkaDataSource
    from barrierflow.sources.spark_kafka import BarrierDataSource

    for source in (GeneratorDataSource, KafkaDataSource, ChannelDataSource, BarrierDataSource, WriteAheadDataSource):
        session.dataSource.register(source)
    _REGISTERED.add(session)


def session_for(pipeline: OpenedPipeline, spark: SparkSession | None) -> SparkSession:
    """``spark``, else a session built from the first stage's ``spark`` block (a local one for a
    command line): the session of an offline operation on ``pipeline``'s state (read, upgrade)."""
    if spark is not None:
        return spark
    return spark_session.build_session(pipeline.stages[0].spec.spark, app_name=f"barrierflow-state-{pipeline.name}")
