"""Creating a user project (``barrierflow init NAME``).

Contract: :func:`create_project` either writes every file of
:func:`barrierflow.scaffold.templates.project_files` for its source and sink into ``parent/NAME``
(a new or empty folder) and returns the :class:`Project`, or raises :class:`UserInputError`
before writing anything.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from string import Template

from barrierflow.errors import UserInputError
from barrierflow.scaffold.templates import SINKS, SOURCES, project_files

#: How to run a new project's tests, from its folder (printed by ``init``, in its README).
TEST_COMMAND = "python -m pytest"

#: A project name is a pipeline name (docs/pipeline-spec.md: ``name``).
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
#: Package names a project may not take: the project folder has tests/, and a package named
#: after a module the pipeline imports would hide it.
_RESERVED = {"barrierflow", "pyspark", "airflow", "tests", "test", "pipelines"}


@dataclass(frozen=True)
class Project:
    """A created project: its ``name`` (the pipeline's), Python ``package`` and ``folder``, the
    ``files`` written (relative paths), and its pipeline's ``source`` and ``sink`` types."""

    name: str
    package: str
    folder: Path
    files: tuple[str, ...]
    source: str = SOURCES[0]
    sink: str = SINKS[0]

    @property
    def spec_path(self) -> str:
        """The pipeline spec, relative to the project folder."""
        return f"pipelines/{self.name}.yaml"


def package_name(name: str) -> str:
    """The Python package of project ``name``: dashes become underscores.

    Raises:
        UserInputError: ``name`` is not a pipeline name, or its package would be a Python keyword,
            hide a module the pipeline needs (standard library, barrierflow, an installed
            package) or a folder of the project.
    """
    if not _NAME.match(name):
        raise UserInputError(f"invalid project name {name!r}: a pipeline name is 1-63 lowercase letters, digits, "
                             "'-' or '_', starting with a letter (e.g. 'clicks' or 'click-counts')")
    package = name.replace("-", "_")
    if keyword.iskeyword(package):
        raise UserInputError(f"invalid project name {name!r}: its package {package!r} is a Python keyword; "
                             "choose another name")
    if package in _RESERVED or package in sys.stdlib_module_names or _importable(package):
        raise UserInputError(f"invalid project name {name!r}: its package {package!r} would hide the module of that "
                             "name (standard library, barrierflow, an installed package or a folder of the "
                             "project); choose another name, e.g. 'my-" + name + "'")
    return package


def _importable(package: str) -> bool:
    """Whether ``import package`` already finds a module or regular package (a namespace
    package, such as an empty folder of that name in the working directory, does not count)."""
    found = importlib.util.find_spec(package)
    return found is not None and found.origin is not None


def create_project(name: str, parent: Path, *, source: str = SOURCES[0], sink: str = SINKS[0]) -> Project:
    """Write a new project ``name`` into ``parent/name`` whose pipeline reads ``source`` (one of
    :data:`~barrierflow.scaffold.templates.SOURCES`) and writes ``sink`` (one of
    :data:`~barrierflow.scaffold.templates.SINKS`): the pipeline spec, its package with the
    transformation, its expectation suites, a test that runs the pipeline on a bounded input
    against the servers it starts, the Airflow DAG file and a README (see
    :mod:`barrierflow.scaffold.templates`).

    Raises:
        UserInputError: ``name`` is invalid (:func:`package_name`), ``source`` or ``sink`` is not
            offered, or ``parent/name`` exists and is not an empty folder.
    """
    if source not in SOURCES:
        raise UserInputError(f"unknown source {source!r}: init writes a pipeline reading one of {', '.join(SOURCES)}")
    if sink not in SINKS:
        raise UserInputError(f"unknown sink {sink!r}: init writes a pipeline writing to one of {', '.join(SINKS)}")
    package = package_name(name)
    folder = parent / name
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        what = "folder" if folder.is_dir() else "file"
        raise UserInputError(f"{folder} already exists and is not an empty folder (a {what}); choose another name "
                             "or run init where it does not exist")
    values = {"name": name, "package": package, "test_command": TEST_COMMAND}
    written = []
    for relative, template in project_files(source, sink).items():
        path = Template(relative).substitute(values)
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(template.substitute(values), encoding="utf-8")
        written.append(path)
    return Project(name, package, folder, tuple(written), source, sink)
