"""Hadoop's S3A file system for a work dir on object storage (``work_dir: s3://...``).

Spark writes its own checkpoint (offsets and commits on the driver, state files on the
executors) through Hadoop's FileSystem API. PySpark ships Hadoop's client (``hadoop-client-api``
3.5.0) but no S3 file system: the ``spark-s3a`` JVM artifact set (``hadoop-aws`` 3.5.0, matched
to it, and the AWS SDK v2 ``bundle`` its pom declares; installed by ``make install``) brings
it, on the driver's class path and to the executors (``spark.jars``), as the ``spark-kafka``
set does for Spark's Kafka connector.

S3A is configured from the same environment the checkpoint store's S3 client reads
(:mod:`barrierflow.storage.s3`), so both reach the same endpoint with the same identity:

* endpoint: ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (then path-style access, as for
  the store), else AWS itself;
* region: ``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else ``us-east-1``;
* credentials: never in Spark's configuration (which Spark logs and shows): S3A's default
  provider chain reads ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``
  from each process's environment (the driver's, and the workers' for the executors), or the
  instance's role.

:func:`s3a_conf` returns only names and the endpoint, never a credential.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from barrierflow.errors import UserInputError

#: The JVM artifact set of Hadoop's S3A file system (barrierflow/jvm/artifacts.lock).
JVM_SET = "spark-s3a"
DEFAULT_REGION = "us-east-1"


class S3AUnavailableError(UserInputError):
    """A work dir on object storage needs the ``spark-s3a`` JVM artifact set, which is not installed."""


def s3a_conf(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark configuration (``spark.hadoop.fs.s3a.*``) for Spark's checkpoint on S3, from
    ``environ`` (default: this process's environment); see the module docstring. ``s3://``
    paths are served by S3A too."""
    env = os.environ if environ is None else environ
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    conf = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": region,
    }
    ignore = env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true"
    endpoint = None if ignore else (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"))
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    return conf


def s3a_jars(work_dir: str) -> list[str]:
    """The installed jars of :data:`JVM_SET` for ``work_dir`` (named in the error).

    Raises:
        S3AUnavailableError: a jar of the set is not installed, naming the set and ``make install``.
    """
    from barrierflow.jvm.classpath import set_jars
    from barrierflow.jvm.errors import JvmArtifactError

    try:
        return [str(jar) for jar in set_jars(JVM_SET)]
    except JvmArtifactError as exc:
        raise S3AUnavailableError(
            f"work_dir {work_dir} is on object storage: Spark writes its checkpoint there through Hadoop's S3A "
            f"file system, the JVM artifact set {JVM_SET!r} (hadoop-aws and the AWS SDK bundle), which is not "
            f"installed: run `make install` (or `python -m barrierflow.jvm install`), or use a work_dir on a "
            f"file system every node mounts. ({exc})") from exc
