"""``spark.py_packages``: the user's package zipped and shipped to the driver and the executors
(:mod:`barrierflow.spark.user_code`)."""

from __future__ import annotations

import importlib
import io
import sys
import uuid
import zipfile
from pathlib import Path

import pytest
from barrierflow.errors import UserInputError
from barrierflow.spark.user_code import package_dir, package_zip, ship_py_packages, zip_package
from barrierflow.spec.models import SparkSpec
from pydantic import ValidationError


def _package(root: Path, name: str, body: str = "def double(v):\n    return None if v is None else 2 * v\n") -> Path:
    package = root / name
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text(body)
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "data.txt").write_text("package data")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"\0")
    return package


def test_the_zip_holds_the_package_under_its_name_without_compiled_files(tmp_path: Path) -> None:
    package = _package(tmp_path, "my_pkg")
    names = zipfile.ZipFile(io.BytesIO(zip_package(package))).namelist()
    assert names == ["my_pkg/__init__.py", "my_pkg/ops.py", "my_pkg/sub/__init__.py", "my_pkg/sub/data.txt"]


def test_the_same_files_make_the_same_zip_and_changed_code_a_new_one(tmp_path: Path) -> None:
    package = _package(tmp_path, "my_pkg")
    first = package_zip(str(package))
    (package / "ops.py").touch()  # a new mtime, the same content
    assert package_zip(str(package)) == first
    (package / "ops.py").write_text("def double(v):\n    return 3 * v\n")
    changed = package_zip(str(package))
    assert changed != first and changed.name.startswith("my_pkg-") and first.exists()


def test_a_relative_path_is_taken_from_barrierflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path / "project", "my_pkg")
    monkeypatch.setenv("BARRIERFLOW_HOME", str(tmp_path / "project"))
    assert package_dir("my_pkg") == (tmp_path / "project" / "my_pkg").resolve()


@pytest.mark.parametrize(("make", "entry", "message"), [
    (lambda root: None, "missing", "is not a directory"),
    (lambda root: (root / "plain").mkdir(), "plain", "has no __init__.py"),
    (lambda root: (root / "my-pkg").mkdir() or (root / "my-pkg" / "__init__.py").write_text(""), "my-pkg",
     "is not a Python package name"),
])
def test_an_entry_that_is_no_package_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         make: object, entry: str, message: str) -> None:
    make(tmp_path)  # type: ignore[operator]
    monkeypatch.setenv("BARRIERFLOW_HOME", str(tmp_path))
    with pytest.raises(UserInputError, match=message) as raised:
        package_dir(entry)
    assert "spark.py_packages" in str(raised.value) and entry in str(raised.value)


def test_the_spec_refuses_a_uri_or_an_empty_entry() -> None:
    for bad in ("s3://bucket/pkg", " "):
        with pytest.raises(ValidationError, match="py_packages"):
            SparkSpec(py_packages=[bad])


@pytest.mark.spark
def test_a_shipped_package_is_imported_by_the_driver_and_by_the_executors(spark: object, tmp_path: Path) -> None:
    """The package is on no path of this process nor of Spark's Python workers: only the
    shipped zip lets the driver import it and the executors run its function."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    name = f"bf_user_{uuid.uuid4().hex[:8]}"
    package = _package(tmp_path, name)
    with pytest.raises(ImportError):
        importlib.import_module(f"{name}.ops")

    zips = ship_py_packages(spark, [str(package)])  # type: ignore[arg-type]
    assert ship_py_packages(spark, [str(package)]) == zips  # added once; the second call is a no-op
    ops = importlib.import_module(f"{name}.ops")
    assert any(entry.endswith(zips[0].name) for entry in sys.path)
    # A module-level function is pickled by reference: the Python workers import it by name.
    doubled = spark.range(4).select(F.udf(ops.double, LongType())("id").alias("v"))  # type: ignore[attr-defined]
    assert sorted(row.v for row in doubled.collect()) == [0, 2, 4, 6]
