"""The class path of one locked set, from the verified cache."""

from __future__ import annotations

from pathlib import Path

from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.jvm.install import cached_path, verify_cached
from barrierflow.jvm.lockfile import DEFAULT_LOCK, cache_dir, read_lock, sets


def set_jars(set_name: str, *, lock: Path = DEFAULT_LOCK, cache: Path | None = None,
             verify: bool = False) -> list[Path]:
    """The jars of ``set_name`` in the cache, in lock order.

    Raises :class:`JvmArtifactError` naming the set (unknown set) or the first missing jar and
    the fix (``make install``). With ``verify`` every jar's sha256 is checked too (a few hundred
    milliseconds for the Kafka broker's 45 jars); without it only presence is.
    """
    artifacts = read_lock(lock)
    chosen = [a for a in artifacts if a.set_name == set_name]
    if not chosen:
        raise JvmArtifactError(f"no JVM artifact set {set_name!r} in {lock}; sets: {', '.join(sets(artifacts))}")
    root = cache if cache is not None else cache_dir()
    jars: list[Path] = []
    for artifact in chosen:
        if verify:
            jars.append(verify_cached(root, artifact))
            continue
        path = cached_path(root, artifact)
        if not path.is_file():
            raise JvmArtifactError(
                f"JVM artifact {artifact.coordinates} of set {set_name!r} is not installed "
                f"(expected {path}): run `make install` (or `python -m barrierflow.jvm install`)")
        jars.append(path)
    return jars


def class_path(set_name: str, **kwargs: object) -> str:
    """``set_jars`` joined with ``:`` for ``java -cp``."""
    return ":".join(str(p) for p in set_jars(set_name, **kwargs))  # type: ignore[arg-type]
