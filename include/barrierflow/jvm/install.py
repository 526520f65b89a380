"""Fetch the locked jars into the cache and verify each against its pinned sha256.

Contract of :func:`install`:

* a jar already in the cache is verified and never downloaded again (a second install of the
  same lock downloads nothing);
* a cached jar whose sha256 differs from the lock is an error naming the jar, its path and the
  fix; it is never silently replaced (a tampered or corrupted cache must be looked at);
* a downloaded jar is written under a temporary name, verified, then renamed: the cache never
  holds a jar that did not match its pin;
* the repository is Maven Central unless ``$BARRIERFLOW_MAVEN_REPOSITORY`` names a mirror.
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from barrierflow.atomic_files import write_atomic
from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.jvm.lockfile import LockedArtifact

log = logging.getLogger(__name__)

REPOSITORY_ENV = "BARRIERFLOW_MAVEN_REPOSITORY"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
_CHUNK = 1 << 20


@dataclass
class InstallReport:
    """What :func:`install` did: jars downloaded, and jars found in the cache and verified."""

    downloaded: list[LockedArtifact] = field(default_factory=list)
    verified: list[LockedArtifact] = field(default_factory=list)
    downloaded_bytes: int = 0


def repository_url() -> str:
    return os.environ.get(REPOSITORY_ENV, MAVEN_CENTRAL).rstrip("/")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached_path(cache: Path, artifact: LockedArtifact) -> Path:
    return cache / artifact.repository_path


def verify_cached(cache: Path, artifact: LockedArtifact) -> Path:
    """The cached jar of ``artifact``, after checking its sha256; raises if missing or different."""
    path = cached_path(cache, artifact)
    if not path.is_file():
        raise JvmArtifactError(
            f"JVM artifact {artifact.coordinates} is not installed (expected {path}): run `make install`")
    actual = sha256_of(path)
    if actual != artifact.sha256:
        raise JvmArtifactError(
            f"JVM artifact {artifact.coordinates} at {path} does not match its pinned sha256 "
            f"(lock {artifact.sha256}, file {actual}): the file was changed or corrupted. Delete it and "
            f"run `make install` again to fetch the pinned jar; if the download itself differs, do not "
            f"use that repository")
    return path


def _download(url: str, target: Path, artifact: LockedArtifact, timeout: float) -> int:
    size = 0

    def download(tmp: Path) -> None:
        nonlocal size
        digest = hashlib.sha256()
        with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
        if digest.hexdigest() != artifact.sha256:
            raise JvmArtifactError(
                f"downloaded {artifact.coordinates} from {url} does not match its pinned sha256 "
                f"(lock {artifact.sha256}, download {digest.hexdigest()}): refusing it; check "
                f"${REPOSITORY_ENV} or the network path to the repository")

    try:
        write_atomic(target, download)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise JvmArtifactError(
            f"cannot download JVM artifact {artifact.coordinates} from {url}: {exc}. The install needs "
            f"Maven Central (or a mirror in ${REPOSITORY_ENV})") from exc
    return size


def install(artifacts: Iterable[LockedArtifact], cache: Path, *, timeout: float = 120.0) -> InstallReport:
    """Make every jar of ``artifacts`` present and verified in ``cache`` (see the module contract)."""
    report = InstallReport()
    base = repository_url()
    seen: set[str] = set()
    for artifact in artifacts:
        if artifact.repository_path in seen:
            continue
        seen.add(artifact.repository_path)
        path = cached_path(cache, artifact)
        if path.exists():
            verify_cached(cache, artifact)
            report.verified.append(artifact)
            continue
        url = f"{base}/{artifact.repository_path}"
        log.info("downloading %s", url)
        report.downloaded_bytes += _download(url, path, artifact, timeout)
        report.downloaded.append(artifact)
    return report
