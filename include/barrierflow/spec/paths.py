"""Where the relative paths of a spec file point: the one place they are made absolute.

A spec file's relative paths resolve against its *home*: ``$BARRIERFLOW_HOME`` when it is set,
else the folder the spec file is in (as docker-compose resolves a compose file's paths), never
the working directory of the command that reads it. So ``barrierflow checkpoints list
SPEC`` finds the checkpoints ``barrierflow run SPEC`` wrote from whichever directory either
runs. :func:`resolve_spec_paths` rewrites every path-like field of the parsed YAML (after
``${VAR}`` expansion, before validation) once, at load:

* storage URIs ``file://RELATIVE`` (``checkpoint.storage``, a sink's ``path`` and
  ``write_ahead_path`` (or its former name ``staging_path``), ``batch.rollups``,
  ``dead_letter_path``, ``event_times_path``, a stage's
  fields of the same names) become ``file:///HOME/RELATIVE``; ``s3://`` URIs stay;
* plain paths (``work_dir``, ``verification.expectations`` / ``output_expectations`` /
  ``rollup_expectations``, a Kafka client's ``ssl_cafile`` / ``ssl_certfile`` /
  ``ssl_keyfile``, every entry of ``spark.py_packages`` but ``~/...``) become
  ``HOME/RELATIVE``;
* an absent ``work_dir`` becomes ``HOME/var/<name>``, where it defaulted to before.

What the user's transformation or Spark gets (``transformation``, ``options``, ``spark.conf``)
is theirs and stays as written. Specs built in memory (no file) keep the older rule:
relative paths resolve where they are used, against :func:`project_home`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: Fields holding a storage URI (only ``file://`` ones are paths here).
URI_FIELDS = frozenset({"storage", "path", "write_ahead_path", "staging_path", "rollups", "dead_letter_path",
                        "event_times_path"})
#: Fields holding a plain file or directory path.
FILE_FIELDS = frozenset({"work_dir", "expectations", "output_expectations", "rollup_expectations",
                         "ssl_cafile", "ssl_certfile", "ssl_keyfile"})
#: The list of package directories the jobs ship (``spark.py_packages``).
PACKAGES_FIELD = "py_packages"
#: Subtrees that belong to the user's code or to Spark, never rewritten.
OPAQUE_FIELDS = frozenset({"transformation", "options", "conf"})

HOME_ENV = "BARRIERFLOW_HOME"


def project_home() -> Path:
    """Where relative paths of a spec built in memory resolve: ``$BARRIERFLOW_HOME`` or the
    working directory (a spec read from a file resolves them at load: :func:`spec_home`)."""
    return Path(os.environ.get(HOME_ENV) or os.getcwd()).resolve()


def spec_home(spec_path: str | os.PathLike[str]) -> Path:
    """Where the relative paths of the spec file at ``spec_path`` resolve:
    ``$BARRIERFLOW_HOME`` when set, else the spec file's folder (absolute)."""
    home = os.environ.get(HOME_ENV)
    return Path(home).resolve() if home else Path(spec_path).resolve().parent


def _absolute(path: str, home: Path) -> str:
    return path if Path(path).is_absolute() else os.path.normpath(home / path)


def _resolved(field: str, value: Any, home: Path) -> Any:
    if not isinstance(value, str) or not value or "${" in value:  # "${": expanded later (chaos copies)
        return value
    if field in URI_FIELDS and value.startswith("file://") and len(value) > len("file://"):
        return "file://" + _absolute(value.removeprefix("file://"), home)
    if field in FILE_FIELDS and ":" not in value.split("/", 1)[0]:  # not env:VAR, airflow:ID or a URI
        return _absolute(value, home)
    return value


def _packages(value: Any, home: Path) -> Any:
    if not isinstance(value, list):
        return value
    return [_absolute(entry, home) if isinstance(entry, str) and entry.strip() and "://" not in entry
            and "${" not in entry and not entry.startswith("~") else entry for entry in value]


def _walk(value: Any, home: Path) -> Any:
    if isinstance(value, dict):
        return {key: value[key] if key in OPAQUE_FIELDS
                else _packages(value[key], home) if key == PACKAGES_FIELD
                else _resolved(str(key), _walk(value[key], home), home)
                for key in value}
    if isinstance(value, list):
        return [_walk(item, home) for item in value]
    return value


def resolve_spec_paths(data: Any, home: Path) -> Any:
    """``data`` (a spec's parsed YAML mapping) with every relative path-like field made
    absolute against ``home`` (see the module docstring) and ``work_dir`` filled in; anything
    that is not a mapping, and values of the wrong type, are returned for validation to
    refuse. ``data`` is not changed."""
    if not isinstance(data, dict):
        return data
    resolved = _walk(data, home)
    if not resolved.get("work_dir") and isinstance(resolved.get("name"), str):
        resolved["work_dir"] = str(home / "var" / resolved["name"])
    return resolved
