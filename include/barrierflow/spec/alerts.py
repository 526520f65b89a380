"""The ``alerts:`` block of a spec: where the pipeline's alerts go, and which ones.

Off unless the block is given. Five events raise an alert (:data:`ALERT_EVENTS`; what each
means and what to run: ``docs/operations.md``, "Alerts"): a failed task of one of the pipeline's
Airflow DAGs (``task_failure``), a checkpoint-age breach found by the supervision check
(``checkpoint_age``), a failed verification (``verification``), a restart by the restart strategy
(``restart``) and the strategy giving up (``gave_up``).

Each destination takes the events it lists (``events``; default: all) and is one of

* ``webhook``: the alert POSTed as JSON (:mod:`barrierflow.alerts.webhook`). The URL is a
  secret (it carries the token of a Slack or PagerDuty endpoint) and is never written in the
  spec: it comes from the environment variable named by ``url_env``, or from the Airflow
  connection ``conn_id``;
* ``callable``: a user function ``'package.module:function'`` called with the
  :class:`~barrierflow.alerts.alert.Alert`.

``timeout`` bounds the delivery of one alert to all its destinations together: a destination
that is down, slow or raising is logged and never fails or holds up the pipeline or the task.
``runbook`` is what an alert's ``runbook`` link starts with (``<runbook>#<anchor>``): the
operations page of the installed docs by default, or where a team hosts its own copy.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from barrierflow.spec.durations import parse_duration_seconds

__all__ = ["ALERT_EVENTS", "AlertEvent", "AlertsSpec", "CallableDestinationSpec", "WebhookDestinationSpec"]

#: The events that raise an alert, in the order the docs list them.
AlertEvent = Literal["task_failure", "checkpoint_age", "verification", "restart", "gave_up"]
ALERT_EVENTS: tuple[str, ...] = ("task_failure", "checkpoint_age", "verification", "restart", "gave_up")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class _Destination(_Strict):
    events: tuple[AlertEvent, ...] = Field(ALERT_EVENTS, min_length=1,  # type: ignore[arg-type]
                                           description="the events sent here; default all")

    def takes(self, event: str) -> bool:
        """Whether alerts of ``event`` go to this destination."""
        return event in self.events


class WebhookDestinationSpec(_Destination):
    """POST the alert as JSON to a URL read from the environment (``url_env``) or from an Airflow
    connection (``conn_id``): exactly one of the two."""

    type: Literal["webhook"]
    url_env: str = Field("", pattern=r"^$|^[A-Z_][A-Z0-9_]*$",
                         description="environment variable holding the URL")
    conn_id: str = Field("", pattern=r"^$|^[A-Za-z0-9_.-]+$", description="Airflow connection holding the URL")

    @model_validator(mode="after")
    def _one_source(self) -> WebhookDestinationSpec:
        if bool(self.url_env) == bool(self.conn_id):
            raise ValueError("give exactly one of url_env (an environment variable holding the URL) and conn_id "
                             "(an Airflow connection); the URL itself never goes in the spec")
        return self

    def describe(self) -> str:
        """The destination as logs name it: where its URL comes from, never the URL."""
        return f"webhook (url from ${self.url_env})" if self.url_env else f"webhook (Airflow connection {self.conn_id})"


class CallableDestinationSpec(_Destination):
    """Call ``function`` (``'package.module:function'``) with the alert."""

    type: Literal["callable"]
    function: str

    @field_validator("function")
    @classmethod
    def _import_path(cls, value: str) -> str:
        module, sep, attr = value.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"expected an import path 'package.module:function', got {value!r}")
        return value

    def describe(self) -> str:
        return f"callable {self.function}"


DestinationSpec = Annotated[WebhookDestinationSpec | CallableDestinationSpec, Field(discriminator="type")]


class AlertsSpec(_Strict):
    """Where the pipeline's alerts go (see the module docstring)."""

    destinations: list[DestinationSpec] = Field(..., min_length=1)
    timeout: float = Field(5.0, description="seconds one alert may take to reach all its destinations")
    runbook: str = Field("docs/operations.md", min_length=1,
                         description="start of each alert's runbook link (<runbook>#<anchor>)")

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration_seconds(value)

    @field_validator("timeout")
    @classmethod
    def _bounded(cls, value: float) -> float:
        if not 0 < value <= 60:
            raise ValueError(f"timeout must be more than 0 s and at most 60 s (an alert must not hold up the "
                             f"pipeline), got {value:g} s")
        return value
