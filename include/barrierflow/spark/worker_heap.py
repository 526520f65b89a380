"""Keeping a reused Spark Python worker's garbage collection proportional to one task.

A reused PySpark worker runs ``gc.collect()`` after every task (``pyspark/daemon.py``), a full
collection that walks every object the process tracks: the modules barrierflow, pyarrow,
pydantic and confluent-kafka import are several hundred thousand objects, and each task paid
for walking them again. Profiled in the two-stage channel benchmark (2 cores, about ten
Python tasks a second), those collections were 76 % of the Python workers' CPU; in a
single-stage pipeline of small micro-batches, the write-ahead sink's per-batch planning and
commit workers spent 70 % of their CPU there.

:func:`freeze_long_lived` moves the objects alive at a task's start into the interpreter's
permanent generation (:func:`gc.freeze`, O(1)): the collection after the task then walks only
what the task itself created. It is called at the start of every function Spark runs in a
Python worker for barrierflow: in executors (data source ``read``, the channel writer's task,
the write-ahead writer's ``write``) and in the workers Spark starts for the driver's side of a
Python data source (the write-ahead source's ``writer``, its writer's ``commit`` and
``abort``). At a task's start the previous task's garbage has already been collected, so what
is frozen is live (imported modules, cached clients and readers); what it costs is that a cycle
among those objects that dies later is not reclaimed.

Contract: it acts only in a process Spark started as a Python worker (Spark's worker factory
sets ``PYTHON_WORKER_FACTORY_SECRET`` in their environment); anywhere else, the driver's own
Python above all (whose objects come and go with every micro-batch), it does nothing.
"""

from __future__ import annotations

import gc
import os

#: Set by Spark's Python worker factory in every Python worker (daemon, forked or planner) it starts.
WORKER_MARKER = "PYTHON_WORKER_FACTORY_SECRET"


def in_spark_worker() -> bool:
    """Whether this process is a Python worker Spark started."""
    return WORKER_MARKER in os.environ


def freeze_long_lived() -> None:
    """In a Spark Python worker: exclude every object alive now from later garbage collections of
    this process. Elsewhere: nothing."""
    if in_spark_worker():
        gc.freeze()
