"""Which sinks one stage may write together.

A stage is one Spark query. Several sinks of one stage are written from the one micro-batch
writer of that query (each micro-batch written ahead once per sink) and committed by the
driver per checkpoint, every sink under the same checkpoint id. That is sound for the sinks
whose epochs are files written ahead and made visible by the driver's commit alone: ``parquet``,
``iceberg`` and ``delta``. The others keep one sink per stage (a channel's records are produced
by its own writer as the batch runs; a PostgreSQL or Kafka sink holds an external transaction per
epoch, and combining those with other sinks in one stage is not built), and
:func:`several_sinks_problem` says so, naming the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The sink types a stage may write several of (and mix).
COMBINABLE = ("parquet", "iceberg", "delta")


def _name(sink: Any) -> str:
    """How messages name a sink (a channel sink: its ``name``, else its channel)."""
    return str(getattr(sink, "sink_name", None) or getattr(sink, "name", None) or sink.type)


def _target(sink: Any) -> tuple[str, ...] | None:
    """What a combinable sink writes, for telling two sinks of one table apart."""
    if sink.type == "iceberg":
        catalog = sink.catalog
        return ("iceberg", catalog.type, catalog.uri or catalog.uri_env, catalog.name, sink.table)
    if sink.type in ("delta", "parquet"):
        return (sink.type, sink.path.rstrip("/"))
    return None


def several_sinks_problem(where: str, sinks: Sequence[Any]) -> str | None:
    """Why the ``sinks`` of one stage (``where``: ``stage 'a'``, ``this pipeline``) cannot be
    written together, or None when they can (one sink always can)."""
    if len(sinks) <= 1:
        return None
    listed = ", ".join(f"{_name(s)!r} ({s.type})" for s in sinks)
    others = sorted({s.type for s in sinks if s.type not in COMBINABLE})
    if others:
        kinds = " and ".join(others)
        return (f"{where} writes several sinks ({listed}); a stage writes several sinks only when each is one of "
                f"{', '.join(COMBINABLE)} (their epochs are files the checkpoint's commit publishes; writing a "
                f"{kinds} sink beside others in one stage is not supported): give each {kinds} sink a stage of its "
                "own (in a pipeline of several stages, a stage that reads the same input or a channel), or keep one "
                "sink in this stage")
    names = [s.name for s in sinks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        return (f"{where} has several sinks named {', '.join(map(repr, twice))} ({listed}); each sink of a stage "
                "needs a name of its own (the name keys its transactions, its write-ahead area and its cut entry): "
                "give each sink a distinct 'name'")
    targets = [_target(s) for s in sinks]
    same = sorted({n for n, t in zip(names, targets, strict=True) if targets.count(t) > 1})
    if same:
        return (f"{where}: sinks {', '.join(map(repr, same))} write the same table or folder; two sinks of one "
                "stage would commit every row twice: give each sink its own table (or path)")
    return None
