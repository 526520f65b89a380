"""The suite's class-data-sharing archive is named for the JDK and for the jars it was written
from, their place included: the JVM maps a dynamic archive only on the class path it was written
with, so an archive written from another checkout (or another virtualenv) must not be taken for
this one's (it would be kept and never mapped)."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from tests.support.jvm_archive import archive_path


def _pyspark_at(root: Path, jar_bytes: bytes) -> Path:
    package = root / "pyspark"
    (package / "jars").mkdir(parents=True)
    (package / "jars" / "spark-core.jar").write_bytes(jar_bytes)
    (package / "__init__.py").write_text("", encoding="utf-8")
    return package / "__init__.py"


def test_the_archive_name_changes_with_the_jars_place_and_their_contents(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    names = {}
    for label, place, content in (("a", "one", b"x" * 10), ("a again", "one", b"x" * 10),
                                  ("moved", "two", b"x" * 10), ("grown", "three", b"x" * 11)):
        init = tmp_path / place / "pyspark" / "__init__.py"
        if not init.exists():
            init = _pyspark_at(tmp_path / place, content)
        monkeypatch.setattr(pyspark, "__file__", str(init))
        names[label] = archive_path(tmp_path / "archives").name
    assert names["a"] == names["a again"]
    assert len({names["a"], names["moved"], names["grown"]}) == 3, names
