"""Deep verification of a ttl: no key of a keyed function's state is older than its ttl plus
the watermark delay.

With ``transformation.ttl``, barrierflow's keyed state keeps per key its newest event time
(state variable :data:`LAST_EVENT`) and exactly one event-time timer, its expiry; Spark fires
every timer at or below a batch's watermark in that batch, and the firing clears the key. So in
a checkpoint's state after barrier batch V no key may still hold a timer at or below the
watermark V ran with (it would be a key older than its ttl plus the watermark delay that
survived its expiry), and every key with a newest event time holds a timer (else it would
never expire; a key whose :data:`LAST_EVENT` records no expiry instant, ``expiry_ms`` null,
registered none yet: after a ttl was added, its next record registers one).
:func:`expiry_checks` counts both with Spark over the checkpoint's state
(Spark's ``statestore`` reader: the timers and :data:`LAST_EVENT`); a few numbers reach the
driver. A key's expiry is the timer it registered, not its newest event time plus the current
ttl: after a ttl change, existing keys keep the expiry they registered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.spark import offset_log
from barrierflow.state.reader import TIMER_STATE, keyed_variables, variable_options
from barrierflow.verification.report import CheckResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CHECK", "LAST_EVENT", "expiry_checks"]

#: The check's name in a verification report.
CHECK = "ttl-expiry"
#: The state variable barrierflow's keyed state keeps a key's newest event time in (with a ttl).
LAST_EVENT = "bf_last_event"
#: Its field with the instant of the key's expiry timer (null: the key registered none yet).
EXPIRY = "expiry_ms"


def _read(spark: SparkSession, directory: Path, batch_id: int, operator_id: int, name: str, kind: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("statestore").option("batchId", batch_id).option("operatorId", operator_id)
    for key, value in variable_options(name, kind).items():
        reader = reader.option(key, value)
    return reader.load(str(directory))


def expiry_checks(spark: SparkSession, directory: Path, batch_id: int, *, ttl_seconds: float | None,
                  watermark_delay_seconds: float, watermark_ms: int | None = None) -> list[CheckResult]:
    """The ttl checks (module docstring) of every keyed function's operator in the Spark
    checkpoint ``directory`` at barrier batch ``batch_id``: one :data:`CHECK` result per
    operator; none without ``ttl_seconds`` or keyed state. ``watermark_ms``: the watermark batch
    ``batch_id`` ran with (None: its offset log's ``batchWatermarkMs``)."""
    from pyspark.sql import functions as F

    if ttl_seconds is None:
        return []
    _ = spark.streams
    try:
        rows = [r.asDict() for r in spark.read.format("state-metadata").load(str(directory)).collect()]
    except Exception:  # no operator metadata: nothing keyed can be found
        return []
    keyed = keyed_variables(rows)
    if not keyed:
        return []
    if watermark_ms is None:
        value = offset_log.read_offset_metadata(directory, batch_id).get("batchWatermarkMs")
        watermark_ms = None if value is None else int(value)
    bound = f"ttl {ttl_seconds:g} s + watermark delay {watermark_delay_seconds:g} s"
    results: list[CheckResult] = []
    for op, variables in sorted(keyed.items()):
        file = f"state/{op}"
        timers_of = next(((n, k) for n, k, _ in variables if k == TIMER_STATE), None)
        has_last = any(n == LAST_EVENT for n, _, _ in variables)
        if timers_of is None or not has_last or watermark_ms is None:
            missing = ("no event-time timers" if timers_of is None else f"no {LAST_EVENT} state variable"
                       if not has_last else "no watermark in its offset log")
            results.append(CheckResult.skip(CHECK, f"operator {op}: {missing}, so its keys' expiry cannot be checked "
                                                   f"against the {bound}", file))
            continue
        timers = _read(spark, directory, batch_id, op, *timers_of).select(
            F.to_json("key").alias("k"), F.col("expiration_timestamp_ms").alias("at"))
        last = _read(spark, directory, batch_id, op, LAST_EVENT, "ValueState")
        value_fields = {f.name for f in last.schema["value"].dataType.fields}  # type: ignore[attr-defined]
        if EXPIRY in value_fields:  # a key records whether it registered an expiry (none yet after a ttl was added)
            last = last.where(F.col("value").getField(EXPIRY).isNotNull())
        last = last.select(F.to_json("key").alias("k"))
        overdue = timers.where(F.col("at") <= F.lit(watermark_ms))
        row = overdue.agg(F.count(F.lit(1)).alias("n"), F.min("k").alias("example"), F.min("at").alias("at")).first()
        unexpiring = last.join(timers.select("k").distinct(), "k", "left_anti")
        never = unexpiring.agg(F.count(F.lit(1)).alias("n"), F.min("k").alias("example")).first()
        keys = last.count()
        assert row is not None and never is not None
        problems = []
        if int(row["n"]):
            problems.append(f"{row['n']} keys hold an expiry timer at or below the watermark batch {batch_id} ran "
                            f"with ({watermark_ms} ms): older than their {bound}, not cleared (e.g. key "
                            f"{json.loads(row['example'])}, expiry {row['at']} ms)")
        if int(never["n"]):
            problems.append(f"{never['n']} keys have state and no expiry timer, so they never expire (e.g. key "
                            f"{json.loads(never['example'])})")
        if problems:
            results.append(CheckResult.fail(CHECK, f"operator {op}: " + "; ".join(problems), file))
        else:
            results.append(CheckResult.ok(CHECK, (
                f"operator {op}: compared {keys} keys' expiry timers with the watermark batch {batch_id} ran with "
                f"({watermark_ms} ms): every key has one after it, so no key is older than its {bound}"), file))
    return results
