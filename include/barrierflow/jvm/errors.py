"""Errors of the JVM artifact cache."""

from __future__ import annotations

from barrierflow.errors import BarrierflowError


class JvmArtifactError(BarrierflowError):
    """A locked JVM artifact is missing, could not be downloaded, or does not match its pinned
    sha256 (the message names the artifact, the file and the fix)."""
