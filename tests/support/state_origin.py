"""State of unknown origin, made from state today's code wrote: its recorded fingerprint (and,
to make Spark's own record unreadable, its operator metadata) taken out of every checkpoint of
a pipeline, as a checkpoint written before barrierflow recorded them would be."""

from __future__ import annotations

from pathlib import Path

from barrierflow.checkpointing.snapshot import STATE_FINGERPRINT
from barrierflow.checkpointing.store import manifest_key
from barrierflow.pipeline.model import open_pipeline

#: Spark's operator metadata file of stateful operator 0 (version 1, what an aggregation writes).
OPERATOR_METADATA = "state/0/_metadata/metadata"


def strip_state_records(spec_path: Path, *, paths: tuple[str, ...] = (STATE_FINGERPRINT,)) -> int:
    """Take ``paths`` (checkpoint-relative) out of every manifest of every stage of the pipeline
    ``spec_path`` and out of its local Spark checkpoints; returns how many manifest entries were
    removed. The files' content in the store is left (unreferenced)."""
    removed = 0
    for stage in open_pipeline(spec_path).stages:
        store = stage.store
        for checkpoint_id in store.checkpoint_ids():
            manifest = store.get(checkpoint_id)
            kept = [f for f in manifest.files if f.path not in paths]
            removed += len(manifest.files) - len(kept)
            stripped = manifest.model_copy(update={"files": kept, "full_bytes": sum(f.size for f in kept)})
            store.objects.put_bytes(manifest_key(checkpoint_id), stripped.model_dump_json(indent=2).encode())
        local = Path(stage.layout.spark_checkpoint)
        for relpath in paths:
            (local / relpath).unlink(missing_ok=True)
            (local / Path(relpath).parent / f".{Path(relpath).name}.crc").unlink(missing_ok=True)
    return removed
