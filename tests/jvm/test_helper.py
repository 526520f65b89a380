"""barrierflow's JVM helper: compiled from its checked-in source once per source and Spark version."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.jvm.helper import helper_jar


def test_the_helper_is_compiled_once_into_the_cache(tmp_path: Path) -> None:
    jar = helper_jar(tmp_path)
    assert jar.parent == tmp_path / "helpers" and jar.name.startswith("barrierflow-helpers-")
    with zipfile.ZipFile(jar) as archive:
        assert "barrierflow/jvm/BarrierflowValueColumns.class" in archive.namelist()
    built = jar.stat().st_mtime_ns
    assert helper_jar(tmp_path) == jar and jar.stat().st_mtime_ns == built  # not compiled again
    assert not [p for p in jar.parent.iterdir() if p.name.startswith(".")]  # no partial jar left


def test_without_javac_the_error_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(JvmArtifactError, match=r"javac is not on PATH; install a Java 17 JDK .* 'python -m "
                                               r"barrierflow.jvm helper'"):
        helper_jar(tmp_path)
