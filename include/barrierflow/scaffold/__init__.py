"""``barrierflow init NAME``: a new user project with a pipeline, its code, its test and its DAGs.

:func:`~barrierflow.scaffold.project.create_project` writes the files of
:mod:`barrierflow.scaffold.templates` into ``./NAME``; the CLI prints what to do next.
"""

from barrierflow.scaffold.project import TEST_COMMAND, Project, create_project, package_name

__all__ = ["TEST_COMMAND", "Project", "create_project", "package_name"]
