"""Named crash points for fault-injection tests: the driver SIGKILLs itself there.

Set ``BARRIERFLOW_CRASH_AT`` in the job's environment:

* ``POINT`` — crash the first time POINT is reached;
* ``POINT@N`` — crash the N-th time POINT is reached (1-based, counted in this process);
* ``random:SEED:P`` — at every point, crash with probability P (seeded, reproducible).

Points (in protocol order): ``mid_epoch`` (a micro-batch about to be written ahead),
``during_upload`` (a checkpoint's files partly stored), ``after_precommit`` (sinks
pre-committed, manifest not yet written), ``after_manifest`` (checkpoint complete, sinks not
yet told), ``mid_sink_commit`` (a sink commit half done); in multi-stage pipelines
``after_global_manifest`` (global checkpoint complete, final stages' sinks not yet told); inside
the Kafka sink's transaction ``kafka_before_marker`` (the epoch's records acknowledged, marker
not yet sent) and ``kafka_after_marker`` (marker acknowledged, ``commit_transaction`` not yet
called): both leave an aborted Kafka transaction behind; in the atomic Iceberg commit
``iceberg_atomic_prepared`` (the cut's tables moved in a prepared transaction, ``COMMIT
PREPARED`` not yet run); in ``barrierflow upgrade``
``upgrade_mid_rewrite`` (every stage's part of the new savepoint stored, the savepoint not yet
recorded: a run again makes the rewrite anew, its id still the next free one),
``upgrade_after_rewrite`` (the savepoint to restore is recorded, the canary not yet started),
``upgrade_before_commit`` (the canary passed and is recorded, its epochs not yet committed) and
``upgrade_mid_rollback`` (the canary failed and is recorded, the old spec not yet restored); the
canary's own checkpoints reach the stage points. Production code calls
:func:`crash_point`; with the variable unset it does nothing but a dictionary look-up.

In-process tests can instead run a function at a point (:func:`at_point`), e.g. to stop a
database right after the sinks' pre-commit, between PREPARE and COMMIT PREPARED.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)
#: The protocol points of one stage (a single-stage job reaches every one of them).
STAGE_POINTS = ("mid_epoch", "during_upload", "after_precommit", "after_manifest", "mid_sink_commit")
#: Points only the coordinator of a multi-stage pipeline reaches.
PIPELINE_POINTS = ("after_global_manifest",)
#: Points inside one sink type's commit (reached only by pipelines with such a sink).
SINK_POINTS = {"kafka": ("kafka_before_marker", "kafka_after_marker"), "iceberg": ("iceberg_atomic_prepared",)}
POINTS = STAGE_POINTS + PIPELINE_POINTS + tuple(p for points in SINK_POINTS.values() for p in points)
#: Points of ``barrierflow upgrade`` (:mod:`barrierflow.upgrade`): never reached by a run, so
#: not among the :data:`POINTS` a chaos run may name.
UPGRADE_POINTS = ("upgrade_mid_rewrite", "upgrade_after_rewrite", "upgrade_before_commit",
                  "upgrade_mid_rollback")
ENV = "BARRIERFLOW_CRASH_AT"
_hits: Counter[str] = Counter()
_lock = threading.Lock()
_random: random.Random | None = None
_actions: dict[str, list[Callable[[dict[str, object]], None]]] = {}


@contextmanager
def at_point(name: str, action: Callable[[dict[str, object]], None]) -> Iterator[None]:
    """While in the block, call ``action(context)`` each time point ``name`` is reached (in the
    thread that reaches it, before any crash that ``BARRIERFLOW_CRASH_AT`` selects)."""
    if name not in POINTS:
        raise ValueError(f"unknown protocol point {name!r}; one of {', '.join(POINTS)}")
    _actions.setdefault(name, []).append(action)
    try:
        yield
    finally:
        _actions[name].remove(action)


def crash_point(name: str, **context: object) -> None:
    """SIGKILL this process if ``BARRIERFLOW_CRASH_AT`` selects ``name`` now (first running
    the actions :func:`at_point` registered for it)."""
    for action in list(_actions.get(name, ())):
        action(context)
    spec = os.environ.get(ENV)
    if not spec:
        return
    global _random
    with _lock:
        _hits[name] += 1
        hit = _hits[name]
        if spec.startswith("random:"):
            _, seed, prob = spec.split(":")
            if _random is None:
                _random = random.Random(int(seed))
            fire = _random.random() < float(prob)
        else:
            point, _, nth = spec.partition("@")
            fire = point == name and hit == int(nth or 1)
    if fire:
        sys.stderr.write(f"barrierflow: injected crash at {name} (hit {hit}) {context}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
