"""What the driver JVM did during a benchmark run, and a clean JVM between runs.

Benchmarks that compare modes run them one after another on one SparkSession, so one mode's
leftovers must not be charged to the next:

* :func:`settle` unloads every state store provider Spark still holds (Spark unloads those of
  stopped queries only at its next maintenance, up to a minute later, so a finished run's
  state, a million keys and its retained versions, stayed on the heap into the next mode)
  and runs a full collection, so every run starts from the same heap.
* :class:`JvmUsage` reads the JVM's CPU time (``/proc/<pid>/stat``) and its collectors' time
  (JMX) before and after a run, so a benchmark can print records per JVM CPU-second and the
  time spent collecting next to the throughput: a run that lost throughput with the same CPU
  time lost it inside the JVM (collection, maintenance), not to another process.

Contract: both only read or reset JVM-side state; they never touch a running query (call
:func:`settle` between runs only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_STATE_STORE_OBJECT = "org.apache.spark.sql.execution.streaming.state.StateStore$"


def _jvm(spark: SparkSession) -> Any:
    return spark._jvm  # type: ignore[attr-defined]  # py4j view of the driver JVM


def jvm_pid(spark: SparkSession) -> int:
    """The process id of the driver JVM behind ``spark``."""
    return int(_jvm(spark).java.lang.ProcessHandle.current().pid())


def settle(spark: SparkSession) -> None:
    """Unload all loaded state store providers and collect garbage (between runs only)."""
    jvm = _jvm(spark)
    state_store = jvm.py4j.reflection.ReflectionUtil.classForName(_STATE_STORE_OBJECT).getField("MODULE$").get(None)
    state_store.stop()  # unloads every provider; maintenance restarts with the next query's first load
    jvm.java.lang.System.gc()


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class JvmUsage:
    """CPU seconds of the JVM process and seconds its collectors ran, at one moment."""

    cpu_seconds: float
    gc_seconds: float

    @classmethod
    def now(cls, spark: SparkSession) -> JvmUsage:
        jvm = _jvm(spark)
        pid = jvm_pid(spark)
        beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
        gc_ms = sum(max(0, int(bean.getCollectionTime())) for bean in beans)
        return cls(cpu_seconds=_cpu_seconds(pid), gc_seconds=gc_ms / 1000.0)

    def since(self, earlier: JvmUsage) -> JvmUsage:
        """The usage between ``earlier`` and this moment."""
        return JvmUsage(self.cpu_seconds - earlier.cpu_seconds, self.gc_seconds - earlier.gc_seconds)
