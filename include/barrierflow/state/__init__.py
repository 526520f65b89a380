"""State you can read: a completed checkpoint's Spark state, read with Spark's own readers.

:mod:`.reader` materializes one stage's checkpoint from the checkpoint store into a scratch
directory (never the live Spark checkpoint; the store is only read) and reads it with Spark's
``state-metadata`` and ``statestore`` data sources at the barrier batch of that checkpoint: the
stateful operators and their key and value schemas, the state as a flat table, the difference
between two checkpoints and the sizes per partition. :mod:`.compatibility` compares what a
checkpoint's state was built with against what another spec would build and gives a verdict
per stage and operator. Deep verification (:mod:`barrierflow.verification.deep`) reads state
through the same reader.
"""

from barrierflow.state.errors import AmbiguousStateError, StatelessStageError
from barrierflow.state.reader import OperatorSchema, StateSnapshot, flat_fields, open_state, read_flat_state

__all__ = ["AmbiguousStateError", "OperatorSchema", "StateSnapshot", "StatelessStageError", "flat_fields",
           "open_state", "read_flat_state"]
