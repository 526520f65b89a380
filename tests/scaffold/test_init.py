"""``barrierflow init NAME [--source ...] [--sink ...]``: the project it writes, what it refuses,
and the project's own test, for every source and sink.

The generated test of a Kafka -> PostgreSQL project runs in a subprocess, from the project's
folder, with this interpreter, as a user runs it (``cd NAME && python -m pytest``): with the
project's own pytest configuration and conftest (which start the embedded Kafka broker and a
throwaway PostgreSQL), without this suite's ``sys.path`` (the repository root, ``tests``) or
fixtures, so that a scaffold whose imports only work inside the repository fails here. It starts
a Spark of its own, with the JVM options and worker Python of the suite's other short-lived
drivers (:func:`tests.drivers.short_lived_driver_env`: less CPU, the same behaviour).

The other five combinations run their generated test function in this process, on the shared
SparkSession, Kafka broker and PostgreSQL (each project has its own topics, table and pipeline
name), so that each costs one bounded run and no JVM start.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.errors import UserInputError
from barrierflow.ops.new_project import init_project
from barrierflow.scaffold import SINKS, SOURCES, TEST_COMMAND, package_name
from barrierflow.spec import load_spec

from tests.drivers import short_lived_driver_env
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.postgres_server import PostgresEndpoint

ROOT = Path(__file__).resolve().parents[2]
TEST_FUNCTION = "test_every_closed_window_is_committed_once_with_its_sum"


def _init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, capsys: pytest.CaptureFixture[str],
          *options: str) -> tuple[int, str, str]:
    monkeypatch.chdir(tmp_path)
    code = main(["init", name, *options])
    out, err = capsys.readouterr()
    return code, out, err


def test_init_writes_the_project_and_says_how_to_test_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _init(tmp_path, monkeypatch, "click-counts", capsys)
    assert code == 0, err
    project = tmp_path / "click-counts"
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == ["README.md", "airflow/click_counts_dags.py", "click_counts/__init__.py",
                     "click_counts/transform.py", "expectations/click-counts-output.json",
                     "expectations/click-counts-state.json", "pipelines/click-counts.yaml", "pyproject.toml",
                     "tests/conftest.py", "tests/test_pipeline.py"]
    assert f"cd click-counts && {TEST_COMMAND}" in out
    readme = (project / "README.md").read_text()
    assert f"    {TEST_COMMAND}\n" in readme and "barrierflow run pipelines/click-counts.yaml" in readme
    monkeypatch.setenv("BARRIERFLOW_HOME", str(project))  # as its README says
    spec = load_spec(project / "pipelines" / "click-counts.yaml")
    assert spec.name == "click-counts"
    assert (spec.source.type, spec.sink.type) == ("generator", "parquet")  # the defaults
    assert spec.transformation.function == "click_counts.transform:window_sums"
    assert spec.spark.py_packages == [str(project / "click_counts")]
    assert spec.spark.state_store == "rocksdb"
    assert spec.checkpoint.storage == f"file://{project}/var/click-counts/checkpoints"
    assert spec.verification is not None
    assert spec.verification.expectations == str(project / "expectations" / "click-counts-state.json")
    assert spec.verification.output_expectations == str(project / "expectations" / "click-counts-output.json")
    assert "export BARRIERFLOW_HOME=$PWD" in readme
    for source in project.rglob("*.py"):
        compile(source.read_text(), str(source), "exec")


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("sink", SINKS)
def test_every_combination_writes_a_spec_with_rocksdb_state_and_its_suites(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], source: str,
        sink: str) -> None:
    code, _out, err = _init(tmp_path, monkeypatch, "clicks", capsys, "--source", source, "--sink", sink)
    assert code == 0, err
    project = tmp_path / "clicks"
    monkeypatch.setenv("BARRIERFLOW_HOME", str(project))
    spec = load_spec(project / "pipelines" / "clicks.yaml")
    assert (spec.source.type, spec.sink.type) == (source, sink)
    assert spec.spark.state_store == "rocksdb"
    assert spec.event_time is not None and spec.transformation.output_mode == "append"
    assert spec.verification is not None and Path(spec.verification.expectations).is_file()
    assert (project / "expectations" / "clicks-output.json").is_file()
    assert (project / "sql" / "tables.sql").is_file() == (sink == "postgres")
    if sink == "postgres":
        assert spec.sink.table in (project / "sql" / "tables.sql").read_text()  # type: ignore[union-attr]
    conftest = (project / "tests" / "conftest.py").read_text()
    assert ("embedded_kafka" in conftest) == ("kafka" in (source, sink))
    assert ("throwaway_postgres" in conftest) == (sink == "postgres")
    readme = (project / "README.md").read_text()
    assert ("KAFKA_BOOTSTRAP" in readme) == ("kafka" in (source, sink))
    for code_file in project.rglob("*.py"):
        compile(code_file.read_text(), str(code_file), "exec")


def test_init_refuses_a_source_or_sink_it_does_not_offer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "clicks", "--sink", "mysql"]) == 2
    assert "invalid choice: 'mysql'" in capsys.readouterr().err
    with pytest.raises(UserInputError, match=r"unknown source 'files'.*generator, kafka"):
        init_project("clicks", tmp_path, source="files")
    assert list(tmp_path.iterdir()) == []


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


def _generated_test_module(project: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """The project's tests/test_pipeline.py, imported with the project folder on sys.path (as its
    pytest configuration puts it)."""
    monkeypatch.syspath_prepend(str(project))
    location = project / "tests" / "test_pipeline.py"
    module_spec = importlib.util.spec_from_file_location(f"generated_{project.name.replace('-', '_')}", location)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.parametrize(("source", "sink"), [
    pytest.param("generator", "parquet", marks=pytest.mark.slow(60)),  # with a deep verification
    pytest.param("generator", "postgres", marks=pytest.mark.slow(15)),
    pytest.param("generator", "kafka", marks=pytest.mark.slow(15)),
    pytest.param("kafka", "parquet", marks=pytest.mark.slow(15)),
    pytest.param("kafka", "kafka", marks=pytest.mark.slow(15)),
    pytest.param("generator", "iceberg", marks=pytest.mark.slow(15)),
    pytest.param("generator", "delta", marks=pytest.mark.slow(15)),
])
def test_the_generated_test_passes_in_this_process(spark: object, kafka_endpoint: KafkaEndpoint,
                                                   postgres_endpoint: PostgresEndpoint, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, source: str, sink: str) -> None:
    name = f"p{uuid.uuid4().hex[:10]}"  # its topics, table and pipeline name are the project's alone
    project = init_project(name, tmp_path, source=source, sink=sink).folder
    module = _generated_test_module(project, monkeypatch)
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    given = {"tmp_path": run_folder, "monkeypatch": monkeypatch, "kafka_bootstrap": kafka_endpoint.bootstrap_servers,
             "postgres_dsn": postgres_endpoint.dsn}
    test = getattr(module, TEST_FUNCTION)
    test(**{parameter: given[parameter] for parameter in inspect.signature(test).parameters})
    if (source, sink) == ("generator", "parquet"):
        # The project's state suite holds on the state the run left (its open windows).
        from barrierflow.ops.verify import verify

        outcome = verify(run_folder / f"{name}.yaml", latest=1, deep=True)
        checks = [c for report in outcome.stage_reports for c in report.checks]
        suite = [c for c in checks if c.name.startswith("expectation")]
        assert outcome.failed == [], outcome.failures()
        assert len(suite) == 6 and all(c.status.value == "passed" for c in suite), suite


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.slow(150)
def test_the_kafka_to_postgres_project_passes_its_own_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _init(tmp_path, monkeypatch, "clicks", capsys, "--source", "kafka", "--sink", "postgres")[0] == 0
    project = tmp_path / "clicks"
    spec = yaml.safe_load((project / "pipelines" / "clicks.yaml").read_text())
    assert spec["spark"]["py_packages"] == ["clicks"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "BARRIERFLOW_HOME", "KAFKA_BOOTSTRAP",
                        "BARRIERFLOW_POSTGRES_DSN")}
    kept = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep)
            if entry and Path(entry).resolve() != ROOT]  # the repository root (tests, bench) is not the user's
    env["PYTHONPATH"] = os.pathsep.join(kept)
    env.update(short_lived_driver_env())
    command = [sys.executable, *TEST_COMMAND.split()[1:], "-p", "no:cacheprovider", "-q"]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "2 passed" in done.stdout, done.stdout[-2000:]
