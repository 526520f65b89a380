"""How far a pipeline got, cheaply enough to be polled (the checkpoints asset's watcher and the
supervision of the Airflow side; the output assets poll
:func:`barrierflow.ops.batch.newest_output_epoch`).

For a multi-stage spec the checkpoints are the global ones: a checkpoint is completed when its
global manifest is stored (every stage's snapshot collected) and no restore abandoned it.
"""

from __future__ import annotations

import os
from datetime import datetime

from barrierflow.ops.pipeline import is_multi_stage, open_pipeline


def newest_completed_checkpoint(spec_path: str | os.PathLike[str]) -> int | None:
    """The id of the newest completed checkpoint (manifest stored, not abandoned), or None; for
    a multi-stage spec, of the newest completed global checkpoint. Lists keys; reads no manifest."""
    if is_multi_stage(spec_path):
        from barrierflow.ops.global_checkpoints import open_staged

        ids = open_staged(spec_path).global_checkpoints()
    else:
        ids = open_pipeline(spec_path).store.checkpoint_ids()
    return ids[-1] if ids else None


def newest_completion_time(spec_path: str | os.PathLike[str]) -> datetime | None:
    """Completion time (timezone-aware) of the newest completed checkpoint, or None; for a
    multi-stage spec, of the newest completed global checkpoint (its global manifest's time:
    when the last stage's snapshot was collected)."""
    if is_multi_stage(spec_path):
        from barrierflow.ops.global_checkpoints import open_staged

        store = open_staged(spec_path).global_store
        ids = store.completed_ids()
        return store.get(ids[-1]).completion_time if ids else None
    completed = open_pipeline(spec_path).store.completed()
    return completed[-1].completion_time if completed else None

