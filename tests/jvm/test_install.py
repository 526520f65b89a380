"""The JVM artifact cache: pinned jars fetched once, verified every time, a changed jar refused.

The repository here is a folder served through ``file://`` (urllib reads it as it reads Maven
Central over HTTPS), so these tests download nothing from the network."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from barrierflow.jvm.classpath import set_jars
from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.jvm.install import REPOSITORY_ENV, install
from barrierflow.jvm.lockfile import DEFAULT_LOCK, LockedArtifact, read_lock, render_lock


def _publish(repo: Path, group: str, artifact: str, version: str, content: bytes) -> LockedArtifact:
    pinned = LockedArtifact("demo", group, artifact, version, "", hashlib.sha256(content).hexdigest())
    path = repo / pinned.repository_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return pinned


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "repo"
    monkeypatch.setenv(REPOSITORY_ENV, folder.as_uri())
    return folder


def test_a_second_install_downloads_nothing_and_verifies_every_jar(repo: Path, tmp_path: Path) -> None:
    jars = [_publish(repo, "org.example", "a", "1.0", b"jar a"), _publish(repo, "org.example.b", "b", "2.1", b"jar b")]
    cache = tmp_path / "cache"
    first = install(jars, cache)
    assert [a.artifact for a in first.downloaded] == ["a", "b"] and first.verified == []
    assert (cache / "org/example/b/b/2.1/b-2.1.jar").read_bytes() == b"jar b"
    second = install(jars, cache)
    assert second.downloaded == [] and [a.artifact for a in second.verified] == ["a", "b"]


def test_a_tampered_cached_jar_fails_naming_it_and_is_left_for_inspection(repo: Path, tmp_path: Path) -> None:
    jar = _publish(repo, "org.example", "a", "1.0", b"jar a")
    cache = tmp_path / "cache"
    install([jar], cache)
    cached = cache / jar.repository_path
    cached.write_bytes(b"jar a, changed")
    changed = r"org\.example:a:1\.0 at .*a-1\.0\.jar does not match its pinned sha256"
    with pytest.raises(JvmArtifactError, match=changed):
        install([jar], cache)
    assert cached.read_bytes() == b"jar a, changed"  # never silently replaced


def test_a_download_that_does_not_match_its_pin_is_refused_and_not_cached(repo: Path, tmp_path: Path) -> None:
    jar = _publish(repo, "org.example", "a", "1.0", b"jar a")
    (repo / jar.repository_path).write_bytes(b"something else")
    cache = tmp_path / "cache"
    with pytest.raises(JvmArtifactError, match=r"downloaded org\.example:a:1\.0 .* does not match its pinned sha256"):
        install([jar], cache)
    assert not (cache / jar.repository_path).exists()
    assert list((cache / jar.repository_path).parent.iterdir()) == []  # no partial file left


def test_an_unreachable_repository_names_the_artifact_and_the_repository(repo: Path, tmp_path: Path) -> None:
    missing = LockedArtifact("demo", "org.example", "gone", "1.0", "", "0" * 64)
    with pytest.raises(JvmArtifactError, match=r"cannot download JVM artifact org\.example:gone:1\.0 from file:"):
        install([missing], tmp_path / "cache")


def test_the_command_line_install_exits_1_naming_the_tampered_jar(repo: Path, tmp_path: Path) -> None:
    jar = _publish(repo, "org.example", "a", "1.0", b"jar a")
    lock = tmp_path / "artifacts.lock"
    lock.write_text(render_lock([jar], "# test lock"), encoding="utf-8")
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "barrierflow.jvm", "--lock", str(lock), "--cache", str(cache), "install"]
    first = subprocess.run(command, capture_output=True, text=True, check=False)
    assert first.returncode == 0 and "1 downloaded" in first.stdout
    second = subprocess.run(command, capture_output=True, text=True, check=False)
    assert second.returncode == 0, second.stderr
    assert "0 downloaded" in second.stdout and "1 already present and verified" in second.stdout
    (cache / jar.repository_path).write_bytes(b"evil")
    third = subprocess.run(command, capture_output=True, text=True, check=False)
    assert third.returncode == 1
    assert "org.example:a:1.0" in third.stderr and "does not match its pinned sha256" in third.stderr


def test_install_of_named_sets_fetches_only_their_jars_and_an_unknown_set_is_named(repo: Path, tmp_path: Path
                                                                                    ) -> None:
    wanted = _publish(repo, "org.example", "a", "1.0", b"jar a")
    other = LockedArtifact("other", "org.example", "b", "1.0", "", "0" * 64)  # not published: never fetched
    lock = tmp_path / "artifacts.lock"
    lock.write_text(render_lock([wanted, other], "# test lock"), encoding="utf-8")
    cache = tmp_path / "cache"
    base = [sys.executable, "-m", "barrierflow.jvm", "--lock", str(lock), "--cache", str(cache), "install"]
    done = subprocess.run([*base, "--set", "demo"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "1 downloaded" in done.stdout, done.stderr
    assert (cache / wanted.repository_path).is_file() and not (cache / other.repository_path).exists()
    unknown = subprocess.run([*base, "--set", "nope"], capture_output=True, text=True, check=False)
    assert unknown.returncode == 1 and "no JVM artifact set nope" in unknown.stderr and "demo, other" in unknown.stderr


def test_a_malformed_lock_line_is_named(tmp_path: Path) -> None:
    lock = tmp_path / "artifacts.lock"
    lock.write_text("# ok\nkafka-broker org.apache.kafka:kafka_2.13 deadbeef\n", encoding="utf-8")
    with pytest.raises(JvmArtifactError, match=r"artifacts\.lock:2: expected"):
        read_lock(lock)


def test_the_shipped_lock_pins_every_jar_exactly_and_the_installed_broker_set_verifies() -> None:
    """What ``make install`` left in the cache matches the lock (verified, not downloaded)."""
    artifacts = read_lock(DEFAULT_LOCK)
    assert {a.set_name for a in artifacts} == {"kafka-broker", "spark-kafka", "spark-s3a", "flink-kafka"}
    assert all(len(a.sha256) == 64 and "SNAPSHOT" not in a.version and "[" not in a.version for a in artifacts)
    jars = set_jars("kafka-broker", verify=True)
    assert any(j.name.startswith("kafka_2.13-") for j in jars)


def test_an_unknown_set_names_the_sets_there_are() -> None:
    with pytest.raises(JvmArtifactError,
                       match=r"no JVM artifact set 'flink' .* sets: flink-kafka, kafka-broker, spark-kafka, spark-s3a"):
        set_jars("flink")


def test_the_spark_kafka_set_adds_only_what_pysparks_jars_lack() -> None:
    """Spark's Kafka connector for the installed PySpark: the connector and its token provider at
    PySpark's version, kafka-clients at the version Spark's pom declares, commons-pool2; nothing
    PySpark ships (Scala, Hadoop, compression codecs) a second time."""
    import pyspark
    from barrierflow.jvm.resolve import ON_PYSPARK, pyspark_jar_names, shipped_by

    pinned = {a.artifact: a.version for a in read_lock(DEFAULT_LOCK) if a.set_name == "spark-kafka"}
    assert pinned == {"spark-sql-kafka-0-10_2.13": pyspark.__version__,
                      "spark-token-provider-kafka-0-10_2.13": pyspark.__version__,
                      "kafka-clients": "3.9.2", "commons-pool2": "2.13.1"}
    assert "spark-kafka" in ON_PYSPARK
    shipped = pyspark_jar_names()
    assert not [name for name in pinned if shipped_by(shipped, name)]
    assert shipped_by(shipped, "scala-library") and shipped_by(shipped, "lz4-java")
    assert not shipped_by(["lz4-java-1.11.0.jar"], "lz4") and not shipped_by(["kafka-clients-x.jar"], "kafka-clients")
    assert {j.name for j in set_jars("spark-kafka", verify=True)} == {f"{a}-{v}.jar" for a, v in pinned.items()}


def test_the_spark_s3a_set_is_hadoop_aws_for_pysparks_hadoop_client() -> None:
    """Hadoop's S3A file system for a work dir on object storage: hadoop-aws at the version of the
    Hadoop client PySpark ships, the AWS SDK v2 bundle hadoop-aws 3.5.0's pom declares, nothing
    PySpark ships a second time; installed (presence only: the bundle is about 650 MiB, and
    ``make install`` verified its sha256)."""
    from barrierflow.jvm.resolve import ON_PYSPARK, pyspark_jar_names, shipped_by

    pinned = {a.artifact: a.version for a in read_lock(DEFAULT_LOCK) if a.set_name == "spark-s3a"}
    hadoop = [n.removeprefix("hadoop-client-api-").removesuffix(".jar") for n in pyspark_jar_names()
              if n.startswith("hadoop-client-api-")]
    assert pinned["hadoop-aws"] == hadoop[0] == "3.5.0"
    assert pinned["bundle"] == "2.35.4"
    assert "spark-s3a" in ON_PYSPARK and not [n for n in pinned if shipped_by(pyspark_jar_names(), n)]
    assert {j.name for j in set_jars("spark-s3a")} == {f"{a}-{v}.jar" for a, v in pinned.items()}


def test_the_flink_kafka_set_is_flinks_shaded_kafka_sql_connector_for_flink_2() -> None:
    """Flink's Kafka connector for the benchmark's Flink SQL job: the one shaded jar of the
    connector built for Flink 2.x (its version ends in the Flink line), installed and verified."""
    pinned = [a for a in read_lock(DEFAULT_LOCK) if a.set_name == "flink-kafka"]
    assert [(a.group, a.artifact) for a in pinned] == [("org.apache.flink", "flink-sql-connector-kafka")]
    assert pinned[0].version.rsplit("-", 1)[1].startswith("2.")
    assert [j.name for j in set_jars("flink-kafka", verify=True)] == [pinned[0].file_name]
