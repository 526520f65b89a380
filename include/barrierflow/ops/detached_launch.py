"""A pipeline started detached from whoever started it: the Airflow launch task submits, records,
and leaves; the job goes on without it.

:func:`start_detached` starts the *launcher* (``python -m barrierflow.ops.detached_launch``) in a
session of its own (``setsid``: no process group or terminal shared with the caller, so a
``killpg`` of the Airflow task, of its worker or of the scheduler does not reach it), with
stdin from ``/dev/null`` and stdout and stderr appended to a log file in the pipeline's work
dir, and returns at once. Files, per launch, under ``<work_dir>/launches/``::

    <launch_id>.json        written by the starter: launch_id, spec_path, pid (the launcher),
                            host, started_at, log, exit_file, command
    <launch_id>.log         the launcher's and every attempt's stdout and stderr
    <launch_id>.exit.json   written by the launcher as it ends: exit_code (0 finished as asked,
                            1 failed, 2 bad input, 143 stopped by SIGTERM), message, strategy,
                            restarts [{number, cause, delay}], finished_at
    <chain>.restarts.json   the restart ledger of the launch chain (the first launch and its
                            relaunches after lost hosts): :mod:`barrierflow.runtime.restart_ledger`

The launcher is the pipeline's restart supervisor (:func:`barrierflow.runtime.restart_supervisor.supervise`):
every attempt is the given command (spark-submit of ``jobs/run_pipeline.py``, on the master the
caller chose), restarted after a failure as the spec's ``restart:`` strategy allows (none
without one), each attempt a new spark-submit and so a new driver JVM; with an ``alerts`` block
its ``restart`` and ``gave_up`` alerts are sent as ``barrierflow run`` sends them. An attempt dies with the
launcher (the kernel's parent-death signal), so a SIGKILLed launcher leaves no orphan driver
behind, only its lease, which a dead process of this host no longer holds. The attempts see
:data:`RESTART_SUPERVISOR_ENV`, so ``barrierflow run`` inside spark-submit does not try to apply the
strategy a second time.

A launcher outlives the Airflow task, worker, scheduler and triggerer that started or watch it;
it does not outlive its host or container (nothing of this host survives that): there the
watcher finds no launcher and no exit file and reports the launch ``lost`` once the pipeline's
lease is not live (with a ``restart:`` block: the launch task relaunches it, counting the loss
in the chain's restart ledger ``<chain>.restarts.json``, which this launcher's own restarts
count in too, ``--restart-ledger``), else ``failed`` (:mod:`barrierflow.ops.pipeline_watch`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.atomic_files import write_atomic
from barrierflow.errors import UserInputError
from barrierflow.lease import default_ttl, job_running
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime.restart_ledger import LedgerStrategy, RestartLedger
from barrierflow.runtime.restart_strategy import NoRestart, RestartStrategy, strategy_for
from barrierflow.runtime.restart_supervisor import (
    RESTART_SUPERVISOR_ENV,
    RestartsExhaustedError,
    SupervisedRun,
    restart_alert_observers,
    supervise,
)
from barrierflow.spec.loader import load_any_spec
from barrierflow.workdir.launches import LAUNCHES, LaunchRecord, launcher_alive, process_identity, read_exit

#: The launcher's exit code when it was asked to stop (SIGTERM), as a shell reports it.
STOPPED_EXIT = 128 + int(signal.SIGTERM)


def live_launches(spec_path: str | os.PathLike[str]) -> list[LaunchRecord]:
    """The launches of the pipeline at ``spec_path`` whose launcher still runs on this host
    without an exit record (one between two restarts holds no lease, yet will start the job
    again)."""
    folder = Path(open_pipeline(spec_path).work_dir) / LAUNCHES
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.name.endswith(".exit.json"):
            continue
        try:
            record = LaunchRecord.read(path)
        except (OSError, ValueError, TypeError):
            continue
        if read_exit(record) is None and launcher_alive(record):
            found.append(record)
    return found


def _write_json(path: Path, document: Mapping[str, Any]) -> None:
    write_atomic(path, json.dumps(document, indent=2))


def start_detached(spec_path: str | os.PathLike[str], command: Sequence[str], *, env: Mapping[str, str],
                   launch_id: str | None = None, chain: str = "") -> LaunchRecord:
    """Start the launcher of ``command`` (one attempt of the pipeline at ``spec_path``) detached,
    see the module docstring; returns once it was started, with its record written. ``chain``:
    the first launch's id when this one relaunches it (they share one restart ledger).

    Raises:
        SpecError: the spec does not load. OSError: the work dir cannot be written or the
        launcher cannot be started.
    """
    pipeline = open_pipeline(spec_path)
    folder = Path(pipeline.work_dir) / LAUNCHES
    folder.mkdir(parents=True, exist_ok=True)
    launch_id = launch_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    log, exit_file = folder / f"{launch_id}.log", folder / f"{launch_id}.exit.json"
    ledger = folder / f"{chain or launch_id}.restarts.json"
    launcher = [sys.executable, "-m", "barrierflow.ops.detached_launch", "--spec", str(spec_path), "--exit-file",
                str(exit_file), "--log", str(log), "--restart-ledger", str(ledger), "--", *command]
    with open(log, "ab") as out:
        process = subprocess.Popen(launcher, env=dict(env), stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                   cwd=os.getcwd())
    record = LaunchRecord(launch_id, str(spec_path), process.pid, socket.gethostname(),
                          datetime.now(UTC).isoformat(), str(log), str(exit_file), list(command),
                          process_identity(process.pid), pipeline.spec.name, chain)
    _write_json(record.path, record.as_dict())
    # Not waited for: the launcher is reparented to init when this process ends; until then a
    # zombie of it would only show if it ended first, which the watcher reads from the exit file.
    return record


def _exit_document(code: int, message: str, strategy: str, run: SupervisedRun | None) -> dict[str, Any]:
    return {"exit_code": code, "message": message, "strategy": strategy,
            "restarts": [asdict(r) for r in (run.restarts if run is not None else [])],
            "finished_at": datetime.now(UTC).isoformat()}


def _say(line: str) -> None:
    """One line on stderr (the launch's log)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_launcher(spec_path: str, command: Sequence[str], exit_file: Path, log: str,
                 ledger: Path | None = None) -> int:
    """The launcher's body: supervise ``command`` under the spec's restart strategy and write
    the exit record; returns the exit code it recorded. With ``ledger`` (the launch chain's
    restart ledger) the strategy's budget is the one the relaunches after lost hosts count
    against too (:class:`~barrierflow.runtime.restart_ledger.LedgerStrategy`)."""
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    strategy_name = "none"
    run: SupervisedRun | None = None
    try:
        spec = load_any_spec(spec_path)
        strategy: RestartStrategy = NoRestart()
        if spec.restart is not None:
            strategy = (LedgerStrategy(RestartLedger(ledger, spec.restart)) if ledger is not None
                        else strategy_for(spec.restart))
        strategy_name = strategy.describe()
        pipeline = open_pipeline(spec_path)
        work_dir, objects = Path(pipeline.work_dir), pipeline.objects
        env = {**os.environ, RESTART_SUPERVISOR_ENV: str(os.getpid())}
        _say(f"launcher pid {os.getpid()}: pipeline {spec.name}, restart strategy {strategy_name}; log {log}")
        run = supervise(command, strategy, name=spec.name, env=env,
                        lease_free=lambda: not job_running(work_dir, objects), lease_wait=2 * default_ttl(),
                        **(restart_alert_observers(spec) if spec.restart is not None else {}))
    except KeyboardInterrupt:
        document = _exit_document(STOPPED_EXIT, "the launcher was stopped (SIGTERM); the job was stopped with it",
                                  strategy_name, run)
    except RestartsExhaustedError as exc:
        document = _exit_document(1, str(exc), strategy_name, exc.run)
    except UserInputError as exc:
        document = _exit_document(2, str(exc), strategy_name, run)
    except Exception as exc:  # the launcher must leave a record whatever went wrong
        document = _exit_document(1, f"{type(exc).__name__}: {exc}", strategy_name, run)
    else:
        restarts = f" after {len(run.restarts)} restart(s)" if run.restarts else ""
        document = _exit_document(0, f"the job ended as asked{restarts}", strategy_name, run)
        document["restarts"] = [asdict(r) for r in run.restarts]
    _say(f"launcher pid {os.getpid()}: exit {document['exit_code']}: {document['message']}")
    _write_json(exit_file, document)
    return int(document["exit_code"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m barrierflow.ops.detached_launch",
                                     description="Run one pipeline's attempts under its restart strategy and "
                                                 "record how it ended (started by the Airflow launch).")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--restart-ledger", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run after --")
    return run_launcher(args.spec, command, Path(args.exit_file), args.log,
                        Path(args.restart_ledger) if args.restart_ledger else None)


if __name__ == "__main__":
    sys.exit(main())
