"""The params of the barrierflow DAGs (``airflow.sdk.Param``: defaults, JSON schema, description).

Each function returns the params of one kind of DAG (``dags/barrierflow_pipelines.py`` names
them in its table of DAG kinds). They read nothing but the spec: safe at DAG-parse time. The
recovery's defaults are :data:`barrierflow.airflow.runbook.DEFAULT_PARAMS`, which its first
task validates again.
"""

from __future__ import annotations

from airflow.sdk import Param

from barrierflow.airflow.launch_defaults import bounded_sources
from barrierflow.airflow.runbook import DEFAULT_PARAMS as RECOVER_DEFAULTS
from barrierflow.pipeline.layout import cut_layout
from barrierflow.spec.stages import PipelineSpec


def max_age_param(checkpoint_interval: float, slack: float = 0.0) -> Param:
    """``max_checkpoint_age_seconds``: three checkpoint intervals (at least a second) plus ``slack``."""
    return Param(
        max(1.0, 3 * checkpoint_interval) + slack,
        type="number",
        minimum=1,
        description="Fail when the latest completed checkpoint is older than this many seconds.",
    )


def stall_after_param(checkpoint_interval: float) -> Param:
    """``stall_after_seconds`` of the launch: ten checkpoint intervals, at least ten minutes."""
    return Param(
        max(600.0, 10 * checkpoint_interval),
        type="number",
        minimum=1,
        description="While the pipeline runs, fail the launch as stalled when no checkpoint completed for this "
                    "many seconds (counted from the launch or the newest completed checkpoint, whichever is later). "
                    "The pipeline itself is not stopped.",
    )


def verify_params(latest: int, deep: bool) -> dict[str, Param]:
    """``latest`` and ``deep`` of the verification DAG, defaulting to the spec's settings."""
    return {
        "latest": Param(latest, type="integer", minimum=1,
                        description="Verify this many of the newest checkpoints."),
        "deep": Param(deep, type="boolean",
                      description="Also restore each checkpoint, read its state with Spark and run the "
                                  "expectation suite."),
    }


def stop_params() -> dict[str, Param]:
    """The stop DAG's params: with a savepoint (default) or not, and how long to wait."""
    return {
        "savepoint": Param(True, type="boolean",
                           description="Take one more checkpoint first, let every sink commit it and keep it as a "
                                       "savepoint (false: stop after the pending checkpoints, taking no new one)."),
        "timeout_seconds": Param(600, type="integer", minimum=1,
                                 description="Fail when the pipeline has not stopped within this many seconds."),
    }


def maintain_params() -> dict[str, Param]:
    """The table maintenance DAG's params (those of ``barrierflow lake maintain``)."""
    return {
        "older_than_hours": Param(0.0, type="number",
                                  description="Iceberg: expire only snapshots older than this many hours (0: every "
                                              "snapshot the restore rule and the retained cuts do not need)."),
        "retention_hours": Param(168, type="integer", minimum=0,
                                 description="Delta: VACUUM keeps files removed within this many hours; files of the "
                                             "versions the restore rule and the retained cuts need are always kept."),
    }


#: The upgrade DAG's default ``canary_checkpoints``: ``barrierflow upgrade``'s
#: (:data:`barrierflow.upgrade.steps.DEFAULT_CANARY_CHECKPOINTS`, which imports too much to be
#: read at DAG-parse time; a test holds the two equal).
UPGRADE_CANARY_CHECKPOINTS = 3


def upgrade_params() -> dict[str, Param]:
    """The upgrade DAG's params: the changed spec, whether to stop after the report, which cut,
    the canary's length (the CLI's ``--canary-checkpoints``) and whether an unknown verdict is
    taken as compatible on the user's word (``--assume-compatible``)."""
    return {
        "new_spec": Param(type="string", minLength=1,
                          description="Path of the changed spec (the pipeline's new version) on the Airflow "
                                      "workers, relative to BARRIERFLOW_HOME or absolute."),
        "dry_run": Param(True, type="boolean",
                         description="Report only (default): compatible, needs rewrite, unknown or incompatible, per "
                                     "stage and operator. False: after the report, ask a person to approve, then "
                                     "upgrade."),
        "checkpoint": Param(None, type=["null", "integer"], minimum=1,
                            description="The checkpoint or savepoint whose state is compared (default: the newest "
                                        "completed one)."),
        "canary_checkpoints": Param(
            UPGRADE_CANARY_CHECKPOINTS, type="integer", minimum=0,
            description="How many checkpoints of the new spec must pass deep verification, their output held back, "
                        "before the upgrade commits it; a failure rolls back to the old spec (0: no canary)."),
        "assume_compatible": Param(
            False, type="boolean",
            description="Take a stage whose compatibility is unknown (state without a recorded fingerprint that "
                        "Spark's state metadata cannot decide) as compatible, on your word: the upgrade records the "
                        "new spec's fingerprint with that state, marked as assumed. False: an unknown verdict fails "
                        "the report."),
    }


def recover_params() -> dict[str, Param]:
    """The recovery DAG's params (checked by their schema when triggered, and by its first task)."""
    return {
        "checkpoint": Param(
            RECOVER_DEFAULTS["checkpoint"], type=["string", "integer"], pattern=r"^(latest-valid|latest|[1-9][0-9]*)$",
            minimum=1,
            description='"latest-valid": the newest checkpoint that passes structural verification (newer ones are '
                        'skipped and listed); "latest": the newest checkpoint, verified first; or a checkpoint id.'),
        "accept_duplicates": Param(
            RECOVER_DEFAULTS["accept_duplicates"], type="boolean",
            description="Restore even if output already committed after the checkpoint would be written again, "
                        "instead of failing when it cannot be replayed with the output suppressed."),
        "restart": Param(RECOVER_DEFAULTS["restart"], type="boolean",
                         description="Trigger the pipeline's launch DAG after the restore."),
        "wait_seconds": Param(
            RECOVER_DEFAULTS["wait_seconds"], type="integer", minimum=1,
            description="After the restart, wait this many seconds for the first new completed checkpoint."),
    }


def launch_params(spec: PipelineSpec, slack: float) -> dict[str, Param]:
    """The launch DAG's params: the checkpoint age its ``supervise`` allows after the job ended
    (plus ``slack`` for that task to be scheduled), the time without a completed checkpoint after
    which the running pipeline is reported stalled, and ``until_exhausted`` (default: whether the
    sources are bounded)."""
    bounded = bounded_sources(spec)
    return {
        "max_checkpoint_age_seconds": max_age_param(spec.checkpoint.interval, slack),
        "stall_after_seconds": stall_after_param(spec.checkpoint.interval),
        "until_exhausted": Param(
            bounded, type="boolean",
            description="Stop the job once a bounded source is exhausted and everything is committed "
                        "(default: true exactly when the spec's source is bounded; with stages, every "
                        "source stage's)."),
    }


def chaos_run_params(spec: PipelineSpec) -> dict[str, Param]:
    """The chaos DAG's params (checked again by :func:`barrierflow.airflow.chaos.chaos_params`);
    ``mode`` defaults to ``mixed`` for a pipeline of several stages, ``group`` otherwise."""
    return {
        "kills": Param(20, type="integer", minimum=1, description="How many times the copy under test is killed."),
        "seed": Param(0, type="integer", description="Random seed: the same seed makes the same choices."),
        "mode": Param(cut_layout(spec).kill_mode, type="string", enum=["group", "jvm", "stage", "mixed"],
                      description="What a kill hits: the process group, the driver's JVM, one stage process "
                                  "(with processes), or any of them."),
        "min_gap": Param(5.0, type="number", exclusiveMinimum=0, description="Shortest run before a kill (s)."),
        "max_gap": Param(30.0, type="number", exclusiveMinimum=0, description="Longest run before a kill (s)."),
        "point_share": Param(0.25, type="number", minimum=0, maximum=1,
                             description="Share of the kills made at a protocol point of barrierflow.faults."),
        "processes": Param(False, type="boolean", description="Several stages: one process per stage."),
        "scratch": Param("", type="string", description="Where the copies, logs and report go (empty: beside the "
                                                         "pipeline's work dir)."),
    }


def day_param() -> dict[str, Param]:
    """The rollup DAG's ``day`` (empty: every day with new output)."""
    return {"day": Param("", type="string", pattern=r"^(|[0-9]{4}-[0-9]{2}-[0-9]{2})$",
                         description="Roll up this UTC day (YYYY-MM-DD). Empty: every day with output committed "
                                     "since the last rollup (all days at the first run).")}


def range_params() -> dict[str, Param]:
    """The recompute DAG's ``start`` and ``end`` (ISO times; empty: the whole closed range)."""
    iso = r"^(|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9]{2}:[0-9]{2}))$"
    return {
        "start": Param("", type="string", pattern=iso,
                       description="First window start compared (ISO time with timezone). Empty: the source's first "
                                   "record."),
        "end": Param("", type="string", pattern=iso,
                     description="Compare the windows ending before this (ISO time with timezone). Empty: the "
                                 "watermark of the newest checkpoint whose output is committed."),
    }


def epochs_param(default: int) -> dict[str, Param]:
    """The quality DAG's ``epochs``: how many of the newest committed epochs to validate."""
    return {"epochs": Param(default, type="integer", minimum=1,
                            description="Validate the output of this many of the newest committed epochs.")}
