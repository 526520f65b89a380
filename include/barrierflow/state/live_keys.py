"""How many keys barrierflow's keyed functions hold in a stage's state, read with Spark.

Every key that has state in a keyed function of barrierflow's API holds exactly one row of
:data:`~barrierflow.keyed_state.expiry.LAST_EVENT_STATE` (its last update), so the keys in the
state are that variable's rows, counted by Spark's ``statestore`` reader on the executors (one
number reaches the driver) for every keyed operator in Spark's ``state-metadata``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.keyed_state.expiry import LAST_EVENT_STATE
from barrierflow.spark import commit_log
from barrierflow.state.reader import keyed_variables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["keys_in_state"]

log = logging.getLogger(__name__)


def keys_in_state(spark: SparkSession, checkpoint: str | Path) -> int | None:
    """Keys in the state of the Spark checkpoint ``checkpoint`` after its newest committed batch
    (0: no batch committed yet); None when it cannot be read (logged), or the state holds no
    keyed operator with the last-update variable."""
    batch = commit_log.latest_committed(checkpoint)
    if batch is None:
        return 0
    try:
        rows = [r.asDict() for r in spark.read.format("state-metadata").load(str(checkpoint)).collect()]
        keyed = {op: variables for op, variables in keyed_variables(rows).items()
                 if any(name == LAST_EVENT_STATE for name, _, _ in variables)}
        if not keyed:
            return None
        return sum(spark.read.format("statestore").option("batchId", batch).option("operatorId", op)
                   .option("stateVarName", LAST_EVENT_STATE).load(str(checkpoint)).count() for op in keyed)
    except Exception as exc:  # report data: the run goes on without the count
        log.warning("the keys in the state of %s could not be counted (%s); the live-keys figure is not reported",
                    checkpoint, exc)
        return None
