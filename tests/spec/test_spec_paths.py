"""A spec file's relative paths resolve against its folder (or ``$BARRIERFLOW_HOME``), at load,
whatever directory the command runs in (barrierflow.spec.paths)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.spec import load_any_spec, load_spec
from barrierflow.spec.stages import PipelineSpec
from barrierflow.storage.local import LocalObjectStore

from tests.pipeline_specs import spec_dict
from tests.verification.checkpoint_factory import CheckpointFactory

ROOT = Path(__file__).resolve().parents[2]


def _relative_spec(folder: Path) -> Path:
    """Pipeline ``t`` with every path-like field relative, written into ``folder``."""
    data = spec_dict(folder)
    del data["work_dir"]
    data["checkpoint"]["storage"] = "file://var/t/checkpoints"
    data["sinks"] = [{"name": "out", "type": "parquet", "path": "file://var/t/output"}]
    data["dead_letter_path"] = "file://./dead"
    data["event_times_path"] = "file://../shared/event-times"
    data["batch"] = {"rollups": "s3://bucket/rollups"}
    data["verification"] = {"expectations": "suites/t.json", "output_expectations": "/abs/out.json"}
    data["transformation"]["options"] = {"path": "file://keep/as/written"}
    data["spark"] = {"py_packages": ["../my_pkg", "~/pkgs/other", "/abs/pkg"]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "t.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The command's working directory: neither the spec's folder nor one of its parents."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("BARRIERFLOW_HOME", raising=False)
    return cwd


def test_relative_paths_resolve_against_the_spec_files_folder(tmp_path: Path, elsewhere: Path) -> None:
    folder = tmp_path / "project" / "pipelines"
    spec = load_spec(Path("..") / _relative_spec(folder).relative_to(tmp_path))  # given relative to the cwd
    assert spec.checkpoint.storage == f"file://{folder}/var/t/checkpoints"
    assert spec.sink.path == f"file://{folder}/var/t/output"  # type: ignore[union-attr]
    assert spec.dead_letter_path == f"file://{folder}/dead"
    assert spec.event_times_path == f"file://{tmp_path / 'project' / 'shared' / 'event-times'}"
    assert spec.work_dir == str(folder / "var" / "t")  # the default, under the same folder
    assert spec.verification is not None
    assert spec.verification.expectations == str(folder / "suites" / "t.json")
    assert spec.verification.output_expectations == "/abs/out.json"
    assert spec.batch.rollups == "s3://bucket/rollups"
    assert spec.transformation.options == {"path": "file://keep/as/written"}  # the user's, untouched
    assert spec.spark.py_packages == [str(tmp_path / "project" / "my_pkg"), "~/pkgs/other", "/abs/pkg"]
    assert not any(elsewhere.iterdir())


def test_barrierflow_home_wins_over_the_spec_folder(tmp_path: Path, elsewhere: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("BARRIERFLOW_HOME", str(home))
    spec = load_spec(_relative_spec(tmp_path / "project"))
    assert spec.checkpoint.storage == f"file://{home}/var/t/checkpoints"
    assert spec.work_dir == str(home / "var" / "t")


def test_a_shipped_multi_stage_spec_resolves_in_every_stage(tmp_path: Path, elsewhere: Path) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copy(ROOT / "include" / "pipelines" / "cycle.yaml", folder / "cycle.yaml")
    spec = load_any_spec(folder / "cycle.yaml")
    assert isinstance(spec, PipelineSpec)
    assert spec.work_dir == str(folder / "var" / "cycle-demo" / "work")
    assert spec.checkpoint.storage == f"file://{folder}/var/cycle-demo/checkpoints"
    paths = [sink.path for stage in spec.stages for sink in stage.sinks if sink.type == "parquet"]
    assert paths == [f"file://{folder}/var/cycle-demo/output"]


def test_checkpoints_list_from_another_directory_finds_the_checkpoints(
        tmp_path: Path, elsewhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "project"
    spec_path = _relative_spec(folder)
    CheckpointFactory(tmp_path / "factory", objects=LocalObjectStore(folder / "var" / "t" / "checkpoints")).take(2)
    assert main(["checkpoints", "list", str(spec_path)]) == 0
    listed = capsys.readouterr().out
    cut_rows = [line.split() for line in listed.splitlines()[2:] if line[:1] == " " and line.split()[0].isdigit()]
    assert [(row[0], row[2]) for row in cut_rows] == [("1", "COMPLETED"), ("2", "COMPLETED")], listed

    empty = _relative_spec(tmp_path / "fresh")
    assert main(["checkpoints", "list", str(empty)]) == 0
    assert f"no checkpoints in file://{tmp_path / 'fresh'}/var/t/checkpoints yet" in capsys.readouterr().out
