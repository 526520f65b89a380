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

#: Settings every barrierflow job needs, whatever the spec says.
REQUIRED_CONF = {
    # The snapshot logic reads HDFSBackedStateStore's <version>.delta/.snapshot files.
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
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
    for key, value in {**spec.conf, **REQUIRED_CONF}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session

