"""``barrierflow.spec`` loads its names on first use: a Spark Python worker that unpickles a
source imports only the models it needs, never the graph, the stages or the loader."""

from __future__ import annotations

import importlib
import subprocess
import sys

import barrierflow.spec as spec_package
import pytest


@pytest.mark.parametrize("name", spec_package.__all__)
def test_every_public_name_resolves_to_the_module_that_provides_it(name: str) -> None:
    assert getattr(spec_package, name) is getattr(importlib.import_module(spec_package._HOMES[name]), name)
    assert name in dir(spec_package)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'PipelineSpecs'"):
        spec_package.PipelineSpecs  # noqa: B018


def test_importing_the_models_leaves_the_graph_stages_and_loader_unimported() -> None:
    code = ("import sys, barrierflow.sources.generator; "
            "print(sorted(m for m in ('barrierflow.spec.graph', 'barrierflow.spec.stages', "
            "'barrierflow.spec.loader') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
