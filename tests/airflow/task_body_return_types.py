"""Bodies whose return annotations name types this module imports and the wrapper's module does not."""

from __future__ import annotations

from collections import OrderedDict
from decimal import Decimal


def returns_mapping_alias(spec_path: str, barrierflow_home: str) -> OrderedDict[str, int]:
    return OrderedDict(a=1)


def returns_number(spec_path: str, barrierflow_home: str) -> Decimal:
    return Decimal(1)
