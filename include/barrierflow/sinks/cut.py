"""Cut records: one checkpoint = one consistent cut across the tables a pipeline writes.

After every table sink of a stage committed checkpoint n, the cut record
``cuts/chk-<n:012d>.json`` is written in the stage's checkpoint store, last (each sink of a stage
with several adds its table to it after its own commit: the record is the cut once it lists every
table sink of the stage, which readers check, :func:`tables_as_of`)::

    {"checkpoint_id": n, "tables": {"<sink>": {"format": "iceberg", "table": "lake.totals",
                                                "version": <snapshot id>, "checkpoint_id": m}, ...}}

``version`` is the Iceberg snapshot id or the Delta version holding exactly the sink's output up
to checkpoint n (written by its commit of checkpoint m, the largest <= n that had rows); null
when the sink committed nothing yet. :func:`tables_as_of` returns every table of a pipeline as of
one cut, so a reader never combines table A at checkpoint n with table B at n - 1; a pipeline
of several stages has one cut record per stage and checkpoint (its global checkpoint id), and the
cut is the union of its stages' records.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from barrierflow.errors import UserInputError
from barrierflow.storage import ObjectNotFoundError, ObjectStore

PREFIX = "cuts/"
#: Serializes :meth:`CutLog.record`'s read-then-write in this process: the sinks of a stage
#: commit side by side (each with a CutLog of its own on the stage's store) and add their
#: tables to one record. One process writes a stage's records (its store is the stage's own).
_RECORD_LOCK = threading.Lock()


def cut_key(checkpoint_id: int) -> str:
    return f"{PREFIX}chk-{checkpoint_id:012d}.json"


def cut_record_id(key: str) -> int | None:
    """The checkpoint id of cut record ``key`` (a key under :data:`PREFIX`), or None when the
    key is not one."""
    name = key.rsplit("/", 1)[-1]
    if key.startswith(PREFIX) and name.startswith("chk-") and name.endswith(".json") and name[4:-5].isdigit():
        return int(name[4:-5])
    return None


@dataclass(frozen=True)
class TableVersion:
    """One table as of a cut: its format (``iceberg``/``delta``), name (Iceberg identifier or
    Delta path), catalog (Iceberg: the catalog's properties without secrets; Delta: empty),
    version (Iceberg snapshot id, Delta version; None: nothing committed yet) and the checkpoint
    id whose commit wrote that version."""

    format: str
    table: str
    version: int | None
    checkpoint_id: int | None
    catalog: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class CutLog:
    """The cut records of one checkpoint store (``objects``)."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects

    def record(self, checkpoint_id: int, tables: dict[str, TableVersion | None]) -> None:
        """Write the cut record of ``checkpoint_id``, or add ``tables`` to it (a sink's entry is
        replaced). The sinks of a stage commit side by side: the read-then-write holds a lock of
        this process (:data:`_RECORD_LOCK`), so no sink's entry is lost to another's write."""
        with _RECORD_LOCK:
            merged = {**(self.get(checkpoint_id) or {}), **tables}
            body = {"checkpoint_id": checkpoint_id,
                    "tables": {name: (v.as_dict() if v is not None else None) for name, v in sorted(merged.items())}}
            self.objects.put_bytes(cut_key(checkpoint_id), json.dumps(body, sort_keys=True).encode())

    def get(self, checkpoint_id: int) -> dict[str, TableVersion | None] | None:
        """The tables of the cut of ``checkpoint_id``, or None when no cut record exists."""
        try:
            body = json.loads(self.objects.get_bytes(cut_key(checkpoint_id)))
        except ObjectNotFoundError:
            return None
        return {name: (TableVersion(**v) if v is not None else None) for name, v in body["tables"].items()}

    def checkpoints(self, complete_with: Collection[str] | None = None) -> list[int]:
        """The checkpoint ids that have a cut record, ascending; with ``complete_with`` (sink
        names), only those whose record lists every one of them."""
        ids = sorted(cid for info in self.objects.list(PREFIX) if (cid := cut_record_id(info.key)) is not None)
        if not complete_with:
            return ids
        wanted = set(complete_with)
        return [cid for cid in ids if wanted <= set(self.get(cid) or {})]


def tables_as_of(stores: dict[str, ObjectStore], checkpoint_id: int | None = None,
                 expected: Mapping[str, Collection[str]] | None = None) -> dict[str, TableVersion | None]:
    """Every table of a pipeline as of one cut: ``stores`` maps each stage (a single-stage
    pipeline: its name) to its checkpoint store; the result maps ``<stage>/<sink>`` to the
    table version. ``expected`` maps a stage to its table sinks' names: a stage's record of a
    checkpoint that does not list them all yet (its sinks are still committing) is no cut.
    ``checkpoint_id`` None: the newest checkpoint every stage has a complete cut record of.

    Raises:
        UserInputError: no such cut (naming the checkpoints that have one).
    """
    expected = expected or {}
    logs = {stage: CutLog(objects) for stage, objects in stores.items()}
    available = [set(log.checkpoints(expected.get(stage))) for stage, log in logs.items()]
    common = sorted(set.intersection(*available)) if available else []
    if checkpoint_id is None:
        if not common:
            raise UserInputError("no cut record yet: no checkpoint of this pipeline has committed its tables")
        checkpoint_id = common[-1]
    tables: dict[str, TableVersion | None] = {}
    for stage, log in logs.items():
        cut = log.get(checkpoint_id)
        missing = sorted(set(expected.get(stage, ())) - set(cut or {}))
        if cut is None or missing:
            what = "no cut record" if cut is None else f"a cut record without tables {', '.join(missing)}"
            raise UserInputError(
                f"checkpoint {checkpoint_id} has {what} for stage {stage!r} (its tables were not all committed "
                f"at that checkpoint); checkpoints with a cut: {', '.join(map(str, common[-10:])) or 'none'}")
        tables.update({f"{stage}/{name}": version for name, version in cut.items()})
    return tables
