"""``barrierflow init NAME``: the project it writes, what it refuses, and the project's own test.

The generated test runs in a subprocess, from the project's folder, with this interpreter, as a
user runs it (``cd NAME && python -m pytest``): with the project's own pytest configuration
(its folder on ``sys.path``, its conftest), without this suite's ``sys.path`` (the repository
root, ``tests``) or fixtures, so that a scaffold whose imports only work inside the repository
fails here. It starts a local Spark of its own: one JVM start, on a bounded input of 120 records,
with the JVM options and worker Python of the suite's other short-lived drivers
(:func:`tests.drivers.short_lived_driver_env`: less CPU, the same behaviour).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.scaffold import TEST_COMMAND, package_name
from barrierflow.spec import load_spec

from tests.drivers import short_lived_driver_env

ROOT = Path(__file__).resolve().parents[2]


def _init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, capsys: pytest.CaptureFixture[str]) -> tuple[
        int, str, str]:
    monkeypatch.chdir(tmp_path)
    code = main(["init", name])
    out, err = capsys.readouterr()
    return code, out, err


def test_init_writes_the_project_and_says_how_to_test_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _init(tmp_path, monkeypatch, "click-counts", capsys)
    assert code == 0, err
    project = tmp_path / "click-counts"
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == ["README.md", "airflow/click_counts_dags.py", "click_counts/__init__.py",
                     "click_counts/transform.py", "pipelines/click-counts.yaml", "pyproject.toml",
                     "tests/conftest.py", "tests/test_pipeline.py"]
    assert f"cd click-counts && {TEST_COMMAND}" in out
    readme = (project / "README.md").read_text()
    assert f"    {TEST_COMMAND}\n" in readme and "barrierflow run pipelines/click-counts.yaml" in readme
    monkeypatch.setenv("BARRIERFLOW_HOME", str(project))  # as its README says
    spec = load_spec(project / "pipelines" / "click-counts.yaml")
    assert spec.name == "click-counts"
    assert spec.transformation.function == "click_counts.transform:label_values"
    assert spec.spark.py_packages == [str(project / "click_counts")]
    assert spec.checkpoint.storage == f"file://{project}/var/click-counts/checkpoints"
    assert "export BARRIERFLOW_HOME=$PWD" in readme
    for source in project.rglob("*.py"):
        compile(source.read_text(), str(source), "exec")


def test_init_refuses_a_folder_that_is_not_empty_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert _init(tmp_path, monkeypatch, "empty", capsys)[0] == 0  # an empty folder is filled
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    code, _out, err = _init(tmp_path, monkeypatch, "taken", capsys)
    assert code == 2 and str(tmp_path / "taken") in err and "not an empty folder" in err
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["notes.txt"]  # nothing written
    (tmp_path / "afile").write_text("")
    code, _out, err = _init(tmp_path, monkeypatch, "afile", capsys)
    assert code == 2 and str(tmp_path / "afile") in err


@pytest.mark.parametrize(("name", "why"), [
    ("Clicks", "lowercase"), ("1clicks", "starting with a letter"), ("my.pkg", "lowercase letters"),
    ("../up", "lowercase letters"), ("", "lowercase letters"), ("x" * 64, "1-63"),
    ("class", "keyword"), ("json", "would hide"), ("barrierflow", "would hide"), ("pyspark", "would hide"),
    ("tests", "would hide"),
])
def test_init_refuses_an_invalid_name_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str], name: str, why: str) -> None:
    code, _out, err = _init(tmp_path, monkeypatch, name, capsys)
    assert code == 2 and repr(name) in err and why in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_package_is_the_name_with_underscores() -> None:
    assert package_name("click-counts") == "click_counts"
    assert package_name("a_b-c") == "a_b_c"


@pytest.mark.spark
@pytest.mark.slow(30)
def test_the_generated_test_passes_in_the_new_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _init(tmp_path, monkeypatch, "demo2", capsys)[0] == 0
    project = tmp_path / "demo2"
    spec = yaml.safe_load((project / "pipelines" / "demo2.yaml").read_text())
    assert spec["spark"]["py_packages"] == ["demo2"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "BARRIERFLOW_HOME")}
    kept = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep)
            if entry and Path(entry).resolve() != ROOT]  # the repository root (tests, bench) is not the user's
    env["PYTHONPATH"] = os.pathsep.join(kept)
    env.update(short_lived_driver_env())
    command = [sys.executable, *TEST_COMMAND.split()[1:], "-p", "no:cacheprovider", "-q"]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "2 passed" in done.stdout, done.stdout[-2000:]
