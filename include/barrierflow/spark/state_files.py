"""The files of Spark's HDFS-backed state store: ``<v>.delta`` and ``<v>.snapshot`` chains.

In ``state/<operator>/<partition>/`` Spark writes ``<v>.delta`` (the changes of batch v-1)
and, from time to time, ``<v>.snapshot`` (the whole state at version v). Loading version
``t`` needs a *base* ``b`` (``b.snapshot``, or the empty state when ``b == 0``) and every
delta ``b+1..t``: a *chain*. Other files in such a directory (``_metadata``, schema files)
are not versioned.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

VERSIONED = re.compile(r"^(\d+)\.(delta|snapshot)$")


def versioned(name: str) -> tuple[int, str] | None:
    """``(version, "delta" | "snapshot")`` for a state file name, else None."""
    match = VERSIONED.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def scan(directory: Path) -> tuple[set[int], set[int], list[str]]:
    """Delta versions, snapshot versions and other (unversioned) file names in one state
    directory; hidden files (Spark's ``.crc`` and temp files) are skipped."""
    deltas: set[int] = set()
    snapshots: set[int] = set()
    others: list[str] = []
    for name in os.listdir(directory):
        if name.startswith("."):
            continue
        found = versioned(name)
        if found is not None:
            (deltas if found[1] == "delta" else snapshots).add(found[0])
        elif (directory / name).is_file():
            others.append(name)
    return deltas, snapshots, others


def chains(base: int, target: int, deltas: set[int], snapshots: set[int]) -> bool:
    """Whether version ``target`` loads from ``base`` with the files present."""
    return (base == 0 or base in snapshots) and all(v in deltas for v in range(base + 1, target + 1))


def chain_files(base: int, target: int) -> list[str]:
    """The file names that load version ``target`` from ``base``, base first."""
    return ([f"{base}.snapshot"] if base else []) + [f"{v}.delta" for v in range(base + 1, target + 1)]
