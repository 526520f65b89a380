"""The exception hierarchy: one root, :class:`BarrierflowError`.

Every error barrierflow raises on purpose derives from it. Errors caused by the user's
input (a bad spec, a missing or corrupt checkpoint, bad CLI arguments) derive from
:class:`UserInputError`; the CLI maps those to exit code 2 and every other
:class:`BarrierflowError` to exit code 1. Messages name the thing that is wrong and the fix.
"""

from __future__ import annotations


class BarrierflowError(Exception):
    """Root of every error barrierflow raises on purpose."""


class UserInputError(BarrierflowError):
    """The input is wrong (spec, arguments, checkpoint chosen); the CLI exits with code 2."""


class SpecError(UserInputError):
    """A pipeline spec is invalid.

    Attributes:
        path: the spec file.
        problems: one ``(field, message)`` pair per problem, field as a dotted path.
    """

    def __init__(self, path: str, problems: list[tuple[str, str]]) -> None:
        self.path = path
        self.problems = problems
        lines = [f"invalid pipeline spec {path}:"]
        lines += [f"  - {field}: {message}" for field, message in problems]
        super().__init__("\n".join(lines))


class StorageError(BarrierflowError):
    """The checkpoint store or a sink's object store failed (I/O, permissions, endpoint)."""


class CheckpointError(BarrierflowError):
    """A checkpoint could not be taken, read or restored."""


class CheckpointNotFoundError(CheckpointError, UserInputError):
    """The checkpoint asked for does not exist (or has no manifest, so it never completed)."""


class CheckpointCorruptError(CheckpointError, UserInputError):
    """A checkpoint's manifest or one of its files is missing, truncated or altered."""


class TolerableFailuresExceededError(CheckpointError):
    """More consecutive checkpoints failed than ``checkpoint.tolerable_failed_checkpoints``."""

    def __init__(self, failures: int, tolerable: int, last_reason: str) -> None:
        self.failures = failures
        self.tolerable = tolerable
        self.last_reason = last_reason
        super().__init__(
            f"{failures} consecutive checkpoints failed, more than the tolerable "
            f"{tolerable} (checkpoint.tolerable_failed_checkpoints); last failure: {last_reason}. "
            "The job was stopped so that no further output is produced without a restorable "
            "checkpoint; fix the cause (usually the checkpoint store) and run again."
        )


class SourceError(BarrierflowError):
    """A source cannot be read (dead broker, unknown topic, offsets out of range)."""


class SourceUnavailableError(SourceError):
    """A source's brokers do not answer (possibly for a while: a restart, a network blip)."""


class SinkError(BarrierflowError):
    """A sink could not stage, pre-commit, commit or abort its output."""


class JobFailedError(BarrierflowError):
    """The streaming query stopped with an exception."""


class SparkDriverDiedError(JobFailedError):
    """The driver's Spark JVM died under a run (killed, out of memory); the message names it
    (its pid when known) and the checkpoint the next run resumes from."""


class IncompatibleStateError(UserInputError):
    """A stage's spec changed in a way its saved state cannot honour (shuffle partitions, the
    stateful operators); the run is refused before the stage's query starts
    (:mod:`barrierflow.runtime.state_compat`).

    Attributes:
        pipeline: the pipeline's name.
        stage: the stage's name.
        change: what changed, ``old -> new``.
    """

    def __init__(self, *, pipeline: str, stage: str, change: str, state: str) -> None:
        self.pipeline = pipeline
        self.stage = stage
        self.change = change
        super().__init__(
            f"stage {stage} of pipeline {pipeline}: the spec changed what its saved state was built with "
            f"({change}); the state in {state} cannot honour that, so the run was refused before the stage "
            "processed anything. Either revert the change to keep the state; or make it through an upgrade, "
            "with the spec the state was built with as SPEC and the changed one as NEW_SPEC: "
            "`barrierflow upgrade SPEC --to NEW_SPEC --dry-run` says what the change keeps, per stage and "
            "operator (compatible, needs rewrite, unknown or incompatible), and without --dry-run, from a savepoint "
            "(`barrierflow stop SPEC --savepoint`), it rewrites what it can (of RocksDB state: a rescale, value "
            "columns added or dropped, the state rebuilt from an input it can replay) and refuses the rest, naming "
            "it (docs/upgrades.md); or start the pipeline from empty state: "
            "give it a new `work_dir` and a new `checkpoint.storage` in the spec (or delete both, losing every "
            "checkpoint) and run again."
        )


class UnverifiedStateError(UserInputError):
    """A stage's saved state has no recorded fingerprint and Spark's state metadata cannot tell
    whether the spec still fits it (``unknown``); the run is refused before the stage's query
    starts (:mod:`barrierflow.runtime.state_compat`). The message names why and
    ``upgrade --assume-compatible``, which proceeds on the user's word and records the fingerprint.

    Attributes:
        pipeline, stage: the names.
        why: why it cannot be decided.
    """

    def __init__(self, *, pipeline: str, stage: str, why: str, state: str) -> None:
        self.pipeline = pipeline
        self.stage = stage
        self.why = why
        super().__init__(
            f"stage {stage} of pipeline {pipeline}: its saved state in {state} has no recorded fingerprint (written "
            f"before barrierflow recorded one), and what Spark records with it cannot tell whether the spec still "
            f"fits it: {why}. Unknown is not compatible, so the run was refused before the stage processed "
            "anything. If the spec is the one the state was built with (or you know its change keeps the state's "
            "meaning), say so: make the newest checkpoint a savepoint with `barrierflow savepoint SPEC`, then "
            "`barrierflow upgrade SPEC --to SPEC --assume-compatible` (SPEC as NEW_SPEC too) records the spec's "
            "fingerprint with the state, marked as assumed, and runs its canary; `barrierflow run SPEC` then "
            "continues. Otherwise start the pipeline on empty state: give it a new `work_dir` and a new "
            "`checkpoint.storage` and run again."
        )
