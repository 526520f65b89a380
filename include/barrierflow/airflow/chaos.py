"""The chaos DAG's task (``barrierflow_chaos__<name>``, triggered by hand), free of Airflow imports.

:func:`chaos_params` checks the trigger's params (a bad one fails the task at once, naming it
and what is allowed); :func:`run_chaos_check` runs ``barrierflow chaos`` on scratch copies of
the pipeline (a scratch copy: nothing of the running pipeline is touched), logs the summary
lines in the task log, leaves the report in the pipeline's checkpoint store (the Checkpoints
page links to it) and returns the JSON document (XCom). A difference in the outputs fails the
task with :class:`ChaosFailedError` naming the counts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.ops.chaos import ChaosOptions, chaos

log = logging.getLogger(__name__)


class ChaosFailedError(BarrierflowError):
    """The chaos run found missing, extra or duplicated rows (or could not make its kills);
    ``summary`` holds the JSON document."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


def chaos_params(params: Mapping[str, Any]) -> ChaosOptions:
    """The options of a chaos run from the DAG run's params.

    Raises:
        UserInputError: a param has the wrong type or value (the message names it and what is allowed).
    """
    def number(name: str, kind: type, default: Any) -> Any:
        value = params.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and int(value) != value):
            raise UserInputError(f"param {name!r} must be a {'whole ' if kind is int else ''}number, got {value!r}")
        return kind(value)

    mode = params.get("mode", "group")
    if mode not in ("group", "jvm", "stage", "mixed"):
        raise UserInputError(f"param 'mode' must be one of group, jvm, stage, mixed; got {mode!r}")
    kills = number("kills", int, 20)
    if kills < 1:
        raise UserInputError(f"param 'kills' must be at least 1, got {kills}")
    return ChaosOptions(kills=kills, seed=number("seed", int, 0), mode=mode,
                        min_gap=number("min_gap", float, 5.0), max_gap=number("max_gap", float, 30.0),
                        point_share=number("point_share", float, 0.25), processes=bool(params.get("processes", False)),
                        scratch=Path(params["scratch"]) if params.get("scratch") else None)


def run_chaos_check(spec_path: str | os.PathLike[str], options: ChaosOptions) -> dict[str, Any]:
    """Run chaos with ``options``; returns the JSON document when nothing is missing, extra or
    duplicated.

    Raises:
        ChaosFailedError: a difference (rows or dead-letter counts), or fewer kills than asked
            (the message has the counts).
        ChaosRefusedError, UserInputError: the spec cannot be judged, or a bad option.
        ChaosRunError: a run failed without being killed (its log is in the message).
    """
    outcome = chaos(spec_path, options)
    for line in outcome.lines:
        log.info("%s", line)
    log.info("report: %s and %s (in the pipeline's store: %s)", outcome.report_html, outcome.report_json,
             ", ".join(outcome.stored))
    summary = {**outcome.result.as_dict(), "stored_reports": list(outcome.stored)}
    summary.pop("events", None)  # the timeline is in the stored report; the XCom stays small
    if not outcome.result.passed:
        result = outcome.result
        raise ChaosFailedError(
            f"chaos on pipeline {result.pipeline} (seed {result.seed}) FAILED: missing {result.missing}, extra "
            f"{result.extra}, duplicated {result.duplicated}"
            + (f"; dead letters {result.dead_letters} of {result.dead_letters_expected} expected"
               if result.dead_letters != result.dead_letters_expected else "")
            + (f"; {result.problem}" if result.problem else "") + f". Report: {outcome.stored[1]}", summary)
    return summary
