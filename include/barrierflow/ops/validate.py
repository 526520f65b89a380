"""Validate a spec, single- or multi-stage, and describe it (``barrierflow validate``)."""

from __future__ import annotations

import os

from barrierflow.pipeline.spec_summary import SpecSummary, summarize
from barrierflow.spec.loader import load_any_spec

__all__ = ["SpecSummary", "validate_spec"]


def validate_spec(spec_path: str | os.PathLike[str]) -> SpecSummary:
    """Load the spec at ``spec_path`` (raises SpecError naming every problem) and summarise it
    (:func:`barrierflow.pipeline.spec_summary.summarize`)."""
    return summarize(load_any_spec(spec_path))
