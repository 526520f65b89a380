"""Building the SparkSession barrierflow runs in (jobs, deep verification).

Registering barrierflow's data sources on it is the runtime's business
(:func:`barrierflow.runtime.session.register_data_sources`): this module knows Spark, not the
sources and sinks above it."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.spec.models import SparkSpec

log = logging.getLogger(__name__)

PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
#: The state store provider class of each ``spark.state_store`` value.
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}

#: Settings every barrierflow job needs, whatever the spec says.
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # Keep enough state versions locally that a snapshot's files outlive its async upload.
    "spark.sql.streaming.minBatchesToRetain": "100",
}


def build_session(spec: SparkSpec, app_name: str = "barrierflow") -> SparkSession:
    """Return a SparkSession configured for barrierflow (creating or reusing one)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Started by us, not by spark-submit: the spec chooses the master and, for local
        # masters, the driver binds to loopback only. Under spark-submit its --master wins.
        builder = builder.master(spec.master)
        if spec.master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(spec.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in {**spec.conf, **REQUIRED_CONF, **state_store_conf(spec)}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    apply_state_store(session, spec)
    return session


def state_store_conf(spec: SparkSpec) -> dict[str, str]:
    """The SQL settings of the spec's state store provider (``spark.state_store``), which win
    over ``spark.conf``: barrierflow's snapshot logic reads exactly these providers' files
    (:mod:`barrierflow.spark.state_files`). RocksDB keeps checkpoint format version 1 (plain
    ``<v>.zip``/``<v>.changelog`` names); changelog checkpointing is off unless ``spark.conf``
    turns it on (``ROCKSDB_CHANGELOG``): with it, a restore loads the newest zip Spark's
    maintenance happened to write and replays every changelog after it (all of them before
    the first zip), which made the first batch after a restore minutes long in the restore
    benchmark (docs/benchmarks.md); without it every version is one zip and its SSTs."""
    conf = {PROVIDER_CLASS: PROVIDERS[spec.state_store]}
    if spec.state_store == "rocksdb":
        conf["spark.sql.streaming.stateStore.checkpointFormatVersion"] = "1"
        conf[ROCKSDB_CHANGELOG] = spec.conf.get(ROCKSDB_CHANGELOG, "false")
    return conf


def apply_state_store(session: SparkSession, spec: SparkSpec) -> None:
    """Set the spec's state store settings on ``session`` (a shared session may have served
    a job with the other provider); a query started afterwards uses them when its Spark
    checkpoint is new."""
    for key, value in state_store_conf(spec).items():
        session.conf.set(key, value)

