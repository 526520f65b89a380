"""Restart strategies: pure policies deciding whether a failed job restarts, and after how long.

A policy is told of each failure in turn with the time it happened (seconds on any monotonic
clock the caller chooses: the supervisor passes ``time.monotonic()``, tests pass numbers) and
answers with the delay before the restart, or None when the strategy's limit is reached and
the job must stop. Nothing here sleeps or reads a clock, so the rules are tested without
waiting. The semantics are Flink's (``RestartBackoffTimeStrategy`` and its three
implementations), with the spec's option names (:mod:`barrierflow.spec.restart`):

* :class:`FixedDelay`: ``attempts`` restarts in the job's life, ``delay`` each; failure
  ``attempts + 1`` stops the job.
* :class:`ExponentialDelay`: the first failure waits ``initial_backoff``, each further one the
  previous backoff times ``backoff_multiplier``, at most ``max_backoff``; a failure at least
  ``reset_backoff_threshold + current backoff`` after the previous failure (the job ran
  healthy that long after its restart) starts over at ``initial_backoff`` and counts attempts
  from zero; with ``attempts_before_reset_backoff`` the failure after that many restarts
  without a reset stops the job. The delay returned is the backoff varied uniformly by
  ±``jitter_factor`` of itself (never below 0; the random source is injectable).
* :class:`FailureRate`: ``delay`` after each failure while at most
  ``max_failures_per_interval`` failures happened less than ``failure_rate_interval`` seconds
  before the failure being decided (that one included); the one that makes it more stops the job.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import deque

from barrierflow.spec.restart import (
    ExponentialDelayRestartSpec,
    FailureRateRestartSpec,
    FixedDelayRestartSpec,
    RestartSpec,
)


def _seconds(value: float) -> str:
    return f"{value:g} s"


class RestartStrategy(ABC):
    """One restart policy: feed it every failure, in order, through :meth:`next_delay`."""

    #: The strategy's name in the spec (``fixed-delay``, ...).
    name: str

    @abstractmethod
    def next_delay(self, failure_time: float) -> float | None:
        """Record a failure at ``failure_time`` (seconds, never earlier than the previous
        failure's) and return the seconds to wait before restarting, or None: the strategy's
        limit is reached, the job stops."""

    @property
    @abstractmethod
    def restarts(self) -> int:
        """The number ``N`` of "restart N of M": restarts granted so far that count towards
        the limit (for exponential delay since the last reset; for failure rate the failures
        within the current interval)."""

    @property
    @abstractmethod
    def limit(self) -> str:
        """The ``M`` of "restart N of M", in words (``3``, ``unlimited``, ``1 per 60 s``)."""

    @abstractmethod
    def describe(self) -> str:
        """The strategy and its settings, for messages (``fixed-delay: 3 attempts, 1 s apart``)."""


class NoRestart(RestartStrategy):
    """No restart at all: the first failure stops the job (a spec without ``restart:`` run by a
    supervisor that applies strategies anyway, the Airflow launch's detached launcher)."""

    name = "none"

    def next_delay(self, failure_time: float) -> float | None:
        return None

    @property
    def restarts(self) -> int:
        return 0

    @property
    def limit(self) -> str:
        return "0"

    def describe(self) -> str:
        return "none (the spec has no restart: block)"


class FixedDelay(RestartStrategy):
    """Flink's ``fixed-delay``: see the module docstring."""

    name = "fixed-delay"

    def __init__(self, attempts: int, delay: float) -> None:
        if attempts < 1 or delay < 0:
            raise ValueError(f"fixed-delay needs attempts >= 1 and delay >= 0, got {attempts} and {delay}")
        self.attempts, self.delay = attempts, delay
        self._restarts = 0

    def next_delay(self, failure_time: float) -> float | None:
        if self._restarts >= self.attempts:
            return None
        self._restarts += 1
        return self.delay

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def limit(self) -> str:
        return str(self.attempts)

    def describe(self) -> str:
        return f"fixed-delay: {self.attempts} attempts, {_seconds(self.delay)} apart"


class ExponentialDelay(RestartStrategy):
    """Flink's ``exponential-delay``: see the module docstring. ``rng``: the jitter's random
    source (a seeded :class:`random.Random` in tests; irrelevant with ``jitter_factor`` 0)."""

    name = "exponential-delay"

    def __init__(self, *, initial_backoff: float, max_backoff: float, backoff_multiplier: float,
                 jitter_factor: float, reset_backoff_threshold: float,
                 attempts_before_reset_backoff: int | None = None, rng: random.Random | None = None) -> None:
        if not (0 < initial_backoff <= max_backoff and backoff_multiplier >= 1 and 0 <= jitter_factor <= 1
                and reset_backoff_threshold > 0 and (attempts_before_reset_backoff is None
                                                     or attempts_before_reset_backoff >= 1)):
            raise ValueError("exponential-delay needs 0 < initial_backoff <= max_backoff, backoff_multiplier >= 1, "
                             "0 <= jitter_factor <= 1, reset_backoff_threshold > 0, attempts_before_reset_backoff "
                             ">= 1")
        self.initial_backoff, self.max_backoff = initial_backoff, max_backoff
        self.backoff_multiplier, self.jitter_factor = backoff_multiplier, jitter_factor
        self.reset_backoff_threshold = reset_backoff_threshold
        self.attempts_before_reset_backoff = attempts_before_reset_backoff
        self._rng = rng or random.Random()
        self._backoff = 0.0  # 0: no failure since the start or the last reset
        self._last_failure: float | None = None
        self._restarts = 0

    def next_delay(self, failure_time: float) -> float | None:
        last, self._last_failure = self._last_failure, failure_time
        if last is not None and failure_time - last >= self.reset_backoff_threshold + self._backoff:
            self._backoff, self._restarts = 0.0, 0  # healthy long enough: start over
        if self.attempts_before_reset_backoff is not None and self._restarts >= self.attempts_before_reset_backoff:
            return None
        self._backoff = (self.initial_backoff if self._backoff == 0.0
                         else min(self._backoff * self.backoff_multiplier, self.max_backoff))
        self._restarts += 1
        jitter = self._backoff * self.jitter_factor
        return max(0.0, self._backoff + self._rng.uniform(-jitter, jitter)) if jitter else self._backoff

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def limit(self) -> str:
        return "unlimited" if self.attempts_before_reset_backoff is None else str(self.attempts_before_reset_backoff)

    @property
    def backoff(self) -> float:
        """The current backoff before jitter (0 before the first failure and after a reset)."""
        return self._backoff

    def describe(self) -> str:
        attempts = ("" if self.attempts_before_reset_backoff is None
                    else f", at most {self.attempts_before_reset_backoff} attempts before a reset")
        return (f"exponential-delay: {_seconds(self.initial_backoff)} x{self.backoff_multiplier:g} up to "
                f"{_seconds(self.max_backoff)}, jitter {self.jitter_factor:g}, reset after "
                f"{_seconds(self.reset_backoff_threshold)} healthy{attempts}")


class FailureRate(RestartStrategy):
    """Flink's ``failure-rate``: see the module docstring."""

    name = "failure-rate"

    def __init__(self, *, max_failures_per_interval: int, failure_rate_interval: float, delay: float) -> None:
        if max_failures_per_interval < 1 or failure_rate_interval <= 0 or delay < 0:
            raise ValueError("failure-rate needs max_failures_per_interval >= 1, failure_rate_interval > 0, "
                             "delay >= 0")
        self.max_failures_per_interval = max_failures_per_interval
        self.failure_rate_interval, self.delay = failure_rate_interval, delay
        self._failures: deque[float] = deque()

    def next_delay(self, failure_time: float) -> float | None:
        self._failures.append(failure_time)
        while self._failures and failure_time - self._failures[0] >= self.failure_rate_interval:
            self._failures.popleft()
        if len(self._failures) > self.max_failures_per_interval:
            return None
        return self.delay

    @property
    def restarts(self) -> int:
        return len(self._failures)

    @property
    def limit(self) -> str:
        return f"{self.max_failures_per_interval} per {_seconds(self.failure_rate_interval)}"

    def describe(self) -> str:
        return (f"failure-rate: at most {self.max_failures_per_interval} failures per "
                f"{_seconds(self.failure_rate_interval)}, {_seconds(self.delay)} apart")


def strategy_for(spec: RestartSpec, *, rng: random.Random | None = None) -> RestartStrategy:
    """The policy of a spec's ``restart:`` block (a fresh one: no failures yet)."""
    if isinstance(spec, FixedDelayRestartSpec):
        return FixedDelay(spec.attempts, spec.delay)
    if isinstance(spec, ExponentialDelayRestartSpec):
        return ExponentialDelay(initial_backoff=spec.initial_backoff, max_backoff=spec.max_backoff,
                                backoff_multiplier=spec.backoff_multiplier, jitter_factor=spec.jitter_factor,
                                reset_backoff_threshold=spec.reset_backoff_threshold,
                                attempts_before_reset_backoff=spec.attempts_before_reset_backoff, rng=rng)
    assert isinstance(spec, FailureRateRestartSpec)
    return FailureRate(max_failures_per_interval=spec.max_failures_per_interval,
                       failure_rate_interval=spec.failure_rate_interval, delay=spec.delay)
