"""Regenerate the lock from its roots with Maven (a maintainer's step, never part of an install).

Each set lists its root artifacts (:data:`ROOTS`); Maven resolves their runtime closure once
(``mvn dependency:list``), the jars are fetched into Maven's own local repository, each jar's
sha1 is checked against the one Maven Central publishes, and the sha256 of each becomes the
pin. Changing a version means editing :data:`ROOTS`, running ``python -m barrierflow.jvm lock``
and reviewing the diff of the lock.

A set named in :data:`ON_PYSPARK` goes onto the class path of PySpark's own JVM, which already
carries Spark, Scala, Hadoop and their dependencies: its lock holds only the jars of the closure
that PySpark's ``jars/`` folder lacks (an artifact id PySpark ships, at whatever version, is
left out, so the JVM never sees two versions of one library).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.jvm.install import repository_url, sha256_of
from barrierflow.jvm.lockfile import LockedArtifact

#: The root artifacts of each set: what it is for is said in docs/deployment.md ("JVM artifacts").
ROOTS: dict[str, list[str]] = {
    # Apache Kafka's broker (KRaft, combined broker+controller) for the tests and the embedded
    # broker; log4j-slf4j-impl routes Kafka's slf4j logging to the log4j2 it already carries.
    "kafka-broker": [
        "org.apache.kafka:kafka_2.13:4.3.1",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",
    ],
    # Spark's own Kafka connector (``reader: spark`` of a Kafka source), for the PySpark it is
    # built for: the closure adds spark-token-provider-kafka-0-10, kafka-clients at the version
    # Spark 4.2.0's pom declares (kafka.version 3.9.2) and commons-pool2 to PySpark's jars.
    "spark-kafka": [
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
    ],
    # Hadoop's S3A file system for a work dir (Spark's own checkpoint) on object storage, matched
    # to the Hadoop PySpark ships (hadoop-client-api-3.5.0): the closure adds the AWS SDK v2
    # ``bundle`` at the version hadoop-aws 3.5.0's pom declares (aws-java-sdk-v2.version 2.35.4,
    # one shaded jar of about 650 MiB), the S3 analytics accelerator and wildfly-openssl.
    "spark-s3a": [
        "org.apache.hadoop:hadoop-aws:3.5.0",
    ],
    # Flink's Kafka SQL connector for the Flink SQL side of ``bench --scenario kafka`` (run by the
    # Flink virtual environment's apache-flink 2.3.0, ``make flink``): the newest release for
    # Flink 2.x, one shaded jar (Kafka's client inside), passed to Flink as ``pipeline.jars``.
    "flink-kafka": [
        "org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2",
    ],
}
#: Sets that extend PySpark's JVM: their closure leaves out what PySpark's ``jars/`` ships.
ON_PYSPARK: frozenset[str] = frozenset({"spark-kafka", "spark-s3a"})

_LINE = re.compile(r"^\s*([\w.\-]+):([\w.\-]+):jar:(?:([\w.\-]+):)?([\w.\-]+):(compile|runtime)\b")


def _pom(roots: list[str]) -> str:
    deps = []
    for coords in roots:
        group, artifact, version = coords.split(":")[:3]
        deps.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
            "<groupId>barrierflow.lock</groupId><artifactId>resolve</artifactId><version>0</version>"
            f"<dependencies>{''.join(deps)}</dependencies></project>\n")


def pyspark_jar_names() -> list[str]:
    """The file names in PySpark's ``jars/`` folder (of the installed pyspark)."""
    import pyspark

    return sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def shipped_by(jar_names: list[str], artifact: str) -> bool:
    """Whether a jar of Maven artifact id ``artifact`` (any version) is among ``jar_names``."""
    return any(re.fullmatch(re.escape(artifact) + r"-\d[\w.\-]*\.jar", name) for name in jar_names)


def _published_sha1(artifact: LockedArtifact) -> str:
    url = f"{repository_url()}/{artifact.repository_path}.sha1"
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode().split()[0].strip().lower()


def resolve_set(set_name: str, roots: list[str]) -> list[LockedArtifact]:
    """The runtime closure of ``roots``, each jar pinned by sha256 (checked against Central's sha1)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmArtifactError("regenerating the JVM lock needs Maven (mvn) on PATH")
    local_repo = Path.home() / ".m2" / "repository"
    with tempfile.TemporaryDirectory(prefix="bf-jvm-lock-") as tmp:
        (Path(tmp) / "pom.xml").write_text(_pom(roots), encoding="utf-8")
        listing = Path(tmp) / "deps.txt"
        done = subprocess.run([mvn, "-B", "-q", "dependency:list", "-DincludeScope=runtime",
                               f"-DoutputFile={listing}"], cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JvmArtifactError(f"mvn dependency:list failed for set {set_name}: {done.stdout[-2000:]}")
        lines = listing.read_text(encoding="utf-8").splitlines()
    pinned: list[LockedArtifact] = []
    on_pyspark = pyspark_jar_names() if set_name in ON_PYSPARK else []
    for line in lines:
        match = _LINE.match(line)
        if not match:
            continue
        group, name, classifier, version = match.group(1), match.group(2), match.group(3) or "", match.group(4)
        if on_pyspark and shipped_by(on_pyspark, name):
            continue
        probe = LockedArtifact(set_name, group, name, version, classifier, "0" * 64)
        jar = local_repo / probe.repository_path
        sha1 = hashlib.sha1(jar.read_bytes()).hexdigest()
        if sha1 != _published_sha1(probe):
            raise JvmArtifactError(f"{probe.coordinates}: the jar in {jar} does not match Maven Central's sha1")
        pinned.append(LockedArtifact(set_name, group, name, version, classifier, sha256_of(jar)))
    return pinned
