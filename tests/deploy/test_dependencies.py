"""The package's declared dependencies (pyproject ``[project] dependencies``, ranges) agree with
the pins it is tested with (requirements.txt, constraints.txt): every declared dependency is
pinned, within its range; every runtime pin of requirements.txt is declared; and every
third-party module the library imports belongs to a declared dependency."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
#: Import name -> distribution, where they differ.
DISTRIBUTIONS = {"airflow": "apache-airflow", "kafka": "kafka-python", "confluent_kafka": "confluent-kafka",
                 "great_expectations": "great-expectations", "yaml": "pyyaml", "jwt": "pyjwt"}


def _declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}


def _pins(*files: str) -> dict[str, str]:
    pins = {}
    for name in files:
        for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" in line and not line.startswith("-"):
                requirement = Requirement(line)
                pins[canonicalize_name(requirement.name)] = str(requirement.specifier).removeprefix("==")
    return pins


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pins = _pins("requirements.txt", "constraints.txt")
    for name, requirement in _declared().items():
        assert name in pins, f"{name} is declared in pyproject.toml but pinned nowhere"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {requirement}"


def test_every_runtime_pin_is_declared() -> None:
    assert sorted(set(_pins("requirements.txt")) - set(_declared())) == []


def test_every_imported_third_party_module_is_declared() -> None:
    imported = set()
    for path in (ROOT / "include" / "barrierflow").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"barrierflow", "__future__"}
    declared = set(_declared())
    missing = sorted(m for m in third_party if canonicalize_name(DISTRIBUTIONS.get(m, m)) not in declared)
    assert missing == []
