"""A throwaway PostgreSQL server for tests, from the installed server binaries.

``running_postgres()`` runs ``initdb`` into a fresh temporary directory, starts ``postgres`` on
127.0.0.1 on a free port (TCP only, no Unix socket; trust authentication for 127.0.0.1
only; ``max_prepared_transactions=20``; fsync off), waits until psycopg can connect, creates
the database ``barrierflow_test``, yields a :class:`PostgresEndpoint`, then stops the server
with ``pg_ctl stop -m immediate`` and removes the directory. PostgreSQL refuses to run as
root, so as root the server runs as the ``postgres`` OS user (``runuser``) in a directory
owned by it. Binaries are looked up in ``$BARRIERFLOW_TEST_PG_BINDIR``, then
``/usr/lib/postgresql/<newest>/bin``, then ``PATH``.

If ``BARRIERFLOW_TEST_POSTGRES_DSN`` is set, that server is used instead and nothing is
started; it must allow prepared transactions (``max_prepared_transactions`` > 0).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from barrierflow.errors import BarrierflowError
from barrierflow.local_ports import free_port

logger = logging.getLogger(__name__)

EXTERNAL_DSN_ENV = "BARRIERFLOW_TEST_POSTGRES_DSN"
BINDIR_ENV = "BARRIERFLOW_TEST_PG_BINDIR"
DATABASE = "barrierflow_test"
SERVER_USER = "postgres"


class PostgresServerError(BarrierflowError):
    """The test PostgreSQL server could not be found, started or used."""


@dataclass(frozen=True)
class PostgresEndpoint:
    """A PostgreSQL database for tests.

    Attributes:
        dsn: libpq connection string of the test database (no password for a started server).
        is_test_server: True for a server started here, False for ``$BARRIERFLOW_TEST_POSTGRES_DSN``.
        host, port: where the started server listens (None for an external DSN).
    """

    dsn: str
    is_test_server: bool
    host: str | None = None
    port: int | None = None


def server_bindir() -> Path:
    """The directory holding ``initdb``, ``postgres`` and ``pg_ctl``."""
    candidates: list[Path] = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(Path(os.environ[BINDIR_ENV]))
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    candidates += versions
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for bindir in candidates:
        if all((bindir / tool).is_file() for tool in ("initdb", "postgres", "pg_ctl")):
            return bindir
    raise PostgresServerError(
        "no PostgreSQL server binaries (initdb, postgres, pg_ctl) found in /usr/lib/postgresql/*/bin or PATH: "
        f"install the postgresql server package, set {BINDIR_ENV} to their directory, or set {EXTERNAL_DSN_ENV} "
        "to a running server that allows prepared transactions"
    )


def _as_server_user() -> list[str]:
    """The command prefix that runs a tool as a non-root user (empty when not root)."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresServerError("running as root but 'runuser' is missing: PostgreSQL refuses to run as root")
    try:
        import pwd

        pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresServerError(
            f"running as root and there is no '{SERVER_USER}' OS user to run the test server as (PostgreSQL "
            f"refuses to run as root); create one or set {EXTERNAL_DSN_ENV}"
        ) from None
    return [runuser, "-u", SERVER_USER, "--"]


def _connectable(dsn: str) -> str | None:
    """None when psycopg can connect to ``dsn``, else the error text."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return None
    except psycopg.Error as exc:
        return str(exc).strip()


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def _check_prepared_transactions(dsn: str) -> None:
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            row = conn.execute("SHOW max_prepared_transactions").fetchone()
    except psycopg.Error as exc:
        raise PostgresServerError(f"cannot connect to the server of {EXTERNAL_DSN_ENV}: {exc}") from None
    if row is None or int(row[0]) <= 0:
        raise PostgresServerError(
            f"the server of {EXTERNAL_DSN_ENV} has max_prepared_transactions = 0; the PostgreSQL sink tests need "
            "prepared transactions: set max_prepared_transactions = 20 in postgresql.conf and restart it"
        )


class ThrowawayPostgres:
    """A PostgreSQL server of this process: ``initdb`` once, then started and stopped at will
    on the same port and data directory (prepared transactions survive a stop, as on a real
    server). :func:`running_postgres` uses it; outage tests call :meth:`stop` and
    :meth:`start` themselves (see :func:`restartable_postgres`)."""

    host = "127.0.0.1"

    def __init__(self, startup_timeout: float = 60.0) -> None:
        self.startup_timeout = startup_timeout
        self.bindir = server_bindir()
        self.prefix = _as_server_user()
        self.tmp = Path(tempfile.mkdtemp(prefix="barrierflow-pg-"))
        self.data = self.tmp / "data"
        self.log_path = self.tmp / "postgres.log"
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> PostgresEndpoint:
        assert self.port is not None, "start() the server first"
        return PostgresEndpoint(dsn=f"postgresql://postgres@{self.host}:{self.port}/{DATABASE}", is_test_server=True,
                                host=self.host, port=self.port)

    def _initdb(self) -> None:
        if self.prefix:
            shutil.chown(self.tmp, user=SERVER_USER)
        self.tmp.chmod(0o700)
        init = subprocess.run(
            [*self.prefix, str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
             "--no-sync", "-E", "UTF8", "--locale=C"],
            capture_output=True, text=True, check=False)
        if init.returncode != 0:
            raise PostgresServerError(f"initdb failed ({init.returncode}): {init.stderr.strip()[-2000:]}")
        (self.data / "pg_hba.conf").write_text("host all all 127.0.0.1/32 trust\n")

    def _launch(self, port: int) -> str | None:
        """Start ``postgres`` on ``port``; None once it accepts connections, else why not
        (raises when it runs but never answers)."""
        with open(self.log_path, "ab") as log:
            if self.prefix:
                shutil.chown(self.log_path, user=SERVER_USER)
            self.proc = subprocess.Popen(
                [*self.prefix, str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(port),
                 "-c", f"listen_addresses={self.host}", "-c", "unix_socket_directories=",
                 "-c", "max_prepared_transactions=20", "-c", "max_connections=50",
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "shared_buffers=32MB"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        admin = f"postgresql://postgres@{self.host}:{port}/postgres"
        deadline = time.monotonic() + self.startup_timeout
        problem: str | None = "not tried"
        while time.monotonic() < deadline and self.proc.poll() is None:
            problem = _connectable(admin)
            if problem is None:
                return None
            time.sleep(0.05)
        if self.proc.poll() is None:
            raise PostgresServerError(
                f"the test PostgreSQL on {self.host}:{port} did not accept connections within "
                f"{self.startup_timeout:.0f}s ({problem}); its log:\n{_tail(self.log_path)}")
        return f"postgres exited with code {self.proc.returncode} on port {port}"

    def start(self) -> PostgresEndpoint:
        """Start the server (the first time: initdb, a free port, the test database); ready
        (accepting connections) when this returns."""
        import psycopg

        if self.port is not None:
            problem = self._launch(self.port)
            if problem is not None:
                raise PostgresServerError(f"{problem}; its log:\n{_tail(self.log_path)}")
            logger.info("test PostgreSQL pid %s ready again on %s:%s", self.proc.pid if self.proc else None,
                        self.host, self.port)
            return self.endpoint
        self._initdb()
        last_problem = ""
        for _attempt in range(3):  # the port may be taken between picking and binding it
            port = free_port(self.host)
            problem = self._launch(port)
            if problem is None:
                self.port = port
                break
            last_problem = problem
            logger.info("%s; retrying on another port", last_problem)
        else:
            raise PostgresServerError(f"{last_problem}; its log:\n{_tail(self.log_path)}")
        with psycopg.connect(f"postgresql://postgres@{self.host}:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        logger.info("test PostgreSQL pid %s ready on %s:%s", self.proc.pid if self.proc else None, self.host, self.port)
        return self.endpoint

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl stop -m MODE``; ``fast`` disconnects clients, prepared
        transactions stay) and wait for it to exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        subprocess.run([*self.prefix, str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w"],
                       capture_output=True, check=False, timeout=60)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            logger.warning("test PostgreSQL pid %s did not stop; killing it", self.proc.pid)
            self.proc.kill()
            self.proc.wait(timeout=30)

    def remove(self) -> None:
        """Stop the server at once and delete its directory."""
        self.stop("immediate")
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def _started_server(startup_timeout: float) -> Iterator[PostgresEndpoint]:
    server = ThrowawayPostgres(startup_timeout)
    try:
        yield server.start()
    finally:
        server.remove()


@contextlib.contextmanager
def restartable_postgres(startup_timeout: float = 60.0) -> Iterator[ThrowawayPostgres]:
    """A started throwaway server the caller may :meth:`~ThrowawayPostgres.stop` and
    :meth:`~ThrowawayPostgres.start` again (outage tests); removed on exit. Never the server
    of ``$BARRIERFLOW_TEST_POSTGRES_DSN``, which tests must not stop."""
    server = ThrowawayPostgres(startup_timeout)
    try:
        server.start()
        yield server
    finally:
        server.remove()


@contextlib.contextmanager
def running_postgres(startup_timeout: float = 60.0) -> Iterator[PostgresEndpoint]:
    """Yield a PostgreSQL database that allows prepared transactions: the one of
    ``$BARRIERFLOW_TEST_POSTGRES_DSN`` if set, else a fresh throwaway server (stopped and
    deleted on exit). Raises :class:`PostgresServerError` if none can be had."""
    external = os.environ.get(EXTERNAL_DSN_ENV)
    if external:
        _check_prepared_transactions(external)
        logger.info("using the external PostgreSQL from %s", EXTERNAL_DSN_ENV)
        yield PostgresEndpoint(dsn=external, is_test_server=False)
        return
    with _started_server(startup_timeout) as endpoint:
        yield endpoint
