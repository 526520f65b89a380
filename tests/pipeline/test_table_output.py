"""What the batch side reads of a table sink: the table as of a cut, with ``commit_every`` and
checkpoints without rows (no Spark: the sink's two phases are driven directly)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.pipeline.table_output import cut_checkpoints, cut_output, files_added, newest_commits
from barrierflow.spec.loader import load_spec

from tests.sinks.lake_env import iceberg_pipeline_spec, rows, stage
from tests.sinks.test_iceberg_sink import make_sink


def keys(files: list[str]) -> Counter[int]:
    return Counter(k for f in files for k in pq.read_table(f.removeprefix("file://")).column("key").to_pylist())


def checkpoint(sink: object, checkpoint_id: int, barrier: int, keys_: list[int] | None) -> None:
    """Checkpoint ``checkpoint_id`` with barrier batch ``barrier``: a micro-batch of ``keys_``
    written ahead (None: no new micro-batch, an epoch without rows), pre-committed, completed."""
    if keys_ is not None:
        stage(sink.write_ahead.uri, barrier, rows(keys_))  # type: ignore[attr-defined]
    sink.pre_commit_epoch(checkpoint_id, barrier)  # type: ignore[attr-defined]
    sink.notify_checkpoint_complete(checkpoint_id, barrier)  # type: ignore[attr-defined]


def test_commit_every_and_empty_checkpoints_read_as_the_last_committed_version(tmp_path: Path) -> None:
    """``commit_every: 2``: checkpoints 1 and 2 go in one commit (cut 2, none for 1); checkpoint 3
    has no rows; 4 is held; 5 commits 4 and 5 (cut 5); 6 is held. The newest cut the batch side
    reads is 5 and holds neither the held epoch's rows nor anything twice. Then, with
    ``commit_every: 1``, a checkpoint without rows gets a cut naming the last committed version."""
    sink = make_sink(tmp_path, commit_every=2)
    spec = load_spec(iceberg_pipeline_spec(tmp_path))
    store = CheckpointStore.for_spec(spec)
    checkpoint(sink, 1, 1, [1])
    checkpoint(sink, 2, 2, [2])
    checkpoint(sink, 3, 2, None)
    checkpoint(sink, 4, 4, [4])
    checkpoint(sink, 5, 5, [5])
    checkpoint(sink, 6, 6, [6])

    assert cut_checkpoints(store, spec.sink) == [2, 5]
    newest = cut_output(spec, store)
    assert newest.checkpoint_id == 5 and keys(newest.files) == Counter({1: 1, 2: 1, 4: 1, 5: 1})
    assert keys(cut_output(spec, store, 2).files) == Counter({1: 1, 2: 1})
    ids, before = newest_commits(spec, newest.table_version, 1)  # the newest commit: checkpoints 4 and 5
    assert ids == [5] and before == cut_output(spec, store, 2).table_version
    assert keys(files_added(spec, newest.table_version, before) or []) == Counter({4: 1, 5: 1})

    every = make_sink(tmp_path, attempt=1)  # commit_every 1 from here on; a restore commits held 6
    every.restore(6, 6)
    checkpoint(every, 7, 6, None)  # no rows

    seven, six = cut_output(spec, store, 7), cut_output(spec, store, 6)
    assert seven.version is not None and seven.version.checkpoint_id == 6
    assert seven.table_version == six.table_version and seven.files == six.files
    assert keys(seven.files) == Counter({1: 1, 2: 1, 4: 1, 5: 1, 6: 1})
