"""The user's own code on the driver and every executor: ``spark.py_packages`` of a spec.

A transformation lives in the user's package (``transformation.function: my_pkg.transform:f``).
Spark runs the transformation's Python parts (UDFs, ``mapInPandas``, ``foreachBatch`` helpers)
in Python workers on the executors, which import the function's module by name: on a cluster
the package must reach them, not only the machine that starts the job.

:func:`ship_py_packages` does what ``spark-submit --py-files`` does, from the spec, for every
job that builds a session (``barrierflow run``, the Airflow launch's spark-submit of
``jobs/run_pipeline.py``, the batch jobs, deep verification, the stage processes of
``run --processes``): each entry of ``spark.py_packages`` (the directory of a package, with its
``__init__.py``) is zipped as ``<package>/...`` (without ``__pycache__`` and ``*.pyc``) and
added with ``SparkContext.addPyFile``. Spark serves the zip from the driver to every executor,
puts it first on its Python workers' ``sys.path``, and PySpark puts it on the driver's
``sys.path`` too (so the driver imports the transformation from the same zip, also where the
package is not installed).

The zip is named after its content (``<package>-<sha256 prefix>.zip``, in one temporary folder per
process): the same code added again to a session is a no-op, changed code is a new file (Spark
refuses a second file of the same name from another path). A Python worker that already
imported an older version keeps it: restart the job after changing the code.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.atomic_files import write_atomic
from barrierflow.errors import UserInputError
from barrierflow.spec.paths import project_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["package_dir", "package_zip", "ship_py_packages", "zip_package"]

#: A fixed timestamp for every zip entry, so that the same files always make the same zip.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")

_folder: Path | None = None
#: (application id, zip name) pairs already added: addPyFile of the same file again is skipped.
_shipped: set[tuple[str, str]] = set()


def package_dir(entry: str) -> Path:
    """The package directory an entry of ``spark.py_packages`` names (relative to
    :func:`~barrierflow.spec.paths.project_home`).

    Raises:
        UserInputError: it is not a directory, or has no ``__init__.py``.
    """
    path = Path(entry).expanduser()
    if not path.is_absolute():
        path = project_home() / path
    path = path.resolve()
    if not path.is_dir():
        raise UserInputError(f"spark.py_packages: {entry!r} ({path}) is not a directory; give the directory of a "
                             "Python package (a spec file's relative paths are taken relative to $BARRIERFLOW_HOME, "
                             "else its folder)")
    if not (path / "__init__.py").is_file():
        raise UserInputError(f"spark.py_packages: {path} has no __init__.py; name the package's own directory "
                             "(the one with __init__.py), not the folder around it")
    if not path.name.isidentifier():
        raise UserInputError(f"spark.py_packages: {path.name!r} ({path}) is not a Python package name (letters, "
                             "digits and underscores): Python could not import it")
    return path


def zip_package(path: Path) -> bytes:
    """The zip of package directory ``path`` as ``<name>/...``: every file but ``__pycache__``
    and compiled files, in sorted order with fixed timestamps (the same files, the same bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            for name in sorted(files):
                if name.endswith(_SKIPPED_SUFFIXES):
                    continue
                file = Path(folder) / name
                info = zipfile.ZipInfo(str(Path(path.name) / file.relative_to(path)), date_time=_ZIP_DATE)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, file.read_bytes())
    return buffer.getvalue()


def package_zip(entry: str) -> Path:
    """Zip the package ``entry`` names (see :func:`package_dir`) into this process's folder of
    zips, as ``<package>-<sha256 prefix>.zip``; returns its path."""
    path = package_dir(entry)
    data = zip_package(path)
    target = _zip_folder() / f"{path.name}-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        write_atomic(target, data)
    return target


def ship_py_packages(session: SparkSession, entries: list[str]) -> list[Path]:
    """Zip every package of ``entries`` (``spark.py_packages``) and add it to ``session``'s
    SparkContext (driver ``sys.path`` and every executor); returns the zips. A zip this
    process already added to the same application is not added again.

    Raises:
        UserInputError: an entry is not a package directory (see :func:`package_dir`).
    """
    zips = [package_zip(entry) for entry in entries]
    context = session.sparkContext
    for path in zips:
        key = (str(context.applicationId), path.name)
        if key in _shipped:
            continue
        context.addPyFile(str(path))
        _shipped.add(key)
    return zips


def _zip_folder() -> Path:
    global _folder
    if _folder is None:
        _folder = Path(tempfile.mkdtemp(prefix="barrierflow-py-packages-"))
        atexit.register(shutil.rmtree, _folder, True)
    return _folder
