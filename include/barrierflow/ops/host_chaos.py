"""Lose the launch host of a running pipeline, on purpose (``barrierflow chaos SPEC --kill-kinds host``).

Unlike the scratch-copy chaos (:mod:`barrierflow.ops.chaos`), this acts on the pipeline itself,
as the Airflow launch runs it: for each of ``kills`` losses it waits for the pipeline's running
launch on this host (the detached launcher the launch task started), waits a moment chosen by
the seed between ``min_gap`` and ``max_gap`` seconds, and loses that launch's host
(:func:`barrierflow.chaos.host_loss.lose_host`: the launcher's whole process tree frozen, held
frozen ``freeze_seconds``, then SIGKILLed: no clean shutdown, no exit record, no released lease).
Then it waits, up to ``timeout`` seconds, for the launch task to bring the pipeline back by
itself: a new launcher of the same launch chain running and a checkpoint completed after the
loss. What each loss took is reported (seconds from the kill to that checkpoint).

It proves the relaunch, not exactly-once (the pipeline's own output is not compared with
anything: that is what the scratch-copy chaos does). It needs the pipeline launched by its
Airflow launch DAG with a ``restart:`` block and run from the host of the launcher.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.chaos.host_loss import HostLossError, lose_host, running_launch
from barrierflow.errors import UserInputError
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spec.loader import load_any_spec

__all__ = ["HostChaosResult", "lose_launch_hosts"]

#: Seconds between two looks while waiting.
POLL_SECONDS = 0.5


@dataclass
class HostChaosResult:
    """The losses made: for each, the launch lost, the processes killed, the relaunch and the
    seconds until it completed a checkpoint (None: not back within the timeout)."""

    pipeline: str
    losses: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.losses) and all(loss["recovered_seconds"] is not None for loss in self.losses)

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "passed": self.passed, "losses": self.losses}

    def lines(self) -> list[str]:
        out = [f"chaos (lost launch hosts) of pipeline {self.pipeline}: {'pass' if self.passed else 'FAIL'}"]
        for n, loss in enumerate(self.losses, start=1):
            back = (f"back in {loss['recovered_seconds']:.1f} s (launch {loss['relaunch']}, checkpoint "
                    f"{loss['checkpoint_id']})" if loss["recovered_seconds"] is not None
                    else f"NOT back within {loss['timeout']:g} s")
            out.append(f"  loss {n}: launch {loss['launch']} ({len(loss['pids'])} processes killed): {back}")
        return out


def _wait(condition: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(POLL_SECONDS)
    return None


def lose_launch_hosts(spec_path: str | os.PathLike[str], *, kills: int, seed: int = 0, min_gap: float = 5.0,
                      max_gap: float = 30.0, freeze_seconds: float = 0.0, timeout: float = 600.0) -> HostChaosResult:
    """Make ``kills`` lost hosts of the running launch and wait for each relaunch (module docstring).

    Raises:
        UserInputError: bad options, the spec has no ``restart:`` block, or no launch of the
            pipeline runs on this host within ``timeout``.
        HostLossError: a killed process did not end.
    """
    if kills < 1 or min_gap < 0 or max_gap < min_gap or freeze_seconds < 0 or timeout <= 0:
        raise UserInputError("--kill-kinds host needs --kills >= 1, 0 <= --min-gap <= --max-gap, a freeze >= 0 and "
                             "a timeout > 0")
    spec = load_any_spec(spec_path)
    if spec.restart is None:
        raise UserInputError(f"pipeline {spec.name}: --kill-kinds host needs a restart: block in {spec_path} (without "
                             "one a lost launch host is not relaunched: the launch task fails)")
    pipeline = open_pipeline(spec_path)
    work_dir = Path(pipeline.work_dir)
    rng = random.Random(seed)
    result = HostChaosResult(spec.name)
    for _ in range(kills):
        current = _wait(lambda: running_launch(work_dir), timeout)
        if current is None:
            raise UserInputError(f"pipeline {spec.name}: no launch of it runs on this host (launch records under "
                                 f"{work_dir / 'launches'}); launch it with its Airflow launch DAG, and run this on "
                                 "the launcher's host")
        time.sleep(rng.uniform(min_gap, max_gap))
        before = set(pipeline.cuts.completed_ids())
        try:
            lost = lose_host(current, freeze_seconds=freeze_seconds)
        except HostLossError:
            if running_launch(work_dir) is None:  # it ended meanwhile: not a loss
                break
            raise
        lost_at = time.monotonic()

        def back(lost_id: str = current.launch_id, before: set[int] = before, chain: str = current.chain_id
                 ) -> tuple[str, int] | None:
            now = running_launch(work_dir)
            new = set(pipeline.cuts.completed_ids()) - before
            if now is None or now.launch_id == lost_id or now.chain_id != chain or not new:
                return None
            return now.launch_id, max(new)

        found = _wait(back, timeout)
        result.losses.append({"launch": current.launch_id, "pids": list(lost.pids), "killed_at": lost.killed_at,
                              "relaunch": found[0] if found else None, "checkpoint_id": found[1] if found else None,
                              "recovered_seconds": round(time.monotonic() - lost_at, 1) if found else None,
                              "timeout": timeout})
        if not found:
            break
    return result
