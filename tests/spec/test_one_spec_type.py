"""One spec type: the loader returns a :class:`PipelineSpec` for every YAML, a single-stage YAML
as a pipeline of one stage and no channels whose stage runs the YAML's own spec, and no field is
declared on two spec classes.

What could go wrong and is checked: a single-stage YAML loaded as another class (every caller
would have to ask which); its stage's runnable spec moved to other paths (an existing store would
no longer open: ``stages/<stage>`` below its storage, or another work dir); a pipeline-wide
section added to one spec class and not the other (the duplicate the one base class removes).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from barrierflow.pipeline.layout import GLOBAL_CHECKPOINTS, OWN_CHECKPOINTS, cut_layout
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spec.loader import load_any_spec, load_spec
from barrierflow.spec.stages import PipelineSpec

from tests.pipeline_specs import spec_dict, write_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC_PACKAGE = ROOT / "include" / "barrierflow" / "spec"
#: The spec classes: the pipeline, the runnable spec of one stage, the YAML stage entry, and the
#: base that declares the pipeline-wide sections once.
SPEC_CLASSES = ("PipelineSpec", "StageSpec", "StageEntry", "PipelineWide")


def _declared_fields() -> dict[str, set[str]]:
    """Each spec class -> the fields its own body declares (annotated names, not inherited)."""
    declared: dict[str, set[str]] = {}
    for path in SPEC_PACKAGE.glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name in SPEC_CLASSES:
                declared[node.name] = {n.target.id for n in node.body
                                       if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return declared


def test_no_field_is_declared_on_both_the_pipeline_and_the_stage_spec() -> None:
    declared = _declared_fields()
    assert set(declared) == set(SPEC_CLASSES)
    assert declared["PipelineSpec"] & declared["StageSpec"] == set()
    assert declared["PipelineWide"] & (declared["PipelineSpec"] | declared["StageSpec"]) == set()
    assert {"checkpoint", "restart", "metrics", "alerts", "chaos", "spark"} <= declared["PipelineWide"]


@pytest.mark.parametrize("path", sorted([*(ROOT / "include" / "pipelines").glob("*.yaml"),
                                         *(ROOT / "examples").glob("*/pipeline.yaml")]), ids=lambda p: p.parent.name
                         + "/" + p.name)
def test_the_loader_returns_a_pipeline_for_every_yaml_of_the_repository(path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092"))
    spec = load_any_spec(path)
    assert type(spec) is PipelineSpec and spec.stages
    assert cut_layout(spec) is (GLOBAL_CHECKPOINTS if spec.channels else OWN_CHECKPOINTS)


def test_a_single_stage_yaml_is_a_pipeline_of_one_stage_on_its_own_paths(tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec_dict(tmp_path))
    spec = load_any_spec(path)
    [stage] = spec.stages
    assert (spec.name, stage.name, spec.channels) == ("t", "t", [])
    pipeline = open_pipeline(path)
    own = load_spec(path)
    # The stage runs the YAML's own spec: the same store (chk-<n> at the storage's root) and work dir.
    assert pipeline.stages[0].spec == own
    assert pipeline.stages[0].store.uri == own.checkpoint.storage.rstrip("/")
    assert str(pipeline.stages[0].layout.work_dir) == pipeline.work_dir == own.work_dir
