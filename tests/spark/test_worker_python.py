"""The launcher of a local driver's Python workers (barrierflow/spark/worker_python.sh) and when
:func:`barrierflow.spark.session.build_session` uses it (:func:`python_worker_env`).

The launcher runs the real interpreter as Spark would start a worker, with a ``PYTHONPATH`` that
holds a fake Spark home's zips; the decision is called directly (no new driver). A Python worker
of the suite's shared session (started through the same launcher by tests/conftest.py) shows
that real workers start through it without the zip on their path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from barrierflow.processes import temporary_environment
from barrierflow.spark.session import WORKER_PYTHON, WORKER_PYTHON_ENV, python_worker_env

#: Prints the child's sys.path and its arguments as JSON.
SHOW = "import json, sys; print(json.dumps({'path': sys.path, 'argv': sys.argv[1:]}))"


def spark_home(root: Path, *, pip: bool) -> Path:
    """A Spark home with python/lib/pyspark.zip and py4j's zip; pip's (``__init__.py``) or a distribution's."""
    home = root / ("pyspark" if pip else "spark-dist")
    (home / "python" / "lib").mkdir(parents=True)
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        with zipfile.ZipFile(home / "python" / "lib" / name, "w") as archive:
            archive.writestr("placeholder.py", "")
    if pip:
        (home / "__init__.py").write_text("")
    return home


def launch(home: Path, python_path: list[str], *args: str) -> dict[str, list[str]]:
    """Run the launcher as Spark runs a worker's Python and return what the child saw."""
    env = {**os.environ, "SPARK_HOME": str(home), "PYTHONPATH": os.pathsep.join(python_path),
           WORKER_PYTHON_ENV: sys.executable}
    done = subprocess.run([str(WORKER_PYTHON), "-c", SHOW, *args], env=env, capture_output=True, text=True,
                          check=True, timeout=60)
    return json.loads(done.stdout)


def test_the_launcher_drops_the_zips_of_pips_spark_home_and_keeps_the_rest(tmp_path: Path) -> None:
    home = spark_home(tmp_path, pip=True)
    zips = [str(home / "python" / "lib" / "pyspark.zip"), str(home / "python" / "lib" / "py4j-0.10.9.9-src.zip")]
    user = tmp_path / "user code"
    user.mkdir()
    args = ["a b", "*", "-m", "pyspark.daemon", ""]  # passed through untouched: no splitting, no globbing
    seen = launch(home, [*zips, str(user), str(tmp_path)], *args)
    assert not set(zips) & set(seen["path"]), seen["path"]
    assert str(user) in seen["path"] and str(tmp_path) in seen["path"]
    assert seen["path"].index(str(user)) < seen["path"].index(str(tmp_path)), "the order is kept"
    assert seen["argv"] == args


def test_the_launcher_leaves_a_distributions_path_as_it_is(tmp_path: Path) -> None:
    home = spark_home(tmp_path, pip=False)
    zips = [str(home / "python" / "lib" / "pyspark.zip"), str(home / "python" / "lib" / "py4j-0.10.9.9-src.zip")]
    seen = launch(home, [*zips, str(tmp_path)])
    assert seen["path"][1:4] == [*zips, str(tmp_path)], seen["path"]  # after the script's entry ('' for -c)


def test_the_launcher_names_the_missing_interpreter(tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items() if name != WORKER_PYTHON_ENV}
    done = subprocess.run([str(WORKER_PYTHON), "-c", "pass"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert WORKER_PYTHON_ENV in done.stderr


def test_the_launcher_ships_executable() -> None:
    """Executable in the source tree (git keeps the mode; an editable install runs this file)
    and package data of the wheel (which keeps the mode, and pip with it)."""
    assert os.access(WORKER_PYTHON, os.X_OK), f"{WORKER_PYTHON} lost its executable bit"
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "spark/worker_python.sh" in project["tool"]["setuptools"]["package-data"]["barrierflow"]


LAUNCHER = {"PYSPARK_PYTHON": str(WORKER_PYTHON), WORKER_PYTHON_ENV: sys.executable}


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,3]"])
def test_a_local_driver_with_pips_pyspark_runs_its_workers_through_the_launcher(tmp_path: Path, master: str) -> None:
    home = spark_home(tmp_path, pip=True)
    assert python_worker_env(master, {}, {}, pyspark_home=home) == LAUNCHER
    assert python_worker_env(master, {"SPARK_HOME": str(home)}, {}) == LAUNCHER
    assert python_worker_env(master, {}, {}) == LAUNCHER, "the installed pyspark is pip's"


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://host:6443", "mesos://host:5050"])
def test_a_cluster_master_keeps_its_workers_python(tmp_path: Path, master: str) -> None:
    assert python_worker_env(master, {}, {}, pyspark_home=spark_home(tmp_path, pip=True)) == {}


def test_the_users_choice_and_other_spark_homes_win(tmp_path: Path) -> None:
    pip, dist = spark_home(tmp_path, pip=True), spark_home(tmp_path, pip=False)
    assert python_worker_env("local[2]", {"PYSPARK_PYTHON": "/opt/venv/bin/python"}, {}, pyspark_home=pip) == {}
    assert python_worker_env("local[2]", {}, {"spark.pyspark.python": "/opt/venv/bin/python"}, pyspark_home=pip) == {}
    assert python_worker_env("local[2]", {"SPARK_HOME": str(dist)}, {}, pyspark_home=pip) == {}
    assert python_worker_env("local[2]", {}, {}, pyspark_home=dist) == {}
    # spark-submit started this driver: its master and its workers' Python are spark-submit's.
    assert python_worker_env("local[2]", {"PYSPARK_GATEWAY_PORT": "4242"}, {}, pyspark_home=pip) == {}
    assert python_worker_env("local[2]", {"PYSPARK_PYTHON": ""}, {}, pyspark_home=pip) == LAUNCHER, "empty = unset"


def test_the_launcher_setting_is_undone_after_the_session_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.delenv(WORKER_PYTHON_ENV, raising=False)
    with temporary_environment(LAUNCHER):
        assert {name: os.environ.get(name) for name in LAUNCHER} == LAUNCHER
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert WORKER_PYTHON_ENV not in os.environ


def test_a_local_sessions_workers_import_pyspark_from_site_packages(spark: object) -> None:
    import pyspark

    def worker_path(_: object) -> list[object]:
        import sys as worker_sys

        import pyspark as worker_pyspark

        return [[*worker_sys.path], worker_pyspark.__file__]

    path, module = spark.sparkContext.parallelize([0], 1).map(worker_path).collect()[0]  # type: ignore[attr-defined]
    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    assert not [entry for entry in path if entry.endswith(".zip") and entry.startswith(home)], path
    assert module == pyspark.__file__
