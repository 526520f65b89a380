"""The package layers and the absence of import cycles (docs/architecture.md).

``make test`` runs ``lint-imports`` (contracts in pyproject.toml); these tests show the
contracts bite and check the package graph with grimp, which sees imports made inside
functions as well."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "include" / "barrierflow"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(package_parent: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """Run the project's contracts on the ``barrierflow`` package found in ``package_parent``."""
    args = [str(LINT_IMPORTS), "--no-cache", "--config", str(ROOT / "pyproject.toml")]
    for contract in contracts:
        args += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(args, cwd=package_parent, env=env, capture_output=True, text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "barrierflow"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_the_contracts_hold() -> None:
    done = _lint_imports(ROOT / "include")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "added", "contract"), [
    # a function-local import from a low layer up to the runtime
    ("barriers/planner.py", "\n\ndef _up() -> None:\n    from barrierflow.runtime import job  # noqa\n", "layers"),
    # production code reaching for the test helpers
    ("checkpointing/uploader.py", "\nfrom barrierflow.testing import write_ahead_batch  # noqa\n",
     "no-testing-in-production"),
    # the library reaching for the repository's test servers or benchmarks (neither is shipped)
    ("ops/run.py", "\n\ndef _t() -> None:\n    from tests.support.s3_server import S3Endpoint  # noqa\n",
     "ships-no-rigs"),
    ("cli/main.py", "\n\ndef _b() -> None:\n    from bench.run import main  # noqa\n", "ships-no-rigs"),
    # the 2PC template importing a concrete sink
    ("transactions/ledger.py", "\n\ndef _s() -> None:\n    import barrierflow.sinks.parquet  # noqa\n",
     "protocol-core-without-adapters"),
    # a front door running an operation itself instead of calling ops/
    ("cli/main.py", "\n\ndef _r() -> None:\n    from barrierflow.recovery.restore import restore_pipeline  # noqa\n",
     "front-doors-call-ops"),
    # a Kafka client imported outside kafka_io (a function-local import counts too)
    ("sinks/kafka.py", "\n\ndef _k() -> None:\n    from kafka import KafkaConsumer  # noqa\n", "kafka-has-one-home"),
    ("sources/generator.py", "\nimport confluent_kafka  # noqa\n", "kafka-has-one-home"),
    # an operation importing another, and the runtime calling up into the upgrade's steps
    ("ops/run.py", "\n\ndef _o() -> None:\n    from barrierflow.ops.stop import stop  # noqa\n",
     "one-function-per-operation"),
    ("runtime/session.py", "\n\ndef _u() -> None:\n    from barrierflow.upgrade.steps import report_for  # noqa\n",
     "upgrade-between-ops-and-runtime"),
    # a cycle: storage -> spec -> storage
    ("spec/durations.py", "\n\ndef _c() -> None:\n    import barrierflow.storage.uri  # noqa\n", "acyclic-packages"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, module: str, added: str, contract: str) -> None:
    copy = _copy(tmp_path)
    with (copy / module).open("a", encoding="utf-8") as handle:
        handle.write(added)
    done = _lint_imports(tmp_path, contract)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 broken" in done.stdout, done.stdout
    assert str(tmp_path) not in str(ROOT)  # the copy, not the project, was checked


def _package_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("barrierflow", include_external_packages=False)
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = ".".join(module.split(".")[:2]), ".".join(imported.split(".")[:2])
            if a != b and "barrierflow" not in (a, b):
                edges.setdefault(a, set()).add(b)
    return edges


def test_grimp_sees_imports_made_inside_functions() -> None:
    graph = grimp.build_graph("barrierflow", include_external_packages=False)
    # runtime/running.py imports the restore only inside RunningPipeline._restore_own()
    assert "barrierflow.recovery.restore" in graph.find_modules_directly_imported_by("barrierflow.runtime.running")


def test_no_import_cycle_between_packages() -> None:
    edges = _package_graph()
    visiting: list[str] = []
    done: set[str] = set()

    def visit(package: str) -> None:
        if package in done:
            return
        assert package not in visiting, f"import cycle: {' -> '.join([*visiting[visiting.index(package):], package])}"
        visiting.append(package)
        for imported in sorted(edges.get(package, ())):
            visit(imported)
        visiting.pop()
        done.add(package)

    for package in sorted(edges):
        visit(package)
    assert len(done) >= 15


#: Where a pipeline's shape (one stage or several) may not be asked: the packages above the
#: model ask the opened pipeline (barrierflow.pipeline.model) what differs, never the spec's class.
SHAPE_FREE = ("cli", "airflow", "ui", "chaos", "ops", "upgrade")
SHAPE_QUESTION = re.compile(r"single_stage|multi_stage|is_single|isinstance\([^)]*(PipelineSpec|StageSpec)")


def test_the_layers_above_the_model_never_ask_a_pipelines_shape() -> None:
    files = [p for name in SHAPE_FREE for p in sorted((PACKAGE / name).rglob("*.py"))]
    files += sorted((ROOT / "dags").rglob("*.py"))
    asked = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if SHAPE_QUESTION.search(line)]
    assert asked == [], "ask barrierflow.pipeline.model.OpenedPipeline instead:\n" + "\n".join(asked)
