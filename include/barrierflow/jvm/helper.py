"""barrierflow's own JVM helper: compiled from its checked-in Java source against the Spark jars
PySpark ships, and loaded into a running Spark session.

Contract:

* :func:`helper_jar` compiles ``java/BarrierflowValueColumns.java`` with ``javac`` (Java 17)
  into a jar in the JVM cache (``$BARRIERFLOW_JVM_CACHE`` or ``~/.cache/barrierflow/maven``,
  under ``helpers/``), named by the sha256 of the source and PySpark's version: a jar is built
  once per source and Spark version (``make install`` builds it: ``python -m barrierflow.jvm
  helper``), never reused across either. The jar is written under a temporary name and renamed.
* :func:`value_columns_helper` adds the jar to the session's SparkContext (executors load the
  classes the tasks need from it) and returns an instance of the helper class loaded through a
  class loader of its own on the driver.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.jvm.lockfile import cache_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["HELPER_CLASS", "HELPER_SOURCE", "helper_jar", "value_columns_helper"]

#: The checked-in Java source of the helper.
HELPER_SOURCE = Path(__file__).with_name("java") / "BarrierflowValueColumns.java"
#: The helper's class name.
HELPER_CLASS = "barrierflow.jvm.BarrierflowValueColumns"


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def helper_jar(cache: Path | None = None) -> Path:
    """The helper's jar, compiled first when the cache has none for this source and Spark version.

    Raises:
        JvmArtifactError: ``javac`` is missing or the source does not compile (its first error quoted).
    """
    import pyspark

    source = HELPER_SOURCE.read_bytes()
    digest = hashlib.sha256(source + pyspark.__version__.encode()).hexdigest()[:16]
    target = (cache or cache_dir()) / "helpers" / f"barrierflow-helpers-{digest}.jar"
    if target.is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise JvmArtifactError(
            f"the JVM helper {HELPER_SOURCE.name} must be compiled, and javac is not on PATH; install a Java 17 JDK "
            "(apt-get install openjdk-17-jdk-headless) and run 'python -m barrierflow.jvm helper'")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="barrierflow-helper-") as work:
        classes = Path(work) / "classes"
        done = subprocess.run([javac, "-nowarn", "--release", "17", "-d", str(classes), "-cp",
                               str(_spark_jars() / "*"), str(HELPER_SOURCE)], capture_output=True, text=True)
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:300])
            raise JvmArtifactError(f"javac could not compile {HELPER_SOURCE} against {_spark_jars()}: {first}")
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, target)
    return target


#: The helper instance per SparkContext and jar: one class loader each (py4j caches a class's
#: methods by its name, so a second loader's copy of the class would be called with the first's).
_LOADED: dict[tuple[str, str], Any] = {}


def value_columns_helper(spark: SparkSession) -> Any:
    """An instance of the helper class (py4j), its jar added to ``spark``'s SparkContext once and
    loaded once per SparkContext."""
    jar = helper_jar()
    context = spark.sparkContext
    loaded = _LOADED.get((context.applicationId, jar.name))
    if loaded is not None:
        return loaded
    jsc = context._jsc.sc()  # type: ignore[union-attr]
    uri = jar.resolve().as_uri()
    if jar.name not in str(jsc.listJars().mkString("\n")):
        jsc.addJar(str(jar))
    jvm = context._jvm  # type: ignore[attr-defined]
    gateway = context._gateway  # type: ignore[attr-defined]
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.net.URI(uri).toURL()
    loader = jvm.java.net.URLClassLoader(urls, jvm.Thread.currentThread().getContextClassLoader())
    helper = loader.loadClass(HELPER_CLASS)
    instance = helper.getConstructor(gateway.new_array(jvm.Class, 0)).newInstance(gateway.new_array(jvm.Object, 0))
    _LOADED[(context.applicationId, jar.name)] = instance
    return instance
