"""The tasks a stopped streaming query leaves running, and the wait for them to end.

``StreamingQuery.stop()`` returns once the query's stream thread ended. The Spark job of a
micro-batch in flight is cancelled and marked failed at once, but its running tasks are only
asked to stop: a kill is cooperative, and a task inside a call that does not look at the
request runs on. RocksDB's commit of a state version is such a call: on 2 cores, a task
committing the state of 850,000 keys ran 8-10 s after its query was stopped. Meanwhile it holds
an executor core and its state store, so the next query of the same driver (a restore, a
restart, an upgrade's canary) waits behind it, and it may still write into the stopped query's
checkpoint directory.

A query's jobs run in the job group of its run id (``str(query.runId)``). Spark's status tracker
keeps a failed job's stages with their running tasks until those tasks end, so "no task is
active in the stages of the group's newest jobs" is the signal that the query left nothing
behind. Only the newest :data:`RECENT_JOBS` jobs of the group are looked at: a stop can leave
only the jobs of its last micro-batch running. The tracker learns of tasks from Spark's
listener bus, which runs behind the scheduler: :func:`wait_for_tasks` first lets the bus deliver
every event posted so far (every start of the stopped query's tasks among them), so a task the
tracker has not heard of yet does not pass for one that ended.
"""

from __future__ import annotations

import time
from typing import Any

#: How many of a job group's newest jobs :func:`active_tasks` looks at.
RECENT_JOBS = 8
#: How often :func:`wait_for_tasks` asks the status tracker.
POLL_SECONDS = 0.05
#: How long :func:`wait_for_tasks` lets the listener bus catch up at most (milliseconds).
EVENTS_WAIT_MS = 10_000


def active_tasks(spark_context: Any, job_group: str) -> int:
    """The tasks still running in the stages of ``job_group``'s newest :data:`RECENT_JOBS`
    jobs, by ``spark_context``'s status tracker (0 for a group Spark does not know)."""
    tracker = spark_context.statusTracker()
    jobs = sorted(tracker.getJobIdsForGroup(job_group))[-RECENT_JOBS:]
    running = 0
    for job_id in jobs:
        job = tracker.getJobInfo(job_id)
        for stage_id in (job.stageIds if job is not None else ()):
            stage = tracker.getStageInfo(stage_id)
            running += stage.numActiveTasks if stage is not None else 0
    return running


def wait_for_tasks(spark_context: Any, job_group: str, *, limit: float, poll: float = POLL_SECONDS) -> int:
    """Wait at most ``limit`` seconds until :func:`active_tasks` of ``job_group`` is 0, after the
    listener bus delivered the events posted before the call (module docstring); returns the tasks
    still running when it returned (0: none left)."""
    deadline = time.monotonic() + limit
    _deliver_events(spark_context, min(EVENTS_WAIT_MS, int(limit * 1000)))
    while True:
        running = active_tasks(spark_context, job_group)
        if running == 0 or time.monotonic() >= deadline:
            return running
        time.sleep(poll)


def _deliver_events(spark_context: Any, timeout_ms: int) -> None:
    """Let Spark's listener bus deliver the events posted so far (at most ``timeout_ms``; a bus
    still behind then is left to the polling that follows)."""
    try:
        spark_context._jsc.sc().listenerBus().waitUntilEmpty(timeout_ms)
    except Exception:  # a TimeoutException (a bus still busy): the polling sees its events later
        return
