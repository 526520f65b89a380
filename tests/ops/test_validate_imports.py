"""Plain ``barrierflow validate`` (no Spark) imports every stage's transformation: the module,
the callable and a signature that takes ``(DataFrame, context)``; a problem is exit 2 naming
the spec field and the fix. It also warns (exit 0) when a stage keeps state on the HDFS-backed
state store, which can never be rescaled.

The transformations live in a package written into the test's directory and listed in
``spark.py_packages``, as a user's project does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main

USER_MODULE = textwrap.dedent('''
    def good(df, context):
        return df


    def with_default(df, context=None):
        return df


    def one_parameter(df):
        return df


    def three_parameters(df, context, extra):
        return df
''')


@pytest.fixture
def package(tmp_path: Path) -> str:
    """A package ``<name>`` with module ``transform`` under ``tmp_path/code`` (unique per test)."""
    name = f"validate_user_{tmp_path.name.replace('-', '_')}"
    folder = tmp_path / "code" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("", encoding="utf-8")
    (folder / "transform.py").write_text(USER_MODULE, encoding="utf-8")
    return name


def _spec(tmp_path: Path, package: str, function: str, *, output_mode: str = "append",
          state_store: str | None = None, stages: bool = False) -> Path:
    spark: dict[str, Any] = {"py_packages": [f"code/{package}"]}
    if state_store is not None:
        spark["state_store"] = state_store
    transformation = {"function": f"{package}.transform:{function}", "output_mode": output_mode}
    if stages:
        data: dict[str, Any] = {
            "version": 1, "name": "two", "spark": spark,
            "checkpoint": {"storage": "file://chk"},
            "channels": [{"name": "mid"}],
            "stages": [
                {"name": "first", "sources": [{"name": "g", "type": "generator"}],
                 "transformation": {"function": f"{package}.transform:good"},
                 "sinks": [{"type": "channel", "channel": "mid", "key_column": "key"}]},
                {"name": "second", "sources": [{"type": "channel", "channel": "mid", "json_fields": {"key": "long"}}],
                 "transformation": transformation,
                 "sinks": [{"name": "lake", "type": "parquet", "path": "file://lake"}]}]}
    else:
        data = {"version": 1, "name": "one", "spark": spark, "work_dir": "work",
                "sources": [{"name": "g", "type": "generator"}], "transformation": transformation,
                "sinks": [{"name": "lake", "type": "parquet", "path": "file://lake"}],
                "checkpoint": {"storage": "file://chk"}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _refused(spec: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["validate", str(spec)])
    err = capsys.readouterr().err
    assert code == 2, err
    return err


def test_a_missing_module_is_exit_2_naming_the_field_and_the_fix(
        tmp_path: Path, package: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, package, "good")
    spec.write_text(spec.read_text().replace(f"{package}.transform:", f"{package}.no_such_module:"))
    err = _refused(spec, capsys)
    assert f"- transformation.function: cannot import module '{package}.no_such_module'" in err
    assert "put its folder on PYTHONPATH, or list the package's directory in spark.py_packages" in err


def test_a_missing_function_is_exit_2_listing_what_the_module_defines(
        tmp_path: Path, package: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_spec(tmp_path, package, "no_such_function"), capsys)
    assert (f"- transformation.function: module '{package}.transform' has no callable 'no_such_function' (it "
            "defines: good, one_parameter, three_parameters, with_default); define 'def no_such_function(df, "
            "context)' there") in err


@pytest.mark.parametrize("function", ["one_parameter", "three_parameters"])
def test_a_function_that_does_not_take_df_and_context_is_exit_2(
        tmp_path: Path, package: str, function: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_spec(tmp_path, package, function), capsys)
    assert f"- transformation.function: {package}.transform:{function} has the signature {function}(df" in err
    assert f"define it as 'def {function}(df, context)'" in err


def test_a_stage_of_several_is_named_by_its_index(tmp_path: Path, package: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_spec(tmp_path, package, "one_parameter", stages=True), capsys)
    assert f"- stages[1].transformation.function: stage 'second': {package}.transform:one_parameter has the " \
           "signature" in err


def test_a_good_spec_passes_without_starting_spark(tmp_path: Path, package: str) -> None:
    spec = _spec(tmp_path, package, "with_default", state_store="rocksdb")
    check = ("import sys; from barrierflow.cli.main import main; code = main(['validate', sys.argv[1]]); "
             "from pyspark import SparkContext; assert SparkContext._active_spark_context is None; "
             f"assert '{package}.transform' in sys.modules; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", check, str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "valid single-stage pipeline one" in done.stdout and "warning" not in done.stderr


@pytest.mark.parametrize(("output_mode", "stages"), [("update", False), ("complete", True)])
def test_a_stateful_stage_on_the_hdfs_store_is_a_warning_naming_rocksdb(
        tmp_path: Path, package: str, output_mode: str, stages: bool, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(_spec(tmp_path, package, "good", output_mode=output_mode, stages=stages))]) == 0
    captured = capsys.readouterr()
    [warning] = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    stage = "stage 'second'" if stages else "pipeline 'one'"
    assert f"keeps the state of {stage} (output_mode {output_mode}" in warning
    assert "can never be rescaled" in warning and "cannot be changed once state exists" in warning
    assert "Set 'spark.state_store: rocksdb'" in warning
    assert "valid" in captured.out


def test_an_event_time_stage_warns_and_rocksdb_or_a_stateless_stage_does_not(
        tmp_path: Path, package: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, package, "good")
    assert main(["validate", str(spec)]) == 0 and "warning" not in capsys.readouterr().err  # stateless
    data = yaml.safe_load(spec.read_text())
    data["event_time"] = {"column": "ts", "watermark_delay": "10s"}
    spec.write_text(yaml.safe_dump(data))
    assert main(["validate", "--json", str(spec)]) == 0
    captured = capsys.readouterr()
    assert "(event_time: a watermark is for windows" in captured.err
    assert "can never be rescaled" in yaml.safe_load(captured.out)["warnings"][0]
    data["spark"]["state_store"] = "rocksdb"
    spec.write_text(yaml.safe_dump(data))
    assert main(["validate", str(spec)]) == 0 and "warning" not in capsys.readouterr().err
