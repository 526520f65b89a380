"""A throwaway PostgreSQL server for a user's pipeline tests: :func:`throwaway_postgres`.

It runs ``initdb`` into a fresh temporary directory, starts ``postgres`` on 127.0.0.1 on a free
port (TCP only, trust authentication for 127.0.0.1 only, ``max_prepared_transactions`` > 0 as
barrierflow's PostgreSQL sink needs, fsync off), waits until it accepts connections, creates a
database, yields its connection string, and on exit stops the server (``pg_ctl stop -m
immediate``) and deletes the directory. PostgreSQL refuses to run as root, so as root the server
runs as the ``postgres`` OS user (``runuser``) in a directory owned by it.

The server binaries (``initdb``, ``postgres``, ``pg_ctl``) are looked up in ``bindir`` when
given, then ``/usr/lib/postgresql/<newest>/bin``, then ``PATH`` (Debian/Ubuntu: the
``postgresql`` package; macOS/Homebrew: ``postgresql@16``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.local_ports import free_port

__all__ = ["DATABASE", "PostgresServerError", "server_binaries", "throwaway_postgres"]

#: The database :func:`throwaway_postgres` creates.
DATABASE = "pipeline_test"
#: The OS user the server runs as when the test runs as root.
SERVER_USER = "postgres"
_HOST = "127.0.0.1"
_TOOLS = ("initdb", "postgres", "pg_ctl")


class PostgresServerError(BarrierflowError):
    """The throwaway server could not be initialised or did not start (its log attached)."""


def server_binaries(bindir: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding ``initdb``, ``postgres`` and ``pg_ctl``.

    Raises:
        UserInputError: none of the places (module docstring) holds all three, naming them.
    """
    candidates = [Path(bindir)] if bindir is not None else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        if all((candidate / tool).is_file() for tool in _TOOLS):
            return candidate
    raise UserInputError("no PostgreSQL server binaries (initdb, postgres, pg_ctl) found"
                         + (f" in {bindir}," if bindir is not None else "")
                         + " in /usr/lib/postgresql/*/bin or on PATH: install the PostgreSQL server package "
                           "(e.g. apt-get install postgresql) or pass bindir= their directory")


def _as_server_user() -> list[str]:
    """The command prefix that runs a server tool as a non-root user (empty when not root)."""
    if os.geteuid() != 0:
        return []
    import pwd

    runuser = shutil.which("runuser")
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        runuser = None
    if runuser is None:
        raise UserInputError(f"PostgreSQL refuses to run as root, and there is no 'runuser' and "
                             f"'{SERVER_USER}' OS user to run it as: run the tests as another user, or create "
                             f"the '{SERVER_USER}' user (the PostgreSQL server package does)")
    return [runuser, "-u", SERVER_USER, "--"]


def _connect_error(dsn: str) -> str | None:
    """None when a connection to ``dsn`` succeeds, else why not."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return None
    except psycopg.Error as exc:
        return str(exc).strip()


def _log_tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


@contextlib.contextmanager
def throwaway_postgres(*, bindir: str | os.PathLike[str] | None = None,
                       startup_timeout: float = 60.0) -> Iterator[str]:
    """A fresh PostgreSQL server on 127.0.0.1 for the ``with`` block: yields the connection
    string (``postgresql://postgres@127.0.0.1:PORT/pipeline_test``) once it accepts
    connections; stopped and deleted on exit (module docstring).

    Raises:
        UserInputError: no server binaries, or running as root without a user to run it as.
        PostgresServerError: ``initdb`` failed, or the server did not accept connections within
            ``startup_timeout`` seconds (with its log).
    """
    tools = server_binaries(bindir)
    prefix = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="pipeline-test-pg-"))
    data, log_path = root / "data", root / "postgres.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        if prefix:
            shutil.chown(root, user=SERVER_USER)
        root.chmod(0o700)
        done = subprocess.run([*prefix, str(tools / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                               "--no-sync", "-E", "UTF8", "--locale=C"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PostgresServerError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        (data / "pg_hba.conf").write_text(f"host all all {_HOST}/32 trust\n")
        port = free_port(_HOST)
        with open(log_path, "ab") as log:
            if prefix:
                shutil.chown(log_path, user=SERVER_USER)
            proc = subprocess.Popen(
                [*prefix, str(tools / "postgres"), "-D", str(data), "-p", str(port), "-c", f"listen_addresses={_HOST}",
                 "-c", "unix_socket_directories=", "-c", "max_prepared_transactions=20", "-c", "max_connections=50",
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "shared_buffers=32MB"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        admin = f"postgresql://postgres@{_HOST}:{port}/postgres"
        deadline = time.monotonic() + startup_timeout
        problem = _connect_error(admin)
        while problem is not None:
            if proc.poll() is not None or time.monotonic() > deadline:
                state = f"exited with code {proc.returncode}" if proc.poll() is not None else (
                    f"did not accept connections within {startup_timeout:g} s ({problem})")
                raise PostgresServerError(f"the test PostgreSQL on {_HOST}:{port} {state}; its log:\n"
                                          f"{_log_tail(log_path)}")
            time.sleep(0.05)
            problem = _connect_error(admin)
        import psycopg

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield f"postgresql://postgres@{_HOST}:{port}/{DATABASE}"
    finally:
        if proc is not None and proc.poll() is None:
            subprocess.run([*prefix, str(tools / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w"],
                           capture_output=True, check=False, timeout=60)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
