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
  write one (the reason is logged).
- :func:`java_options` returns the options the tests' drivers run with: C1-only JIT and the
  serial collector (short-lived JVMs), plus the archive when it exists *now*. A caller never
  waits for the archive.
"""

from __future__ import annotations

import hashlib
import logging
import os
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


def _jdk_and_jars_key() -> str:
    """A digest of ``java -version`` and the names and sizes of pyspark's jars."""
    import pyspark

    digest = hashlib.sha256()
    try:
        version = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60, check=False)
        digest.update(version.stderr.encode())
    except (OSError, subprocess.SubprocessError) as exc:
        digest.update(repr(exc).encode())
    jars = Path(pyspark.__file__).parent / "jars"
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


def _warm_up_spec(folder: Path) -> Path:
    """A bounded windowed pipeline (generator -> windows -> Parquet) like the crash tests'."""
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
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def build_archive(target: Path, *, timeout: float = 300) -> Path | None:
    """Write the archive at ``target`` (see the module's contract); ``target`` if it exists."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="barrierflow-cds-") as tmp:
        spec = _warm_up_spec(Path(tmp))
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "_JAVA_OPTIONS": f"{FAST_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial}"}
        try:
            run = subprocess.run([sys.executable, "-m", "barrierflow.cli.main", "run", str(spec), "--until-exhausted",
                                  "--quiet"], env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            logger.warning("the CDS warm-up driver did not finish within %.0f s; tests run without an archive",
                           timeout)
            partial.unlink(missing_ok=True)
            return None
    if run.returncode != 0 or not partial.is_file():
        logger.warning("no CDS archive written (exit %s); tests run without one: %s", run.returncode,
                       run.stderr[-1000:])
        partial.unlink(missing_ok=True)
        return None
    partial.replace(target)
    return target


if __name__ == "__main__":  # python -m tests.support.jvm_archive ROOT
    built = build_archive(archive_path(Path(sys.argv[1])))
    sys.stdout.write(f"{built or 'no archive'}\n")
