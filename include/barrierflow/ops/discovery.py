"""Finding the pipeline specs of a folder (the Airflow DAG file and the Checkpoints page).

:func:`discover_specs` and :func:`discover_pipelines` read only the spec files (no database,
no connection, no Spark), so they are safe at DAG-parse time and per page request; a spec
that fails to load is returned with its error instead of raising, so one bad file never
hides the other pipelines. The DAG file imports them from here.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.errors import SpecError

if TYPE_CHECKING:
    from barrierflow.spec.stages import PipelineSpec

log = logging.getLogger(__name__)

_DAG_ID_PART = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class DiscoveredPipeline:
    """One spec file found by :func:`discover_pipelines`.

    Exactly one of ``spec`` and ``error`` is set. ``name`` is the spec's ``name`` when it
    loaded, else a DAG-id-safe form of the file name, so the broken file still gets a DAG.
    """

    path: Path
    name: str
    spec: PipelineSpec | None = None
    error: str | None = None


def pipelines_folder(home: str | os.PathLike[str]) -> Path:
    """The folder of the pipeline specs Airflow serves: ``$BARRIERFLOW_PIPELINES_DIR``, default
    ``<home>/pipelines`` (``home``: ``$BARRIERFLOW_HOME``, the user's project). Never the repository's
    example and benchmark specs (``include/pipelines``) unless the variable names them, as
    ``make airflow`` and the compose stack do: an install lists the pipelines its user configured."""
    return Path(os.environ.get("BARRIERFLOW_PIPELINES_DIR") or Path(home) / "pipelines")


def discover_specs(folder: str | os.PathLike[str]) -> list[Path]:
    """The pipeline spec files (``*.yaml``, not hidden) directly in ``folder``, sorted by name.

    A missing folder yields an empty list (logged), not an error.
    """
    directory = Path(folder)
    if not directory.is_dir():
        log.warning("pipeline spec folder %s does not exist; no pipelines discovered", directory)
        return []
    return sorted(
        path for path in directory.glob("*.yaml") if path.is_file() and not path.name.startswith(".")
    )


def _name_from_file(path: Path) -> str:
    return _DAG_ID_PART.sub("_", path.stem) or "unnamed"


def discover_pipelines(folder: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None
                       ) -> list[DiscoveredPipeline]:
    """Load every spec in ``folder``, single- or multi-stage; never raises for a bad spec.
    ``home``: where their relative paths resolve (default: :func:`barrierflow.spec.spec_home`).

    A spec that fails to load, or whose ``name`` another file in the folder already uses,
    comes back with ``error`` set (the :class:`SpecError` message) so the caller can show it;
    of several valid specs with one name, the first file in name order keeps it.
    Names are unique in the result: a broken file whose name collides gets a suffix.
    """
    from barrierflow.spec.loader import load_any_spec

    loaded: list[DiscoveredPipeline] = []
    for path in discover_specs(folder):
        try:
            spec = load_any_spec(path, home=home)
        except SpecError as exc:
            log.error("pipeline spec %s is invalid, its DAG will only report the error: %s", path, exc)
            loaded.append(DiscoveredPipeline(path=path, name=_name_from_file(path), error=str(exc)))
            continue
        loaded.append(DiscoveredPipeline(path=path, name=spec.name, spec=spec))

    result: list[DiscoveredPipeline] = []
    owner: dict[str, Path] = {}
    for entry in [e for e in loaded if e.spec is not None] + [e for e in loaded if e.spec is None]:
        if entry.spec is not None and entry.name in owner:
            message = str(SpecError(str(entry.path), [(
                "name", f"pipeline name {entry.name!r} is already used by {owner[entry.name]}; "
                        "every spec in the folder needs its own name")]))
            log.error("%s", message)
            entry = DiscoveredPipeline(path=entry.path, name=_name_from_file(entry.path), error=message)
        name = entry.name
        suffix = 2
        while name in owner:
            name = f"{entry.name}__{suffix}"
            suffix += 1
        owner[name] = entry.path
        result.append(entry if name == entry.name else DiscoveredPipeline(
            path=entry.path, name=name, spec=entry.spec, error=entry.error))
    return sorted(result, key=lambda e: e.path)
