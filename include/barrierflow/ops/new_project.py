"""Create a user project (``barrierflow init NAME``): see :mod:`barrierflow.scaffold`."""

from __future__ import annotations

from pathlib import Path

from barrierflow.scaffold import TEST_COMMAND, Project, create_project

__all__ = ["TEST_COMMAND", "Project", "init_project"]


def init_project(name: str, parent: Path) -> Project:
    """Write project ``name`` into ``parent/name`` (a new or empty folder).

    Raises:
        UserInputError: the name is invalid, or the folder exists and is not empty.
    """
    return create_project(name, parent)
