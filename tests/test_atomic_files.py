"""barrierflow.atomic_files: write_atomic's target holds the old content or the new one, never a
part, and a failed write leaves nothing behind; replace_directory puts a finished tree in the
place of a non-empty one, in one step where Linux can swap the two, and keeps (or deletes) the
old one."""

from __future__ import annotations

import sys
from pathlib import Path

import barrierflow.atomic_files as atomic_files
import pytest
from barrierflow.atomic_files import replace_directory, write_atomic
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


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def _contents(root: Path) -> dict[str, str]:
    return {str(f.relative_to(root)): f.read_text(encoding="utf-8") for f in sorted(root.rglob("*")) if f.is_file()}


@pytest.fixture(params=["exchange", "two renames"])
def swap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the one-step swap and with the fallback of two renames."""
    if request.param == "two renames":
        monkeypatch.setattr(atomic_files, "_exchange", lambda first, second: False)
    return str(request.param)


def test_a_directory_replaces_a_full_one_and_the_old_tree_is_kept_once(tmp_path: Path, swap: str) -> None:
    target = _tree(tmp_path / "chk", {"offsets/0": "old 0", "commits/0": "old"})
    kept_at = _tree(tmp_path / "chk.replaced", {"stale": "from an earlier restore"})
    new = _tree(tmp_path / "chk.restoring", {"offsets/0": "new 0", "offsets/1": "new 1"})
    assert replace_directory(new, target, keep_old=kept_at) == kept_at
    assert _contents(target) == {"offsets/0": "new 0", "offsets/1": "new 1"}
    assert _contents(kept_at) == {"offsets/0": "old 0", "commits/0": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chk", "chk.replaced"]  # no temporary tree left


def test_without_keep_old_the_replaced_tree_is_deleted_and_a_missing_target_is_simply_filled(
        tmp_path: Path, swap: str) -> None:
    target = _tree(tmp_path / "chk", {"a": "old"})
    assert replace_directory(_tree(tmp_path / "n1", {"b": "new"}), target) is None
    assert _contents(target) == {"b": "new"} and sorted(p.name for p in tmp_path.iterdir()) == ["chk"]
    fresh = tmp_path / "fresh"
    assert replace_directory(_tree(tmp_path / "n2", {"c": "first"}), fresh, keep_old=tmp_path / "k") is None
    assert _contents(fresh) == {"c": "first"} and not (tmp_path / "k").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the one-step swap is Linux's renameat2")
def test_the_swap_is_one_step_on_this_linux_file_system(tmp_path: Path) -> None:
    """The machine the suite runs on swaps in one step: the target never goes missing."""
    first, second = _tree(tmp_path / "a", {"x": "A"}), _tree(tmp_path / "b", {"y": "B"})
    assert atomic_files._exchange(first, second)
    assert (_contents(first), _contents(second)) == ({"y": "B"}, {"x": "A"})


def test_a_failed_second_rename_puts_the_old_tree_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(atomic_files, "_exchange", lambda first, second: False)
    target = _tree(tmp_path / "chk", {"a": "old"})
    new = _tree(tmp_path / "new", {"b": "new"})
    real_replace, calls = atomic_files.os.replace, []

    def replace(src: object, dst: object) -> None:
        calls.append((src, dst))
        if len(calls) == 2:  # the new tree onto the target
            raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(atomic_files.os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        replace_directory(new, target, keep_old=tmp_path / "kept")
    assert _contents(target) == {"a": "old"} and _contents(new) == {"b": "new"}
