"""Transformations referenced by pipeline specs (``transformation.function``)."""

from barrierflow.transforms.context import TransformContext, load_transformation

__all__ = ["TransformContext", "load_transformation"]
