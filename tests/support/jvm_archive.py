"""A class-data-sharing (AppCDS) archive of the Spark driver's classes, for the test suite.

The crash tests start a new driver JVM for every crash (dozens per suite run), and each spends
most of its start loading and verifying the same few thousand Spark classes. A dynamic CDS
archive (JDK 13+: ``-XX:ArchiveClassesAtExit``) written once by a representative driver and
mapped by every later one (``-XX:SharedArchiveFile``) cuts that start by about 40 % on the
2-core machine (measured: 10.7 s against 18.3 s to a first Spark job). CDS is transparent to
the program: a JVM that cannot use the archive (another JDK, other jars, or a class path in
another order, as ``verify --deep``'s driver has) warns on stderr and loads the classes as
usual, so a stale archive costs time, never correctness.

Contract:
- :func:`archive_path` names the archive for this JDK and this pyspark's jars (the key changes
  when either does), under ``root``.
- :func:`build_archive` writes it by running one small bounded pipeline in a fresh driver;
  the file appears atomically (written under a temporary name, then renamed), so a reader
  never maps a half-written archive. It returns the path, or ``None`` when the JVM could not
  write one (the reason is logged). Only the Spark driver's JVM dumps (``spark-submit``'s
  launcher JVM, which runs first with another class path, is not given the option), and the
  dump is accepted only when that JVM's CDS log shows it finished writing a few thousand
  classes: the driver waits for its JVM's exit however long the dump takes (under load it
  takes longer than the driver's normal wait, and a JVM killed mid-dump leaves an archive no
  driver can map).
- :func:`java_options` returns the options the tests' drivers run with: C1-only JIT and the
  serial collector (short-lived JVMs), plus the archive when it exists *now*. A caller never
  waits for the archive.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

logger = logging.getLogger(__name__)

#: The options of every short-lived test driver: C1 only and the serial GC halve its start CPU.
FAST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: JVM warnings (e.g. "Unable to use shared archive" when a driver's class path differs from
#: the archive's) go to stderr, never into a command's stdout (``--json`` output).
_WARNINGS_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"
#: Part of the archive's key: a new value retires archives an older builder wrote (one that let
#: the launcher JVM's 43-class dump stand in for the driver's).
ARCHIVE_FORMAT = "driver-only-dump-2"
#: A driver's dump holds about 14,000 classes; spark-submit's launcher JVM dumps 43.
MIN_ARCHIVED_CLASSES = 1000
#: How long the warm-up driver waits for its JVM to finish the dump at exit (seconds).
DUMP_EXIT_SECONDS = 600.0


def _jdk_and_jars_key() -> str:
    """A digest of ``java -version``, where pyspark's jars are and their names and sizes (the JVM
    maps a dynamic archive only on the class path it was written with, in the same place)."""
    import pyspark

    digest = hashlib.sha256(ARCHIVE_FORMAT.encode())
    try:
        version = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60, check=False)
        digest.update(version.stderr.encode())
    except (OSError, subprocess.SubprocessError) as exc:
        digest.update(repr(exc).encode())
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    digest.update(f"{jars}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def archive_path(root: Path) -> Path:
    """Where the archive for this JDK and these Spark jars lives under ``root``."""
    return root / f"spark-driver-{_jdk_and_jars_key()}.jsa"


def java_options(archive: Path | None) -> str:
    """``_JAVA_OPTIONS`` for a short-lived test driver, mapping ``archive`` if it exists now."""
    if archive is not None and archive.is_file():
        return f"{FAST_JVM_OPTIONS} {_WARNINGS_TO_STDERR} -XX:SharedArchiveFile={archive}"
    return FAST_JVM_OPTIONS


def _warm_up_spec(folder: Path, conf: dict[str, str]) -> Path:
    """A bounded windowed pipeline (generator -> windows -> Parquet) like the crash tests', its
    driver given the Spark ``conf``."""
    data = {
        "version": 1,
        "name": "cds-warm-up",
        "work_dir": str(folder / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                     "max_records_per_batch": 200, "records_per_partition": 400, "keys": 5}],
        "transformation": {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                           "output_mode": "append", "options": {"window": "1 second"}},
        "event_time": {"column": "event_time", "watermark_delay": "200ms"},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{folder / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{folder / 'checkpoints'}", "interval": "300ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": conf},
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def build_archive(target: Path, *, timeout: float = 900) -> Path | None:
    """Write the archive at ``target`` (see the module's contract); ``target`` if it exists."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time (the suite's background builder and a test that needs the archive):
    # a second caller waits for the first and then finds its archive.
    with open(target.with_name(f"{target.name}.lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return target if target.is_file() else _build(target, timeout)


def _build(target: Path, timeout: float) -> Path | None:
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    cds_log = target.with_name(f"{target.name}.{os.getpid()}.log")
    with tempfile.TemporaryDirectory(prefix="barrierflow-cds-") as tmp:
        dump = f"{FAST_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=info:file={cds_log}"
        spec = _warm_up_spec(Path(tmp), {"spark.driver.extraJavaOptions": dump})
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "_JAVA_OPTIONS": FAST_JVM_OPTIONS}
        try:
            run = subprocess.run([sys.executable, "-m", "tests.support.jvm_archive", "--warm-up", str(spec)],
                                 env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            logger.warning("the CDS warm-up driver did not finish within %.0f s; tests run without an archive",
                           timeout)
            partial.unlink(missing_ok=True)
            return None
    archived = archived_classes(cds_log)
    cds_log.unlink(missing_ok=True)
    if run.returncode != 0 or not partial.is_file() or archived < MIN_ARCHIVED_CLASSES:
        logger.warning("no CDS archive written (exit %s, %d classes dumped); tests run without one: %s",
                       run.returncode, archived, run.stderr[-1000:])
        partial.unlink(missing_ok=True)
        return None
    partial.replace(target)
    return target


def archived_classes(cds_log: Path) -> int:
    """The classes a JVM's ``-Xlog:cds=info`` log says it dumped, 0 unless the log also shows
    the dump's last region written (a JVM killed mid-dump logs the count but not the end)."""
    try:
        text = cds_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    found = re.search(r"Number of classes (\d+)", text)
    if found is None or "Shared file region (bm" not in text:
        return 0
    return int(found.group(1))


def _warm_up(spec: str) -> int:
    """Run ``spec`` until its source is exhausted, waiting for the driver JVM's own exit (and so
    its dump) up to :data:`DUMP_EXIT_SECONDS`."""
    from barrierflow.cli import main as cli
    from barrierflow.spark import session

    session.JVM_EXIT_SECONDS = DUMP_EXIT_SECONDS
    return cli.main(["run", spec, "--until-exhausted", "--quiet"])


if __name__ == "__main__":  # python -m tests.support.jvm_archive ROOT | --warm-up SPEC
    if sys.argv[1] == "--warm-up":
        sys.exit(_warm_up(sys.argv[2]))
    built = build_archive(archive_path(Path(sys.argv[1])))
    sys.stdout.write(f"{built or 'no archive'}\n")
