"""Deduplication by key without a window, its state expiring by ``transformation.ttl``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.errors import SpecError
from barrierflow.keyed_state.support import supports_ttl
from barrierflow.transforms.context import TransformContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@supports_ttl
def deduplicate_by_key(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """The first record of each key (``options.keys``: the key columns, default ``["key"]``),
    with every column of the input; later records of the key are dropped while its state lives
    (:class:`~barrierflow.keyed_state.deduplication.FirstPerKey`). With ``transformation.ttl`` a
    key's state expires ``ttl`` of event time after its newest record, duplicates included; a
    record after that is written again. Without ``ttl`` the state keeps every key ever seen.
    Output mode append; needs ``event_time`` and ``spark.state_store: rocksdb``.

    Raises:
        SpecError: ``emit_on_expiry`` (a deduplication has no row to write on expiry), or
            ``options.keys`` is not a non-empty list of input columns.
    """
    from barrierflow.keyed_state import apply_keyed_function
    from barrierflow.keyed_state.deduplication import FirstPerKey

    if ctx.emit_on_expiry:
        raise SpecError("<spec>", [("transformation.emit_on_expiry", "deduplicate_by_key writes a key's first record "
                                                                     "and has nothing to write when it expires; "
                                                                     "remove emit_on_expiry")])
    keys = ctx.options.get("keys", ["key"])
    if not isinstance(keys, list) or not keys or any(k not in df.columns for k in keys):
        raise SpecError("<spec>", [("transformation.options.keys", f"expected a list of input columns (the input has "
                                                                   f"{df.columns}), got {keys!r}")])
    schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)
    return apply_keyed_function(df, ctx, FirstPerKey(schema, list(df.columns)), keys=keys)
