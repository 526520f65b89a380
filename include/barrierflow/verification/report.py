"""The verification result of one checkpoint, stored beside it.

``chk-<n>/_verification.json`` (format ``barrierflow-verification``, version 1)::

    {"format": "barrierflow-verification", "format_version": 1,
     "pipeline": "demo", "checkpoint_id": 7, "deep": false,
     "started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:00:01+00:00",
     "passed": true,
     "checks": [{"name": "files", "status": "passed", "passed": true,
                 "message": "12 files present, sizes and sha256 match", "file": null}, ...]}

``passed`` is true when no check failed (a ``skipped`` check, e.g. an unreachable Kafka
broker for the retention-range check, does not fail the checkpoint). A newer run
overwrites the document. ``format_version`` changes when a field changes meaning.
"""

from __future__ import annotations

import enum
import logging
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError, computed_field

from barrierflow.storage import ObjectNotFoundError, ObjectStore

log = logging.getLogger(__name__)

REPORT_FORMAT = "barrierflow-verification"
REPORT_VERSION = 1
#: How the skipped ``expectation`` check of a pipeline without an expectation suite begins
#: (:mod:`barrierflow.verification.deep`): every verdict that relies on deep verification says
#: this instead of that it passed.
NO_SUITE = "no expectation suite"


def report_key(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}/_verification.json"


class CheckStatus(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class CheckResult(BaseModel):
    """One check: its name, outcome, a message saying what was found, and the file (path
    inside the Spark checkpoint, or a store key) it is about, if any."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: CheckStatus
    message: str
    file: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return self.status is not CheckStatus.FAILED

    @classmethod
    def ok(cls, name: str, message: str, file: str | None = None) -> CheckResult:
        return cls(name=name, status=CheckStatus.PASSED, message=message, file=file)

    @classmethod
    def fail(cls, name: str, message: str, file: str | None = None) -> CheckResult:
        return cls(name=name, status=CheckStatus.FAILED, message=message, file=file)

    @classmethod
    def skip(cls, name: str, message: str, file: str | None = None) -> CheckResult:
        return cls(name=name, status=CheckStatus.SKIPPED, message=message, file=file)


class VerificationReport(BaseModel):
    """Every check run on one checkpoint (see the module docstring for the JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["barrierflow-verification"] = REPORT_FORMAT
    format_version: Literal[1] = REPORT_VERSION
    pipeline: str
    checkpoint_id: int
    deep: bool = False
    started: AwareDatetime
    finished: AwareDatetime
    checks: list[CheckResult]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def reason(self) -> str:
        """One line: why the checkpoint failed (or 'passed')."""
        if self.passed:
            return "passed"
        return "; ".join(f"{c.name}: {c.message}" for c in self.failures)

    @property
    def suite_skipped(self) -> str:
        """Why deep verification checked no state with an expectation suite: the skipped
        ``expectation`` check's message when there is no suite ("" otherwise, and when not deep)."""
        return next((c.message for c in self.checks if c.name == "expectation" and c.status is CheckStatus.SKIPPED
                     and c.message.startswith(NO_SUITE)), "")

    def deep_verdict(self) -> str:
        """One line of what deep verification found ("" when it did not run): ``failed deep
        verification``, ``no expectation suite: deep verification skipped ...`` (the suite's
        expected path and the fix), or ``passed deep verification``."""
        if not self.deep:
            return ""
        if not self.passed:
            return "failed deep verification"
        return self.suite_skipped or "passed deep verification"

    @classmethod
    def parse(cls, raw: bytes) -> VerificationReport:
        import json

        data = json.loads(raw)
        if isinstance(data, dict):
            data.pop("passed", None)
            for check in data.get("checks", []) if isinstance(data.get("checks"), list) else []:
                if isinstance(check, dict):
                    check.pop("passed", None)
        return cls.model_validate(data)


def store_report(objects: ObjectStore, report: VerificationReport) -> None:
    """Write ``chk-<n>/_verification.json`` (atomically; a newer run replaces it)."""
    objects.put_bytes(report_key(report.checkpoint_id), report.model_dump_json(indent=2).encode())


def load_report(objects: ObjectStore, checkpoint_id: int) -> VerificationReport | None:
    """The stored result of ``checkpoint_id``, or None if never verified (or unreadable)."""
    try:
        return VerificationReport.parse(objects.get_bytes(report_key(checkpoint_id)))
    except ObjectNotFoundError:
        return None
    except (ValidationError, ValueError) as exc:
        log.warning("ignoring unreadable verification result of checkpoint %d: %s", checkpoint_id, exc)
        return None
