"""The lock file of JVM artifacts: what is pinned, and where each jar lives in the cache.

Format, one artifact per line (``#`` starts a comment)::

    <set> <group>:<artifact>:<version>[:<classifier>] <sha256>

A *set* is what one JVM needs on its class path (``kafka-broker``). The same jar may appear in
several sets. Versions are exact: nothing is resolved when the lock is read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from barrierflow.jvm.errors import JvmArtifactError

#: The lock shipped with the package.
DEFAULT_LOCK = Path(__file__).with_name("artifacts.lock")
#: Where jars are cached (Maven's repository layout), unless overridden.
CACHE_ENV = "BARRIERFLOW_JVM_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "barrierflow" / "maven"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, order=True)
class LockedArtifact:
    """One pinned jar.

    Attributes:
        set_name: the class path it belongs to (``kafka-broker``).
        group: Maven group id.
        artifact: Maven artifact id.
        version: exact version.
        classifier: Maven classifier, or ``""``.
        sha256: the jar's pinned sha256 (lowercase hex).
    """

    set_name: str
    group: str
    artifact: str
    version: str
    classifier: str
    sha256: str

    @property
    def coordinates(self) -> str:
        base = f"{self.group}:{self.artifact}:{self.version}"
        return f"{base}:{self.classifier}" if self.classifier else base

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"

    @property
    def repository_path(self) -> str:
        """The jar's path in a Maven repository (Maven Central's layout)."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"


def cache_dir() -> Path:
    """The jar cache: ``$BARRIERFLOW_JVM_CACHE`` or ``~/.cache/barrierflow/maven``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else DEFAULT_CACHE


def read_lock(path: Path = DEFAULT_LOCK) -> list[LockedArtifact]:
    """Parse ``path``; a malformed line raises :class:`JvmArtifactError` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise JvmArtifactError(f"cannot read the JVM artifact lock {path}: {exc}") from exc
    artifacts: list[LockedArtifact] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        coords = fields[1].split(":") if len(fields) == 3 else []
        if len(coords) not in (3, 4) or not _SHA256.match(fields[2]):
            raise JvmArtifactError(
                f"{path}:{number}: expected '<set> <group>:<artifact>:<version>[:<classifier>] <sha256>', "
                f"got {raw.strip()!r}")
        classifier = coords[3] if len(coords) == 4 else ""
        artifacts.append(LockedArtifact(fields[0], coords[0], coords[1], coords[2], classifier, fields[2]))
    return artifacts


def sets(artifacts: list[LockedArtifact]) -> list[str]:
    """The set names of ``artifacts``, sorted."""
    return sorted({a.set_name for a in artifacts})


def render_lock(artifacts: list[LockedArtifact], header: str) -> str:
    """The lock file's text for ``artifacts`` (sorted by set, then coordinates)."""
    lines = [header.rstrip("\n"), ""]
    for artifact in sorted(artifacts):
        lines.append(f"{artifact.set_name} {artifact.coordinates} {artifact.sha256}")
    return "\n".join(lines) + "\n"
