"""barrierflow.atomic_files.write_atomic: the target holds the old content or the new one, never
a part, and a failed write leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.atomic_files import write_atomic
from barrierflow.storage.local import LocalObjectStore


def test_text_bytes_and_a_writer_replace_the_target_and_leave_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "doc.json"
    assert write_atomic(target, '{"a": 1}') == target  # the parent is created
    assert target.read_text(encoding="utf-8") == '{"a": 1}'
    write_atomic(target, b"\x00\x01", durable=True)
    assert target.read_bytes() == b"\x00\x01"
    write_atomic(target, lambda tmp: tmp.write_text("from a writer", encoding="utf-8"))
    assert target.read_text(encoding="utf-8") == "from a writer"
    assert sorted(p.name for p in target.parent.iterdir()) == ["doc.json"]


def test_a_failing_writer_leaves_the_old_content_and_no_temporary_file_or_tree(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    target.write_text("old", encoding="utf-8")

    def half(tmp: Path) -> None:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("the download broke")

    with pytest.raises(RuntimeError, match="the download broke"):
        write_atomic(target, half)
    assert target.read_text(encoding="utf-8") == "old"

    def tree(tmp: Path) -> None:
        (tmp / "sub").mkdir(parents=True)
        (tmp / "sub" / "file").write_text("x", encoding="utf-8")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(tmp_path / "restored", tree)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]


def test_a_directory_is_put_in_place_whole(tmp_path: Path) -> None:
    def fill(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "offsets").write_text("0", encoding="utf-8")

    write_atomic(tmp_path / "spark-checkpoint", fill)
    assert (tmp_path / "spark-checkpoint" / "offsets").read_text(encoding="utf-8") == "0"


def test_the_temporary_name_is_one_the_local_store_never_lists(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    seen: list[list[str]] = []

    def write(tmp: Path) -> None:
        tmp.write_bytes(b"new")
        seen.append([i.key for i in store.list("")])
        assert not tmp.name.endswith(".json")  # no glob for the target's suffix matches it

    write_atomic(tmp_path / "chk-1" / "_metadata.json", write)
    assert seen == [[]]
    assert [i.key for i in store.list("")] == ["chk-1/_metadata.json"]
