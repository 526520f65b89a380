"""The ``restart:`` block of a spec: what ``barrierflow run`` does when the job fails.

Flink's three restart strategies, with their option names (``restart-strategy.fixed-delay.attempts``
is ``restart: {type: fixed-delay, attempts: ...}`` here) and their defaults where a field is
left out. Without a ``restart:`` block the job is not restarted: a failure ends the run with
exit 1, as it always did. The policies themselves (which failure is restarted after which
delay) are :mod:`barrierflow.runtime.restart_strategy`; the supervisor that applies them is
:mod:`barrierflow.runtime.restart_supervisor`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from barrierflow.spec.durations import parse_duration_seconds


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class FixedDelayRestartSpec(_Strict):
    """Restart at most ``attempts`` times in the job's life, ``delay`` after each failure;
    the failure after the last allowed restart stops the job (Flink's ``fixed-delay``)."""

    type: Literal["fixed-delay"]
    attempts: int = Field(1, ge=1, description="restarts allowed in total")
    delay: float = Field(1.0, description="wait between a failure and its restart")

    @field_validator("delay", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration_seconds(value)


class ExponentialDelayRestartSpec(_Strict):
    """Restart after ``initial_backoff``, multiplying the wait by ``backoff_multiplier`` on
    every further failure up to ``max_backoff``, each wait varied by ±``jitter_factor`` of
    itself; a failure more than ``reset_backoff_threshold`` (plus the current backoff) after
    the previous one starts over at ``initial_backoff`` with the attempts counted from zero.
    ``attempts_before_reset_backoff``: the failure after that many restarts without a reset
    stops the job; none = restart for ever (Flink's ``exponential-delay``)."""

    type: Literal["exponential-delay"]
    initial_backoff: float = 1.0
    max_backoff: float = 60.0
    backoff_multiplier: float = Field(1.5, ge=1.0)
    jitter_factor: float = Field(0.1, ge=0.0, le=1.0)
    reset_backoff_threshold: float = 3600.0
    attempts_before_reset_backoff: int | None = Field(None, ge=1)

    @field_validator("initial_backoff", "max_backoff", "reset_backoff_threshold", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    @model_validator(mode="after")
    def _ordered(self) -> ExponentialDelayRestartSpec:
        if self.initial_backoff <= 0:
            raise ValueError("initial_backoff must be greater than 0 seconds, e.g. '1s'")
        if self.max_backoff < self.initial_backoff:
            raise ValueError(f"max_backoff ({self.max_backoff:g} s) must not be below initial_backoff "
                             f"({self.initial_backoff:g} s)")
        if self.reset_backoff_threshold <= 0:
            raise ValueError("reset_backoff_threshold must be greater than 0 seconds, e.g. '1h'")
        return self


class FailureRateRestartSpec(_Strict):
    """Restart ``delay`` after each failure as long as at most ``max_failures_per_interval``
    failures fall within any ``failure_rate_interval``; the failure that exceeds the rate stops
    the job (Flink's ``failure-rate``)."""

    type: Literal["failure-rate"]
    max_failures_per_interval: int = Field(1, ge=1)
    failure_rate_interval: float = 60.0
    delay: float = 1.0

    @field_validator("failure_rate_interval", "delay", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    @model_validator(mode="after")
    def _positive_interval(self) -> FailureRateRestartSpec:
        if self.failure_rate_interval <= 0:
            raise ValueError("failure_rate_interval must be greater than 0 seconds, e.g. '5 minutes'")
        return self


#: The ``restart:`` block: one of the three, chosen by ``type``.
RestartSpec = Annotated[FixedDelayRestartSpec | ExponentialDelayRestartSpec | FailureRateRestartSpec,
                        Field(discriminator="type")]
