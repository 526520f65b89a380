"""Upgrade a pipeline to a changed spec (``barrierflow upgrade SPEC --to NEW_SPEC``), whatever its shape.

:func:`upgrade` is the operation: with ``dry_run`` the compatibility report of the change, without
it the change itself, from a savepoint, in recorded steps (rewrite, restore, canary, commit or roll
back). The steps live in :mod:`barrierflow.upgrade` (:mod:`~barrierflow.upgrade.steps` describes
them); the result and the errors are re-exported here for the front doors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.state.compatibility import CompatibilityReport
from barrierflow.upgrade.plan import UnknownCompatibilityError, UpgradeNotSupportedError
from barrierflow.upgrade.record import UpgradeInProgressError
from barrierflow.upgrade.report import report_for
from barrierflow.upgrade.steps import (
    DEFAULT_CANARY_CHECKPOINTS,
    UpgradeRefusedError,
    UpgradeResult,
    UpgradeRolledBackError,
    change_spec,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_CANARY_CHECKPOINTS", "UnknownCompatibilityError", "UpgradeInProgressError",
           "UpgradeNotSupportedError", "UpgradeRefusedError",
           "UpgradeResult", "UpgradeRolledBackError", "upgrade"]


def upgrade(spec_path: str | os.PathLike[str], new_spec_path: str | os.PathLike[str], *, dry_run: bool,
            checkpoint_id: int | None = None, spark: SparkSession | None = None,
            scratch: str | None = None, drop_stages: Sequence[str] = (),
            canary_checkpoints: int = DEFAULT_CANARY_CHECKPOINTS,
            canary_compare: bool = True, assume_compatible: bool = False) -> CompatibilityReport | UpgradeResult:
    """With ``dry_run``: the compatibility report of running ``new_spec_path`` over the state of
    ``spec_path``'s cut ``checkpoint_id`` (None: the newest completed one). Without: make the
    change from a savepoint (:mod:`barrierflow.upgrade.steps`) and return the :class:`UpgradeResult`.
    ``drop_stages`` names the stages of ``spec_path`` the change removes (a removed stage is
    refused unless named: its state, and its part of the cut, are dropped). ``canary_compare``
    False: the canary makes no stream-vs-batch comparison (its deep verification only).
    ``assume_compatible``: (not ``dry_run``) a stage whose verdict is ``unknown`` (state without a
    recorded fingerprint that Spark's state metadata cannot decide) is taken as compatible on the
    caller's word: the new savepoint records the new spec's fingerprint with its state, marked as
    assumed (:attr:`UpgradeResult.assumed`); without it, such a stage is refused.

    Raises:
        SpecError: either spec does not load.
        CheckpointNotFoundError: no completed cut, or ``checkpoint_id`` is not one (listing them).
        CheckpointCorruptError: a file of the cut is missing or altered in the store.
        UpgradeRefusedError: (not ``dry_run``) the pipeline runs, has no savepoint, or the
            savepoint is not its newest completed checkpoint.
        UpgradeNotSupportedError: (not ``dry_run``) the change is not one ``upgrade`` makes yet.
        UnknownCompatibilityError: (not ``dry_run``) a stage's verdict is ``unknown`` and not
            ``assume_compatible``.
        UpgradeInProgressError: (not ``dry_run``) an unfinished upgrade of the pipeline to another
            NEW_SPEC (or a changed one) is recorded: only its own command continues it.
        UpgradeRolledBackError: (not ``dry_run``) the canary failed (the message names
            the check) and the old spec was restored from the source savepoint; also on a rerun
            after that.
        RescaleFailedError: Spark's repartition failed on the scratch copy.
    """
    if not dry_run:
        if canary_checkpoints < 0:
            raise UserInputError(f"--canary-checkpoints must be 0 (no canary) or more, not {canary_checkpoints}")
        return change_spec(spec_path, new_spec_path, checkpoint_id=checkpoint_id, spark=spark, scratch=scratch,
                           drop_stages=tuple(drop_stages), canary_checkpoints=canary_checkpoints,
                           canary_compare=canary_compare, assume_compatible=assume_compatible)
    return report_for(spec_path, new_spec_path, checkpoint_id=checkpoint_id, spark=spark, scratch=scratch)
