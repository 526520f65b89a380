"""A throwaway S3 endpoint for tests: a real moto server in a subprocess.

``running_s3_server()`` starts ``python -m moto.server`` on 127.0.0.1 on a free port, waits
until it answers HTTP, yields an :class:`S3Endpoint` and stops the server afterwards
(terminate, then kill if it does not exit in time). If ``BARRIERFLOW_TEST_S3_ENDPOINT`` is
set, that endpoint is used instead and nothing is started; credentials and region then come
from the environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from barrierflow.errors import BarrierflowError
from barrierflow.local_ports import free_port

from tests.support.processes import log_tail, stop_process

logger = logging.getLogger(__name__)

EXTERNAL_ENDPOINT_ENV = "BARRIERFLOW_TEST_S3_ENDPOINT"
TEST_ACCESS_KEY_ID = "testing"
TEST_SECRET_ACCESS_KEY = "testing"  # moto accepts any credentials; these are not secrets
TEST_REGION = "us-east-1"


class S3ServerError(BarrierflowError):
    """The test S3 server could not be started or did not become ready."""


@dataclass(frozen=True)
class S3Endpoint:
    """An S3 endpoint for tests.

    Attributes:
        url: the endpoint URL, e.g. ``http://127.0.0.1:PORT``.
        access_key_id / secret_access_key: fixed credentials for a started moto server, or
            None for an external endpoint (then the environment's credentials are used).
        region: the region to sign requests for.
        pid: the process id of a started moto server (fault injection: SIGSTOP makes the
            endpoint stop answering, SIGCONT brings it back with its data), or None for an
            external endpoint.
    """

    url: str
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    region: str = TEST_REGION
    pid: int | None = None

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3 (and :class:`S3ObjectStore`) at this endpoint.

        Always ``AWS_ENDPOINT_URL_S3`` and ``AWS_REGION``; the credential variables only when
        this endpoint has its own (a started moto server: ``testing``/``testing``).
        """
        out = {"AWS_ENDPOINT_URL_S3": self.url, "AWS_REGION": self.region}
        if self.access_key_id is not None and self.secret_access_key is not None:
            out["AWS_ACCESS_KEY_ID"] = self.access_key_id
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
        return out

    def client(self) -> object:
        """A boto3 S3 client for this endpoint (path-style addressing)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"}),
        )

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` on this endpoint."""
        client = self.client()
        kwargs: dict[str, object] = {"Bucket": name}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        client.create_bucket(**kwargs)  # type: ignore[attr-defined]


def _responds(url: str, timeout: float) -> bool:
    """Whether an HTTP GET of ``url`` gets any HTTP answer within ``timeout`` seconds."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url, timeout=timeout) as response:
            response.read()
        return True
    except urllib.error.HTTPError:
        return True  # the server answered, even if not with 200
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, limit: int = 4000) -> str:
    return log_tail(path, limit)


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    stop_process(proc, timeout, "moto server")


@contextlib.contextmanager
def _moto_server(startup_timeout: float, stop_timeout: float) -> Iterator[S3Endpoint]:
    host = "127.0.0.1"
    with tempfile.TemporaryDirectory(prefix="barrierflow-moto-") as tmp:
        log_path = Path(tmp) / "moto.log"
        env = dict(os.environ)
        env.update(
            {
                "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": TEST_SECRET_ACCESS_KEY,
                "AWS_DEFAULT_REGION": TEST_REGION,
            }
        )
        last_problem = ""
        for _attempt in range(3):  # the port may be taken between picking and binding it
            port = free_port(host)
            url = f"http://{host}:{port}"
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            try:
                deadline = time.monotonic() + startup_timeout
                ready = False
                while time.monotonic() < deadline:
                    if proc.poll() is not None:
                        break
                    if _responds(f"{url}/", timeout=1.0):
                        ready = True
                        break
                    time.sleep(0.05)
                if not ready:
                    if proc.poll() is None:
                        last_problem = f"moto server at {url} did not answer within {startup_timeout:.0f}s"
                        _stop(proc, stop_timeout)
                        raise S3ServerError(f"{last_problem}; its log:\n{_tail(log_path)}")
                    last_problem = f"moto server exited with code {proc.returncode} on port {port}"
                    logger.info("%s; retrying on another port", last_problem)
                    continue
                logger.info("moto S3 server pid %s ready at %s", proc.pid, url)
                yield S3Endpoint(
                    url=url,
                    access_key_id=TEST_ACCESS_KEY_ID,
                    secret_access_key=TEST_SECRET_ACCESS_KEY,
                    region=TEST_REGION,
                    pid=proc.pid,
                )
                return
            finally:
                _stop(proc, stop_timeout)
        raise S3ServerError(f"{last_problem}; is moto[server] installed? Its log:\n{_tail(log_path)}")


@contextlib.contextmanager
def running_s3_server(startup_timeout: float = 30.0, stop_timeout: float = 10.0) -> Iterator[S3Endpoint]:
    """Yield an S3 endpoint: ``$BARRIERFLOW_TEST_S3_ENDPOINT`` if set, else a fresh moto server.

    The moto server listens on 127.0.0.1 on a free port, is ready (answers HTTP) when this
    yields and is stopped on exit. Raises :class:`S3ServerError` if it cannot be started within
    ``startup_timeout`` seconds. Does not change ``os.environ``; use :meth:`S3Endpoint.env`.
    """
    external = os.environ.get(EXTERNAL_ENDPOINT_ENV)
    if external:
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or TEST_REGION
        logger.info("using the external S3 endpoint from %s", EXTERNAL_ENDPOINT_ENV)
        yield S3Endpoint(url=external.rstrip("/"), region=region)
        return
    with _moto_server(startup_timeout, stop_timeout) as endpoint:
        yield endpoint


@contextlib.contextmanager
def own_s3_server(startup_timeout: float = 30.0, stop_timeout: float = 10.0) -> Iterator[S3Endpoint]:
    """A fresh moto server for the caller alone, even when ``$BARRIERFLOW_TEST_S3_ENDPOINT`` is
    set: outage tests stop it (SIGSTOP via :attr:`S3Endpoint.pid`), which an environment's
    endpoint must never be. Otherwise as :func:`running_s3_server`."""
    with _moto_server(startup_timeout, stop_timeout) as endpoint:
        yield endpoint
