"""Which transformations accept ``transformation.ttl`` (and ``emit_on_expiry``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: The attribute :func:`supports_ttl` sets on a transformation.
TTL_ATTRIBUTE = "barrierflow_supports_ttl"


def supports_ttl(function: F) -> F:
    """Mark ``function`` (a transformation ``f(df, context)``) as honouring ``transformation.ttl``
    and ``emit_on_expiry`` (read from ``context.ttl_seconds`` / ``context.emit_on_expiry``); a
    spec with ``ttl`` naming a function without the mark is refused."""
    setattr(function, TTL_ATTRIBUTE, True)
    return function


def ttl_supported(function: Callable[..., Any]) -> bool:
    """Whether ``function`` was marked with :func:`supports_ttl`."""
    return bool(getattr(function, TTL_ATTRIBUTE, False))
