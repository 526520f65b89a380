"""Verify a pipeline's checkpoints (``barrierflow verify``, the scheduled verification DAG)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.ops.pipeline import open_pipeline
from barrierflow.verification.report import VerificationReport
from barrierflow.verification.runner import select_ids, verification_summary, verify_checkpoints


@dataclass(frozen=True)
class VerifyOutcome:
    pipeline: str
    storage: str
    reports: list[VerificationReport]

    @property
    def failed(self) -> list[VerificationReport]:
        return [r for r in self.reports if not r.passed]

    def summary(self) -> dict[str, Any]:
        """The JSON document of ``barrierflow verify --json``."""
        return verification_summary(self.pipeline, self.storage, self.reports)


def verify(spec_path: str | os.PathLike[str], *, checkpoint_id: int | None = None, latest: int | None = None,
           deep: bool = False) -> VerifyOutcome:
    """Verify one checkpoint, the newest ``latest``, or every candidate; each result is stored
    beside its checkpoint. A failed check is a result, not an error.

    Raises:
        SpecError: the spec does not load.
        CheckpointNotFoundError: ``checkpoint_id`` does not exist.
        UserInputError: ``latest`` is below 1.
        StorageError: the checkpoint store cannot be read.
    """
    pipeline = open_pipeline(spec_path)
    ids = select_ids(pipeline.store, checkpoint_id, latest)
    reports = verify_checkpoints(pipeline.spec, pipeline.store, ids, deep=deep)
    return VerifyOutcome(pipeline.name, pipeline.store.uri, reports)
