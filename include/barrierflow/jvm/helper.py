"""barrierflow's own JVM helper: compiled from its checked-in Java sources against the Spark jars
PySpark ships, and loaded into a running Spark session.

The sources (``java/*.java``): ``BarrierflowValueColumns`` (the value-column rewrite of an
aggregation's state, docs/upgrades.md) and ``FlatJson``/``FlatJsonDecoder`` (the decoder of a
Kafka source's ``format: json`` records read through Spark's connector).

Contract:

* :func:`helper_jar` compiles every ``java/*.java`` with ``javac`` (Java 17) into one jar in
  the JVM cache (``$BARRIERFLOW_JVM_CACHE`` or ``~/.cache/barrierflow/maven``, under
  ``helpers/``), named by the sha256 of the sources and PySpark's version: a jar is built once
  per sources and Spark version (``make install`` builds it: ``python -m barrierflow.jvm
  helper``), never reused across either. The jar is written under a temporary name and renamed.
* :func:`helper_instance` adds the jar to the session's SparkContext (executors load the
  classes the tasks need from it) and returns an instance of one of its classes, loaded
  through a class loader of its own on the driver (one loader per SparkContext and jar).
  :func:`value_columns_helper` is the instance of ``BarrierflowValueColumns``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.atomic_files import write_atomic
from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.jvm.lockfile import cache_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FLAT_JSON_CLASS", "HELPER_CLASS", "HELPER_SOURCES", "helper_instance", "helper_jar",
           "value_columns_helper"]

#: The folder of the helper's checked-in Java sources.
HELPER_SOURCES = Path(__file__).with_name("java")
#: The value-column rewrite's class name.
HELPER_CLASS = "barrierflow.jvm.BarrierflowValueColumns"
#: The flat JSON decoder's entry point.
FLAT_JSON_CLASS = "barrierflow.jvm.FlatJson"


def _sources() -> list[Path]:
    return sorted(HELPER_SOURCES.glob("*.java"))


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def helper_jar(cache: Path | None = None) -> Path:
    """The helper's jar, compiled first when the cache has none for this source and Spark version.

    Raises:
        JvmArtifactError: ``javac`` is missing or the source does not compile (its first error quoted).
    """
    import pyspark

    sources = _sources()
    digest_of = hashlib.sha256()
    for source in sources:
        digest_of.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    digest = hashlib.sha256(digest_of.digest() + pyspark.__version__.encode()).hexdigest()[:16]
    target = (cache or cache_dir()) / "helpers" / f"barrierflow-helpers-{digest}.jar"
    if target.is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise JvmArtifactError(
            f"the JVM helper ({HELPER_SOURCES}) must be compiled, and javac is not on PATH; install a Java 17 JDK "
            "(apt-get install openjdk-17-jdk-headless) and run 'python -m barrierflow.jvm helper'")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="barrierflow-helper-") as work:
        classes = Path(work) / "classes"
        done = subprocess.run([javac, "-nowarn", "--release", "17", "-d", str(classes), "-cp",
                               str(_spark_jars() / "*"), *map(str, sources)], capture_output=True, text=True)
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:300])
            raise JvmArtifactError(f"javac could not compile {HELPER_SOURCES} against {_spark_jars()}: {first}")

        def write_jar(partial: Path) -> None:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
                for path in sorted(classes.rglob("*.class")):
                    jar.write(path, path.relative_to(classes).as_posix())

        write_atomic(target, write_jar)
    return target


#: The helper's class loader per SparkContext and jar: one each (py4j caches a class's methods
#: by its name, so a second loader's copy of the class would be called with the first's).
_LOADERS: dict[tuple[str, str], Any] = {}
#: Instances per SparkContext, jar and class.
_INSTANCES: dict[tuple[str, str, str], Any] = {}


def value_columns_helper(spark: SparkSession) -> Any:
    """The instance of the value-column rewrite (:data:`HELPER_CLASS`) for ``spark``."""
    return helper_instance(spark, HELPER_CLASS)


def helper_instance(spark: SparkSession, class_name: str) -> Any:
    """An instance (py4j) of the helper's class ``class_name``, made with its no-argument
    constructor; the jar is added to ``spark``'s SparkContext once and loaded once per SparkContext.

    Raises:
        JvmArtifactError: as :func:`helper_jar`.
    """
    jar = helper_jar()
    context = spark.sparkContext
    cached = _INSTANCES.get((context.applicationId, jar.name, class_name))
    if cached is not None:
        return cached
    loader = _LOADERS.get((context.applicationId, jar.name))
    if loader is None:
        loader = _loader(spark, jar)
        _LOADERS[(context.applicationId, jar.name)] = loader
    jvm = context._jvm  # type: ignore[attr-defined]
    gateway = context._gateway  # type: ignore[attr-defined]
    helper = loader.loadClass(class_name)
    instance = helper.getConstructor(gateway.new_array(jvm.Class, 0)).newInstance(gateway.new_array(jvm.Object, 0))
    _INSTANCES[(context.applicationId, jar.name, class_name)] = instance
    return instance


def _loader(spark: SparkSession, jar: Path) -> Any:
    """A class loader of the helper's jar, the jar added to the SparkContext first (executors)."""
    context = spark.sparkContext
    jsc = context._jsc.sc()  # type: ignore[union-attr]
    uri = jar.resolve().as_uri()
    if jar.name not in str(jsc.listJars().mkString("\n")):
        jsc.addJar(str(jar))
    jvm = context._jvm  # type: ignore[attr-defined]
    gateway = context._gateway  # type: ignore[attr-defined]
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.net.URI(uri).toURL()
    return jvm.java.net.URLClassLoader(urls, jvm.Thread.currentThread().getContextClassLoader())
