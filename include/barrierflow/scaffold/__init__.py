"""``barrierflow init NAME``: a new user project with a pipeline, its code, its test and its DAGs.

:func:`~barrierflow.scaffold.project.create_project` writes the files of
:mod:`barrierflow.scaffold.templates` for the chosen source and sink into ``./NAME``; the CLI
prints what to do next.
"""

from barrierflow.scaffold.project import TEST_COMMAND, Project, create_project, package_name
from barrierflow.scaffold.templates import SINKS, SOURCES

__all__ = ["SINKS", "SOURCES", "TEST_COMMAND", "Project", "create_project", "package_name"]
