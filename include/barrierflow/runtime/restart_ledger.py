"""A restart strategy whose failures are kept in a file, so every process applies one budget.

A :class:`~barrierflow.runtime.restart_strategy.RestartStrategy` is pure and lives in one
process's memory. The restarts of one Airflow launch happen in several processes, on several
hosts: the detached launcher restarts a failed driver on its host, and after a lost host the
launch task relaunches the pipeline from whichever worker resumes it. :class:`RestartLedger`
gives them one budget: every failure is appended to a JSON file (``<work_dir>/launches/
<chain>.restarts.json``, beside the launch records, on the volume every worker and the triggerer
read), and each decision replays the recorded failures through a fresh strategy of the spec's
``restart:`` block before deciding the new one. The same delays and the same limit as restarts
on one host therefore apply, whoever decides.

Times are wall-clock seconds (``time.time()``: comparable across hosts whose clocks agree, as
NTP gives), not a process's monotonic clock. A decision may carry a ``key`` (the lost launch's
id): deciding the same key again returns the recorded answer without counting it twice (a
task retried after it decided).

File format::

    {"format": "barrierflow-restart-ledger", "strategy": "<describe()>",
     "failures": [{"at": <epoch seconds>, "cause": str, "delay": float | null, "key": str | null,
                   "by": "relaunch" | "launcher", "host": str}]}

A ``delay`` of null is the failure the strategy refused (the budget was spent).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barrierflow.atomic_files import write_atomic
from barrierflow.runtime.restart_strategy import RestartStrategy, strategy_for
from barrierflow.spec.restart import RestartSpec

FORMAT = "barrierflow-restart-ledger"


@dataclass(frozen=True)
class LedgerDecision:
    """One decision: ``delay`` (None: no further restart), the strategy replayed up to it, and
    every failure recorded so far (this one included)."""

    delay: float | None
    strategy: RestartStrategy
    failures: list[dict[str, Any]]

    def causes(self) -> str:
        """The recorded failures, numbered, for a message."""
        return "; ".join(f"{n}. {f.get('cause')}" for n, f in enumerate(self.failures, start=1))


class RestartLedger:
    """The failures of one launch chain and the spec's restart strategy (module docstring)."""

    def __init__(self, path: str | Path, spec: RestartSpec, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.spec = spec
        self.clock = clock

    def failures(self) -> list[dict[str, Any]]:
        """The failures recorded so far (none when the file does not exist)."""
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        return list(document.get("failures") or [])

    def replayed(self, failures: list[dict[str, Any]] | None = None) -> RestartStrategy:
        """A fresh strategy fed every recorded failure that it granted a restart."""
        strategy = strategy_for(self.spec)
        for failure in self.failures() if failures is None else failures:
            if failure.get("delay") is not None:
                strategy.next_delay(float(failure["at"]))
        return strategy

    def decide(self, cause: str, *, key: str | None = None, by: str = "relaunch") -> LedgerDecision:
        """Record a failure now and decide it: the delay before the restart, or None."""
        failures = self.failures()
        if key is not None:
            for index, failure in enumerate(failures):
                if failure.get("key") == key:
                    earlier = failures[:index]
                    return LedgerDecision(failure.get("delay"), self._replay_with(earlier, failure), failures)
        now = self.clock()
        strategy = self.replayed(failures)
        delay = strategy.next_delay(now)
        failures.append({"at": now, "cause": cause, "delay": delay, "key": key, "by": by,
                         "host": socket.gethostname()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"format": FORMAT, "strategy": strategy.describe(), "failures": failures},
                                           indent=2))
        return LedgerDecision(delay, strategy, failures)

    def _replay_with(self, earlier: list[dict[str, Any]], failure: dict[str, Any]) -> RestartStrategy:
        strategy = self.replayed(earlier)
        if failure.get("delay") is not None:
            strategy.next_delay(float(failure["at"]))
        return strategy


class LedgerStrategy(RestartStrategy):
    """The strategy the launcher's supervisor applies when its launch keeps a ledger: each
    failure is decided by :meth:`RestartLedger.decide` (so the relaunches after lost hosts and
    the restarts on one host share one budget); the failure time given is ignored (the ledger
    uses wall-clock time)."""

    def __init__(self, ledger: RestartLedger) -> None:
        self.ledger = ledger
        self.name = strategy_for(ledger.spec).name
        self._current = ledger.replayed()

    def next_delay(self, failure_time: float) -> float | None:
        decision = self.ledger.decide(f"a failed attempt restarted by the launcher on {socket.gethostname()}",
                                      by="launcher")
        self._current = decision.strategy
        return decision.delay

    @property
    def restarts(self) -> int:
        return self._current.restarts

    @property
    def limit(self) -> str:
        return self._current.limit

    def describe(self) -> str:
        return self._current.describe()
