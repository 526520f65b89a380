"""Deep verification: restore the checkpoint into a scratch directory, read its state with
Spark's ``statestore`` reader and validate it with the pipeline's Great Expectations suite.

Steps (check names in brackets):

Step 1. Materialize the manifest's files into ``<scratch>/spark-checkpoint`` (sha256
        checked) [``materialize``].
Step 2. For every stateful operator ``state/<op>``: ``spark.read.format("statestore")
        .option("batchId", V).option("operatorId", op).load(dir)`` — the state after barrier
        batch V, i.e. version V+1, exactly what a restore resumes from [``state-read``].
        Columns ``key``/``value`` structs are flattened to ``key_<field>``/``value_<field>``
        plus ``partition_id`` and ``operator_id``; a nested struct is flattened too (the
        ``window`` of a windowed aggregation becomes ``key_window_start``/``key_window_end``),
        so every column holds plain, hashable values that expectations can compare. A keyed
        function's operator (transformWithState) is read per state variable and its timers,
        with a ``state_variable`` column naming each.
Step 2b. With ``transformation.ttl``: no key of a keyed function's state older than its ttl
        plus the watermark delay [``ttl-expiry``, :mod:`barrierflow.verification.keyed_expiry`].
Step 3. Run the suite on the flattened rows with an ephemeral GE context, on Spark: the
        state is never collected to the driver, whatever its size; GE computes each
        expectation as Spark aggregations and brings back its counts and a few unexpected
        values [``expectation``, one check per expectation]. The suite file is
        ``verification.expectations`` of the spec, else ``include/expectations/<name>.json``;
        without one, Step 3 is skipped. An expectation that cannot be evaluated (e.g. its
        column does not exist) fails with GE's error message.

The suite file is a GE 1.x suite document (``include/expectations/demo.json`` is a
complete one); only ``type`` and ``kwargs`` of an expectation are used, ``meta`` documents it::

    {"name": "demo-state",
     "expectations": [{"type": "expect_column_values_to_be_between",
                       "kwargs": {"column": "value_count", "min_value": 1}},
                      {"type": "expect_compound_columns_to_be_unique",
                       "kwargs": {"column_list": ["operator_id", "key_window_start",
                                                  "key_window_end", "key_key"]}}]}
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointCorruptError, StorageError, UserInputError
from barrierflow.spark.session import apply_state_store
from barrierflow.spec.models import StageSpec
from barrierflow.spec.paths import project_home
from barrierflow.state.compatibility import ttl_of
from barrierflow.state.reader import flat_fields, read_flat_state
from barrierflow.verification import spark_verdicts
from barrierflow.verification.report import NO_SUITE, CheckResult

__all__ = ["NO_SUITE", "deep_checks", "expectations_path", "flat_fields", "load_suite_document", "read_state",
           "run_suite"]

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def expectations_path(spec: StageSpec) -> Path:
    """Where the pipeline's suite is declared (it may not exist)."""
    declared = spec.verification.expectations if spec.verification else ""
    if declared:
        path = Path(declared)
        return path if path.is_absolute() else project_home() / path
    return project_home() / "include" / "expectations" / f"{spec.name}.json"


def load_suite_document(path: Path) -> dict[str, Any]:
    """The suite JSON (module docstring). Raises UserInputError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserInputError(f"cannot read the expectation suite {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("expectations"), list):
        raise UserInputError(f"{path} is not a Great Expectations suite: it needs an 'expectations' list "
                             "of {'type': ..., 'kwargs': {...}}")
    return data


def read_state(spark: SparkSession, checkpoint_dir: Path, batch_id: int) -> DataFrame | None:
    """Step 2: the state of every operator at ``batch_id`` as one Spark DataFrame of flat rows
    (the state reader's flattened tables, :func:`barrierflow.state.reader.read_flat_state`,
    unioned by column name; a column one operator lacks is null in its rows), or None for a
    checkpoint without stateful operators. Lazy: nothing is read until an action runs, and
    nothing here brings rows to the driver."""
    frames = [frame for _, frame in read_flat_state(spark, checkpoint_dir, batch_id)]
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame, allowMissingColumns=True)
    return out


def ephemeral_context() -> Any:
    """A Great Expectations context kept in memory: no analytics calls, no progress bars."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    try:
        context.variables.progress_bars = {"globally": False}  # type: ignore[assignment]
    except Exception:  # progress bars are cosmetic
        pass
    return context


def run_suite(suite_doc: dict[str, Any], rows: pd.DataFrame | DataFrame, suite_file: str) -> list[CheckResult]:
    """Step 3: one check per expectation of the suite, run on ``rows``: a pandas DataFrame (a
    small table built on the driver, such as a report's) or a Spark DataFrame (state: evaluated
    by Spark, never collected).

    Two passes: the whole suite with GE's ``BOOLEAN_ONLY`` result format (pass or fail, no
    unexpected values: on a Spark DataFrame of 3.4 M state rows a key-uniqueness expectation
    takes about a third of the time the ``SUMMARY`` format's unexpected-value jobs need), then
    only the expectations that failed again with ``SUMMARY``, whose unexpected count, row count
    and sample the failed check names. A passing suite is validated once.

    On a Spark DataFrame, the plainest expectations that pass (value bounds, not null, key
    uniqueness: :mod:`barrierflow.verification.spark_verdicts`) are answered by one Spark
    aggregation per kind instead, GE's results for all the others; a failing one is always GE's.
    The checks come in the suite's order."""
    import pandas as pd

    # GE keeps one expectation per type and column(s) of a suite, the last: so does this
    configs = list({_domain(str(item["type"]), dict(item.get("kwargs", {}))): (str(item["type"]),
                                                                             dict(item.get("kwargs", {})))
                    for item in suite_doc["expectations"]}.values())
    name = str(suite_doc.get("name") or "state")
    decided = set() if isinstance(rows, pd.DataFrame) else spark_verdicts.passing(rows, configs)
    by_config: dict[int, CheckResult] = {
        i: CheckResult.ok("expectation", _described(*configs[i]), suite_file) for i in decided}
    rest = [c for i, c in enumerate(configs) if i not in decided]
    verdicts = _validate(name, rest, rows, "BOOLEAN_ONLY") if rest else []
    failed = [_expectation(r) for r in verdicts if not r.success and not exception_messages(r.exception_info)]
    details = {_described(*_expectation(r)): r for r in _validate(name, failed, rows, "SUMMARY")} if failed else {}
    undecided = {_domain(*configs[i]): i for i in range(len(configs)) if i not in decided}
    extra: list[CheckResult] = []
    for verdict in verdicts:
        what = _described(*_expectation(verdict))
        r = details.get(what, verdict)
        if r.success:
            check = CheckResult.ok("expectation", what, suite_file)
        elif errors := exception_messages(r.exception_info):
            check = CheckResult.fail("expectation", f"{what} could not be evaluated: {'; '.join(errors)}"[:2000],
                                     suite_file)
        else:
            detail = r.result or {}
            sample = detail.get("partial_unexpected_list")
            check = CheckResult.fail(
                "expectation", f"{what} failed: {detail.get('unexpected_count', '?')} unexpected "
                f"of {detail.get('element_count', '?')} state rows"
                + (f", e.g. {sample[:5]}" if sample else ""), suite_file)
        index = undecided.pop(_domain(*_expectation(verdict)), None)
        if index is None:
            extra.append(check)
        else:
            by_config[index] = check
    return [by_config[i] for i in sorted(by_config)] + extra


def _domain(kind: str, kwargs: dict[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """What makes two expectations of a suite one for GE: their type and their column(s)."""
    columns = kwargs.get("column_list")
    return kind, str(kwargs.get("column")), tuple(str(c) for c in columns) if isinstance(columns, list) else ()


def _expectation(result: Any) -> tuple[str, dict[str, Any]]:
    """The type and kwargs (without GE's own ``batch_id``) of the expectation of a GE result."""
    config = result.expectation_config
    return str(config.type), {k: v for k, v in config.kwargs.items() if k != "batch_id"}


def _described(kind: str, kwargs: dict[str, Any]) -> str:
    """``type(kwarg=value, ...)``: a check's text, and the key pairing the two passes' results."""
    return f"{kind}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


def _validate(name: str, configs: list[tuple[str, dict[str, Any]]], rows: pd.DataFrame | DataFrame,
              result_format: str) -> list[Any]:
    """GE's results of the expectations ``configs`` (type, kwargs) on ``rows``, one per expectation."""
    import great_expectations as gx
    import pandas as pd
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    context = ephemeral_context()
    source = (context.data_sources.add_pandas("barrierflow-state") if isinstance(rows, pd.DataFrame)
              else context.data_sources.add_spark("barrierflow-state"))
    batch_definition = source.add_dataframe_asset("state").add_batch_definition_whole_dataframe("all")
    suite = gx.ExpectationSuite(name=name)
    for kind, kwargs in configs:
        suite.add_expectation_configuration(ExpectationConfiguration(type=kind, kwargs=kwargs))
    suite = context.suites.add(suite)
    result = batch_definition.get_batch(batch_parameters={"dataframe": rows}).validate(
        suite, result_format=result_format)
    return list(result.results)


def exception_messages(info: Any) -> list[str]:
    """The messages of the exceptions GE caught while evaluating one expectation; its
    ``exception_info`` is either one ``{"raised_exception", "exception_message", ...}`` or a
    mapping of metric ids to such documents."""
    if not isinstance(info, dict):
        return []
    if "raised_exception" in info or "exception_message" in info:
        message = info.get("exception_message")
        return [str(message)] if info.get("raised_exception") and message else []
    return sorted({m for value in info.values() for m in exception_messages(value)})


def deep_checks(spec: StageSpec, store: CheckpointStore, manifest: Manifest, *,
                spark: SparkSession | None = None, scratch: str | None = None) -> list[CheckResult]:
    """Steps 1-3 for ``manifest``; a SparkSession is built from the spec if none is given."""
    tmp = Path(tempfile.mkdtemp(prefix=f"verify-{spec.name}-{manifest.checkpoint_id}-", dir=scratch))
    target = tmp / "spark-checkpoint"
    try:
        try:  # Step 1.
            done = materialize_checkpoint(store, manifest, target)
        except (CheckpointCorruptError, StorageError) as exc:
            return [CheckResult.fail("materialize", str(exc))]
        checks = [CheckResult.ok("materialize", f"{done.files} files, {done.bytes} bytes restored into scratch")]
        if spark is None:
            from barrierflow.spark.session import build_session

            spark = build_session(spec.spark, app_name=f"barrierflow-verify-{spec.name}")
        apply_state_store(spark, spec.spark)
        from pyspark import StorageLevel

        try:  # Step 2.
            rows = read_state(spark, target, manifest.spark_batch_id)
            if rows is not None:  # read once, by the count; the suite reads the cached rows
                rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
            count = 0 if rows is None else rows.count()
        except Exception as exc:  # the reader's errors come from the JVM
            return [*checks, CheckResult.fail("state-read", f"the statestore reader failed at batch "
                                              f"{manifest.spark_batch_id}: {type(exc).__name__}: {exc}"[:2000])]
        try:
            checks.append(CheckResult.ok("state-read", f"{count} state rows at batch {manifest.spark_batch_id} "
                                         f"(state version {manifest.state_version})"))
            ttl = ttl_of(spec)
            if ttl is not None and rows is not None:  # Step 2b: the ttl's bound on the keys' age
                from barrierflow.verification.keyed_expiry import expiry_checks

                delay = spec.event_time.watermark_delay if spec.event_time else 0.0
                checks += expiry_checks(spark, target, manifest.spark_batch_id, ttl_seconds=ttl,
                                        watermark_delay_seconds=delay)
            path = expectations_path(spec)  # Step 3.
            if not path.is_file():
                return [*checks, CheckResult.skip(
                    "expectation", f"{NO_SUITE} at {path}: deep verification skipped (the state was restored and "
                    "read, not checked; write a Great Expectations suite there or set verification.expectations)",
                    str(path))]
            if rows is None:
                return [*checks, CheckResult.skip("expectation", "the checkpoint holds no state", str(path))]
            return checks + run_suite(load_suite_document(path), rows, str(path))
        finally:
            if rows is not None:
                rows.unpersist()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
