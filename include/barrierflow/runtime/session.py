"""The SparkSession of a barrierflow job: Spark's session with barrierflow's data sources."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from barrierflow.spark import session as spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.spec.models import SparkSpec

#: Sessions that have barrierflow's data sources (registering costs a Python round trip each).
_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def build_session(spec: SparkSpec, app_name: str = "barrierflow") -> SparkSession:
    """Return a SparkSession configured for barrierflow (creating or reusing one), with the
    generator, Kafka, channel and write-ahead (staging area) data sources registered."""
    session = spark_session.build_session(spec, app_name)
    register_data_sources(session)
    return session


def register_data_sources(session: SparkSession) -> None:
    """Register barrierflow's Python data sources on ``session`` (idempotent: once per session)."""
    if session in _REGISTERED:
        return
    from barrierflow.sinks.staging import StagingDataSource
    from barrierflow.sources.channel import ChannelDataSource
    from barrierflow.sources.generator import GeneratorDataSource
    from barrierflow.sources.kafka import KafkaDataSource

    for source in (GeneratorDataSource, KafkaDataSource, ChannelDataSource, StagingDataSource):
        session.dataSource.register(source)
    _REGISTERED.add(session)
