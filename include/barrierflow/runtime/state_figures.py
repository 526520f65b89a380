"""The state a stage holds, as Spark's progress reports it: per stateful operator, the rows in its
state after the newest batch and the event-time timers it fired over every batch of the run.

For a keyed function with a ``ttl`` (:mod:`barrierflow.keyed_state`) each key holds one expiry
timer, so the timers fired are the keys expired (plus the function's own timers, if it sets any),
and the rows are what the state store holds (Spark's ``numRowsTotal``: every state variable's
rows, timers included). Read from each micro-batch's progress event (``stateOperators``:
``numRowsTotal``, and ``customMetrics.numExpiredTimers`` of a ``transformWithState`` operator),
which Spark computes anyway: nothing is read from the data. :meth:`StateFigures.poll` is called
after a micro-batch committed; it reads the newest event, and every recent one after a gap, so
no batch's timers are counted twice or missed while Spark keeps the batch's event (its last 100).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["OperatorFigures", "StateFigures"]


@dataclass
class OperatorFigures:
    """One stateful operator's figures in this run."""

    #: rows in the operator's state after the newest batch seen
    rows: int = 0
    #: event-time timers fired in this run's batches (a ttl's expiries among them)
    timers_fired: int = 0


class StateFigures:
    """One stage's stateful operators (module docstring), by label: the operator's name, with
    its position in the plan when two have the same name (``name#i``)."""

    def __init__(self) -> None:
        self.operators: dict[str, OperatorFigures] = {}
        self._newest_batch: int | None = None

    def poll(self, query: Any) -> None:
        """Fold in the progress events of batches not seen yet (the query stopping: nothing)."""
        try:
            last = query.lastProgress
            if last is None:
                return
            events = [last]
            if self._newest_batch is None or int(last.batchId) > self._newest_batch + 1:
                events = list(query.recentProgress)
        except Exception as exc:  # the query is stopping: keep what is known
            log.debug("query progress unavailable: %s", exc)
            return
        for event in sorted(events, key=lambda e: int(e.batchId)):
            self.fold(event)

    def fold(self, event: Any) -> None:
        """One batch's progress event (a ``StreamingQueryProgress``); an event of a batch seen
        before is ignored."""
        batch = int(event.batchId)
        if self._newest_batch is not None and batch <= self._newest_batch:
            return
        self._newest_batch = batch
        operators = list(getattr(event, "stateOperators", None) or [])
        names = [str(getattr(op, "operatorName", "") or "state") for op in operators]
        for position, (op, name) in enumerate(zip(operators, names, strict=True)):
            label = name if names.count(name) == 1 else f"{name}#{position}"
            figures = self.operators.setdefault(label, OperatorFigures())
            figures.rows = int(getattr(op, "numRowsTotal", 0) or 0)
            custom = getattr(op, "customMetrics", None) or {}
            figures.timers_fired += int(custom.get("numExpiredTimers", 0) or 0)
