"""The deferrable watch of a cluster-mode launch: :class:`ClusterAppWatchTrigger`.

In cluster deploy mode on Kubernetes or YARN the cluster manager hosts the driver. The launch
task submits the application with a name of barrierflow's choosing and
``waitAppCompletion=false`` (:mod:`barrierflow.spark.cluster_apps`), so spark-submit returns once
the application is handed over, and defers to this trigger: the task holds no worker slot while
the pipeline runs. Every ``poll_seconds`` the trigger asks the cluster manager's REST API for the
application's state and reads the pipeline's lease and newest checkpoint
(:func:`barrierflow.ops.cluster_watch.observe_cluster`), and fires one event once
:func:`~barrierflow.ops.cluster_watch.decide_cluster` says ``finished``, ``failed`` or
``stalled`` (payload: outcome, message, the application). A look that cannot reach the cluster
manager or the store is logged and repeated, never an event.

The trigger holds only its serialized arguments: after a restart of the triggerer (or of all of
Airflow) it is rebuilt from the metadata database and asks again. The time comes from
:meth:`ClusterAppWatchTrigger.now`, which a test replaces.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from barrierflow.airflow.supervision import VerdictWatchTrigger


class ClusterAppWatchTrigger(VerdictWatchTrigger):
    """Watch one cluster-hosted driver (see the module docstring).

    Args:
        app: :meth:`barrierflow.spark.cluster_apps.ClusterApp.as_dict` of the submitted application.
        spec_path: the pipeline's spec (its checkpoint store holds the lease and the cuts).
        barrierflow_home: where relative paths in the spec resolve.
        submitted_at: when spark-submit returned (ISO 8601, with its offset).
        stall_after_seconds: report ``stalled`` after this long without a completed checkpoint
            (or without a started driver).
        lost_after_seconds: report ``failed`` when the application is still unknown to the
            cluster manager this long after the submit.
        poll_seconds: time between two looks.
        token_file, ca_file: the Kubernetes API's credentials (default: the service account's).
    """

    def __init__(self, *, app: dict[str, str], spec_path: str, barrierflow_home: str, submitted_at: str,
                 stall_after_seconds: float, lost_after_seconds: float, poll_seconds: float = 20.0,
                 token_file: str | None = None, ca_file: str | None = None) -> None:
        super().__init__()
        self.app = dict(app)
        self.spec_path = spec_path
        self.barrierflow_home = barrierflow_home
        self.submitted_at = submitted_at
        self.stall_after_seconds = stall_after_seconds
        self.lost_after_seconds = lost_after_seconds
        self.poll_seconds = poll_seconds
        self.token_file = token_file
        self.ca_file = ca_file

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "app": self.app, "spec_path": self.spec_path, "barrierflow_home": self.barrierflow_home,
            "submitted_at": self.submitted_at, "stall_after_seconds": self.stall_after_seconds,
            "lost_after_seconds": self.lost_after_seconds, "poll_seconds": self.poll_seconds,
            "token_file": self.token_file, "ca_file": self.ca_file})

    @property
    def watched(self) -> str:
        return str(self.app.get("name"))

    def look(self, now: datetime) -> tuple[str, str, dict[str, Any]]:
        """The application's verdict (:func:`barrierflow.ops.cluster_watch.decide_cluster`) at
        ``now``.

        Raises:
            BarrierflowError: the cluster manager or the store could not be read (look again).
        """
        from barrierflow.ops.cluster_watch import decide_cluster, observe_cluster
        from barrierflow.spark.cluster_apps import ClusterApp

        if self.barrierflow_home:
            os.environ.setdefault("BARRIERFLOW_HOME", self.barrierflow_home)
        obs = observe_cluster(ClusterApp.from_dict(self.app), self.spec_path,
                              datetime.fromisoformat(self.submitted_at), now=now,
                              token_file=self.token_file, ca_file=self.ca_file)
        verdict = decide_cluster(obs, stall_after=self.stall_after_seconds, lost_after=self.lost_after_seconds)
        return verdict["outcome"], verdict["message"], {**verdict, "app": self.app, "app_id": obs.status.app_id}
