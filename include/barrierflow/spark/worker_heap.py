"""Keeping a reused Spark Python worker's garbage collection proportional to one task.

A reused PySpark worker runs ``gc.collect()`` after every task (``pyspark/daemon.py``), a full
collection that walks every object the process tracks: the modules barrierflow, pyarrow,
pydantic and confluent-kafka import are several hundred thousand objects, and each task paid
for walking them again. Profiled in the two-stage channel benchmark (2 cores, about ten
Python tasks a second), those collections were 76 % of the Python workers' CPU.

:func:`freeze_long_lived` moves the objects alive at a task's start into the interpreter's
permanent generation (:func:`gc.freeze`, O(1)): the collection after the task then walks only
what the task itself created. It is called at the start of every function Spark runs in a
Python worker for barrierflow (data source ``read``, the channel writer's task, the write-ahead
writer). At a task's start the previous task's garbage has already been collected, so what is
frozen is live (imported modules, cached clients and readers); what it costs is that a cycle
among those objects that dies later is not reclaimed. Contract: call it only in an executor's
Python worker, never in the driver (whose objects come and go with every micro-batch).
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Exclude every object alive now from later garbage collections of this process."""
    gc.freeze()
