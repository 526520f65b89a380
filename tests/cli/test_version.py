"""``barrierflow --version`` prints the installed distribution's version."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from barrierflow.cli.main import main

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_version_is_the_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    assert capsys.readouterr().out == f"barrierflow {declared}\n"
    assert importlib.metadata.version("barrierflow") == declared


def test_version_without_an_installed_distribution_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert main(["--version"]) == 2
    assert "pip install -e ." in capsys.readouterr().err
