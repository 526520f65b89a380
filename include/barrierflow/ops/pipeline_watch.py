"""Is a detached pipeline still fine? What the Airflow launch's trigger asks while it waits.

:func:`observe` reads, for one launch (:class:`~barrierflow.ops.detached_launch.LaunchRecord`):
the launcher's exit record, whether the launcher still runs (same host only), the pipeline's
lease as the checkpoint store has it (holder, last heartbeat and its age) and the newest
completed cut (checkpoint id and completion time). :func:`decide` turns an observation into a
:class:`Verdict`, pure, with the time given:

* **finished**: the launcher recorded exit 0 (the job ended as asked).
* **failed**: the launcher recorded another exit (the message is its own: the cause, the
  restart strategy and what it did); or it is gone without a record (SIGKILL, the OOM killer,
  a restart of the host or container); or, seen from another host, no launcher record and the
  lease's heartbeat older than ``lost_after`` seconds. The message names the cause, the exit
  code, the log file and the strategy's outcome.
* **stalled**: the launcher runs but no cut completed for ``stall_after`` seconds, counted from
  the later of the launch and the newest completed cut: the message names the newest cut and
  its age, and the lease's heartbeat (alive: the driver runs but makes no progress; stale: it
  does not even heartbeat).
* **lost** (only when the launch may be relaunched: ``relaunch``, a spec with a ``restart:``
  block): the launcher is gone without an exit record, or seen from another host sent no sign
  for ``lost_after`` seconds, *and the pipeline's lease is not live* (released, its holder a
  gone process of this host, or its heartbeat older than its TTL). While the lease is live the
  verdict stays **running** ("waiting for its lease"): the old driver may still run on a
  partitioned host, and fencing lets the lease alone decide when a new one may start.
* **running**: anything else (starting, checkpointing, between two restarts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from barrierflow.lease import lease_state
from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.watch_words import heartbeat_phrase, newest_cut_phrase
from barrierflow.pipeline.words import words
from barrierflow.workdir.launches import LaunchRecord, launcher_alive, read_exit

Outcome = Literal["running", "finished", "failed", "stalled", "lost"]


@dataclass(frozen=True)
class Observation:
    """One look at a launch and its pipeline at ``now``."""

    now: datetime
    launch: LaunchRecord
    exit: dict[str, Any] | None
    #: None: the launcher ran on another host.
    launcher_alive: bool | None
    #: :func:`barrierflow.lease.lease_state` of the store (None: never leased).
    lease: dict[str, Any] | None
    checkpoint_id: int | None
    checkpoint_at: datetime | None
    noun: str = "checkpoint"


@dataclass(frozen=True)
class Verdict:
    """What the watcher reports: ``outcome`` and a message for the operator."""

    outcome: Outcome
    message: str

    def as_event(self, launch: LaunchRecord) -> dict[str, Any]:
        return {"outcome": self.outcome, "message": self.message, "launch_id": launch.launch_id, "log": launch.log,
                "record_path": str(launch.path)}


def observe(record: LaunchRecord, now: datetime | None = None) -> Observation:
    """Look at ``record``'s launch and its pipeline (blocking I/O: the store is listed)."""
    current = now or datetime.now(UTC)
    alive = launcher_alive(record)  # before the exit file: a launcher that ends in between wrote it
    pipeline = open_pipeline(record.spec_path)
    newest = pipeline.newest_cut()
    return Observation(current, record, read_exit(record), alive, lease_state(pipeline.objects, current),
                       newest.checkpoint_id if newest is not None else None,
                       newest.completion_time if newest is not None else None, words(pipeline).cut_noun)


def _age(obs: Observation, at: datetime) -> float:
    return max(0.0, (obs.now - at).total_seconds())


def _heartbeat(obs: Observation) -> str:
    return heartbeat_phrase(obs.lease)


def _newest(obs: Observation) -> str:
    return newest_cut_phrase(obs.noun, obs.checkpoint_id, obs.checkpoint_at, obs.now)


def _strategy(exit_record: dict[str, Any]) -> str:
    restarts = exit_record.get("restarts") or []
    did = (f"{len(restarts)} restart(s) (delays " + ", ".join(f"{float(r['delay']):.1f} s" for r in restarts) + ")"
           if restarts else "no restart")
    return f"restart strategy {exit_record.get('strategy', 'none')}: {did}"


def _lost_or_waiting(obs: Observation, name: str, cause: str) -> Verdict:
    """``lost`` once the lease is not live, else ``running`` while the lease decides."""
    lease = obs.lease
    if lease is not None and lease.get("live"):
        return Verdict("running", (
            f"pipeline {name}: {cause}; not relaunching while its lease is live (the old driver may still run "
            f"on a partitioned host): {_heartbeat(obs)}"))
    return Verdict("lost", f"pipeline {name}: {cause}; {_heartbeat(obs)}; {_newest(obs)}")


def decide(obs: Observation, *, stall_after: float, lost_after: float, relaunch: bool = False) -> Verdict:
    """The verdict on ``obs`` (see the module docstring); ``stall_after`` and ``lost_after`` in
    seconds; ``relaunch``: a lost launcher is reported ``lost`` (once its lease is not live)
    instead of ``failed``."""
    launch, name = obs.launch, obs.launch.pipeline or os.path.basename(obs.launch.spec_path)
    if obs.exit is not None:
        code = int(obs.exit.get("exit_code", 1))
        if code == 0:
            return Verdict("finished", f"pipeline {name}: {obs.exit.get('message', 'ended')} (exit 0; "
                                       f"{_strategy(obs.exit)}; log {launch.log})")
        return Verdict("failed", f"pipeline {name} failed: exit status {code}: {obs.exit.get('message')}; "
                                 f"{_strategy(obs.exit)}; log {launch.log}")
    if obs.launcher_alive is False and relaunch:
        return _lost_or_waiting(obs, name, (
            f"its launcher (pid {launch.pid} on {launch.host}, launch {launch.launch_id}) is gone without recording "
            "an exit status (its host or container lost, or killed by SIGKILL)"))
    if obs.launcher_alive is False:
        return Verdict("failed", (
            f"pipeline {name} failed: its launcher (pid {launch.pid} on {launch.host}) is gone without recording an "
            "exit status (killed by SIGKILL or the OOM killer, or the host or container restarted), so no exit "
            f"code and no restart strategy outcome; {_heartbeat(obs)}; {_newest(obs)}; log {launch.log}. Bring it "
            "back from its latest checkpoint with its recovery DAG"))
    started = datetime.fromisoformat(launch.started_at)
    lease = obs.lease
    if obs.launcher_alive is None and (lease is None or not lease.get("live")):
        last_sign = started
        if lease is not None:
            last_sign = max(started, datetime.fromisoformat(str(lease["heartbeat_at"])))
        if _age(obs, last_sign) > lost_after and relaunch:
            return _lost_or_waiting(obs, name, (
                f"no exit record from its launcher (pid {launch.pid} on {launch.host}, another host, launch "
                f"{launch.launch_id}) and no heartbeat for {_age(obs, last_sign):.0f} s (limit {lost_after:g} s)"))
        if _age(obs, last_sign) > lost_after:
            return Verdict("failed", (
                f"pipeline {name} failed: no exit record from its launcher (pid {launch.pid} on {launch.host}, "
                f"another host) and no heartbeat for {_age(obs, last_sign):.0f} s (limit {lost_after:g} s): "
                f"{_heartbeat(obs)}; {_newest(obs)}; log {launch.log} on {launch.host}. Check that host, then "
                "bring it back with its recovery DAG"))
        return Verdict("running", f"pipeline {name}: starting or restarting; {_heartbeat(obs)}")
    progress = started if obs.checkpoint_at is None else max(started, obs.checkpoint_at)
    if _age(obs, progress) > stall_after:
        span = (f"in the {_age(obs, progress):.0f} s since the launch" if progress == started
                else f"for {_age(obs, progress):.0f} s")
        return Verdict("stalled", (
            f"pipeline {name} stalled: no {obs.noun} completed {span} (limit "
            f"stall_after_seconds={stall_after:g}; launched at {launch.started_at}): {_newest(obs)}; "
            f"{_heartbeat(obs)}; the launcher (pid {launch.pid}) still runs; log {launch.log}. Read the log; "
            "stop it and bring it back with the recovery DAG if it does not resume"))
    return Verdict("running", f"pipeline {name}: {_newest(obs)}; {_heartbeat(obs)}")
