"""Create a user project (``barrierflow init NAME``): see :mod:`barrierflow.scaffold`."""

from __future__ import annotations

from pathlib import Path

from barrierflow.scaffold import SINKS, SOURCES, TEST_COMMAND, Project, create_project

__all__ = ["SINKS", "SOURCES", "TEST_COMMAND", "Project", "init_project"]


def init_project(name: str, parent: Path, *, source: str = SOURCES[0], sink: str = SINKS[0]) -> Project:
    """Write project ``name`` into ``parent/name`` (a new or empty folder), its pipeline reading
    ``source`` and writing ``sink``.

    Raises:
        UserInputError: the name, the source or the sink is invalid, or the folder exists and is
            not empty.
    """
    return create_project(name, parent, source=source, sink=sink)
