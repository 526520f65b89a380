"""The shipped :class:`SlowObjectStore` double: its progress gate holds a checkpoint's first
shared-file write until the counter moved ``progress_steps`` times, and fails the write when it
never does."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from barrierflow.errors import StorageError
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import ProgressWait, SlowObjectStore


def test_the_first_shared_write_of_a_checkpoint_waits_for_two_steps_of_progress(tmp_path: Path) -> None:
    counter = [5]
    slow = SlowObjectStore(LocalObjectStore(tmp_path), delay=0.0, progress=lambda: counter[0], progress_steps=2)

    def step_twice() -> None:
        for _ in range(2):
            counter[0] += 1

    threading.Timer(0.1, step_twice).start()
    slow.put_bytes("shared/ab/one", b"1")
    assert counter[0] == 7  # the write returned only after the counter moved twice (0.1 s later)
    slow.put_bytes("shared/cd/two", b"2")  # same checkpoint: not held again
    slow.put_bytes("chk-1/_metadata.json", b'{"files": []}')
    assert slow.progress_waits == [ProgressWait("shared/ab/one", 5, 7)]
    assert [w.key for w in slow.writes] == ["shared/ab/one", "shared/cd/two", "chk-1/_metadata.json"]


def test_an_upload_without_progress_fails_naming_the_key(tmp_path: Path) -> None:
    slow = SlowObjectStore(LocalObjectStore(tmp_path), delay=0.0, progress=lambda: 0, progress_timeout=0.2)
    with pytest.raises(StorageError, match=r"no progress in 0.2 s .*shared/ab/one: the upload blocks"):
        slow.put_bytes("shared/ab/one", b"1")
    assert slow.progress_waits == [] and slow.writes == []
