"""The one alert type: :class:`Alert`, of one :class:`AlertKind`, and its JSON payload.

An alert says which pipeline, what happened (``kind``), the cause (``message``, the error of
the failed task or of the run, which names the thing that is wrong), what to do (``action``,
one sentence per kind) and where the runbook says more (``runbook``, a link ending in the
anchor of the kind's section of ``docs/operations.md``). Alerts raised from Airflow carry the
DAG, run and task; those of the restart supervisor the restart's figures in ``details``. The
time is timezone-aware (UTC).

The payload (:meth:`Alert.payload`) is one JSON object, schema version 1::

    {"version": 1, "pipeline": "demo", "kind": "checkpoint_age", "severity": "critical",
     "summary": "pipeline demo: checkpoint age breach", "message": "...", "action": "...",
     "runbook": "docs/operations.md#checkpoint-age-breach", "time": "2026-01-01T00:00:00+00:00",
     "dag_id": "...", "run_id": "...", "task_id": "...", "try_number": 1, "details": {...},
     "text": "..."}

``dag_id``, ``run_id``, ``task_id`` and ``try_number`` are null outside Airflow. ``text`` is the
whole alert as one message (summary, cause, action, runbook): chat webhooks that show a ``text``
field (Slack and Mattermost incoming webhooks) show it as it is.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["PAYLOAD_VERSION", "Alert", "AlertKind"]

#: Schema version of :meth:`Alert.payload`.
PAYLOAD_VERSION = 1


class AlertKind(enum.Enum):
    """What raised the alert; the value is the event name of the spec's ``alerts`` block.

    Each kind carries its severity, the title of its runbook section (whose anchor ends the
    alert's ``runbook`` link) and what to do, with ``{name}`` for the pipeline's name."""

    TASK_FAILURE = "task_failure"
    CHECKPOINT_AGE = "checkpoint_age"
    VERIFICATION = "verification"
    RESTART = "restart"
    GAVE_UP = "gave_up"

    @property
    def severity(self) -> str:
        return "warning" if self is AlertKind.RESTART else "critical"

    @property
    def title(self) -> str:
        return _TITLES[self]

    @property
    def anchor(self) -> str:
        """The GitHub-style anchor of the runbook section titled :attr:`title`."""
        return self.title.lower().replace(" ", "-")

    def action(self, name: str) -> str:
        return _ACTIONS[self].format(name=name)


_TITLES = {
    AlertKind.TASK_FAILURE: "Job failed",
    AlertKind.CHECKPOINT_AGE: "Checkpoint age breach",
    AlertKind.VERIFICATION: "Failed verification",
    AlertKind.RESTART: "Restart",
    AlertKind.GAVE_UP: "Restart strategy gave up",
}
_ACTIONS = {
    AlertKind.TASK_FAILURE: (
        "Read the failed task's log. If the job is down: 'barrierflow checkpoints list SPEC', then trigger "
        "barrierflow_recover__{name} (or 'barrierflow restore SPEC --latest-valid' and 'barrierflow run SPEC')"),
    AlertKind.CHECKPOINT_AGE: (
        "The job is dead, stuck or cannot complete checkpoints: 'barrierflow checkpoints list SPEC' shows the failed "
        "ones and why; read the job's log; if the job is down, trigger barrierflow_recover__{name}"),
    AlertKind.VERIFICATION: (
        "Do not restore the named checkpoint: 'barrierflow verify SPEC --latest 3' names each failed check; a "
        "recovery with checkpoint=latest-valid skips it. If every retained checkpoint fails, check the checkpoint "
        "storage first"),
    AlertKind.RESTART: (
        "No action for one restart: the job continues from its latest checkpoint. Read the cause; repeated restarts "
        "are a job failure"),
    AlertKind.GAVE_UP: (
        "The job is stopped. Fix the cause, then run it again ('barrierflow run SPEC', or trigger "
        "barrierflow_recover__{name}): it continues from its latest checkpoint"),
}


@dataclass(frozen=True)
class Alert:
    """One alert (see the module docstring). ``at`` must be timezone-aware."""

    pipeline: str
    kind: AlertKind
    message: str
    runbook: str
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    try_number: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            raise ValueError(f"alert time {self.at!r} is naive; expected timezone-aware (e.g. datetime.now(UTC))")

    @classmethod
    def of(cls, pipeline: str, kind: AlertKind, message: str, *, runbook: str = "docs/operations.md",
           **fields: Any) -> Alert:
        """An alert whose ``runbook`` link is ``runbook`` (the spec's ``alerts.runbook``) with the
        kind's anchor."""
        return cls(pipeline, kind, message, f"{runbook.split('#', 1)[0]}#{kind.anchor}", **fields)

    @property
    def summary(self) -> str:
        where = f" ({self.dag_id}.{self.task_id})" if self.dag_id and self.task_id else ""
        return f"pipeline {self.pipeline}: {self.kind.title.lower()}{where}"

    @property
    def action(self) -> str:
        return self.kind.action(self.pipeline)

    @property
    def text(self) -> str:
        """The whole alert as one message."""
        return f"[barrierflow] {self.summary}\n{self.message}\nWhat to do: {self.action}.\nRunbook: {self.runbook}"

    def payload(self) -> dict[str, Any]:
        """The JSON object a webhook receives (schema: the module docstring)."""
        return {
            "version": PAYLOAD_VERSION,
            "pipeline": self.pipeline,
            "kind": self.kind.value,
            "severity": self.kind.severity,
            "summary": self.summary,
            "message": self.message,
            "action": self.action,
            "runbook": self.runbook,
            "time": self.at.astimezone(UTC).isoformat(),
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "try_number": self.try_number,
            "details": self.details,
            "text": self.text,
        }
