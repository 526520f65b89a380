"""``barrierflow skew``, ``rollup``, ``recompute``, ``quality``, ``lake``: reports over the checkpoints and the
committed output.

Each command's parser sits beside its handler; :mod:`barrierflow.cli.main` dispatches.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from barrierflow.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME, ArgumentParser, Subcommands
from barrierflow.errors import UserInputError

if TYPE_CHECKING:
    from barrierflow.reports.skew import SkewReport


def add_skew(sub: Subcommands) -> None:
    """``barrierflow skew SPEC``."""
    skew = sub.add_parser("skew", help="watermark-skew report over the completed checkpoints (+ expectations)")
    skew.add_argument("spec")
    skew.add_argument("--last", type=int, metavar="N", help="report the newest N checkpoints (default: all)")
    skew.add_argument("--json", action="store_true")
    skew.add_argument("--html", metavar="PATH", help="also write an HTML report with plots to PATH")
    skew.set_defaults(handler=_cmd_skew)


def _print_skew(report: SkewReport) -> None:
    if not report.checkpoints:
        print(f"pipeline {report.pipeline}: no completed checkpoints yet in {report.storage}")
        return
    print(f"{'id':>5} {'completed (UTC)':26} {'skew s':>9} {'max lag s':>10} {'barrier ms':>10} "
          f"{'late rows':>9}  unknown event time")
    for c in report.checkpoints:
        skew_s = "-" if c.skew_seconds is None else f"{c.skew_seconds:.3f}"
        lag = "-" if c.max_lag_seconds is None else f"{c.max_lag_seconds:.3f}"
        late = "-" if c.rows_dropped_by_watermark is None else str(c.rows_dropped_by_watermark)
        print(f"{c.checkpoint_id:>5} {c.completion_time.astimezone(UTC).isoformat(timespec='seconds'):26} "
              f"{skew_s:>9} {lag:>10} {c.barrier_batch_ms:>10.1f} {late:>9}  "
              f"{', '.join(c.unknown_event_time) or '-'}")
    newest = report.checkpoints[-1]
    for p in newest.partitions:
        if p.watermark is not None or p.pauses or p.idle:
            print(f"  {p.name}: watermark {p.watermark.isoformat() if p.watermark else 'unknown'}"
                  f"{' idle' if p.idle else ''}{' paused' if p.paused else ''}, "
                  f"alignment pauses {p.pauses} ({p.paused_seconds:g} s)")
    print(f"idle partitions (last {report.settings.idle_checkpoints} checkpoints): "
          f"{', '.join(report.idle_partitions) or 'none'}")
    for check in report.checks:
        print(f"{check.name}: {check.status.value}: {check.message}")


def _cmd_skew(args: argparse.Namespace) -> int:
    """``skew``: each stage's report; ``--html PATH`` writes one page per stage (several
    stages: PATH with ``-<stage>`` before its suffix)."""
    from pathlib import Path

    from barrierflow.ops.skew import skew
    from barrierflow.reports.skew import render_skew_html

    outcome = skew(args.spec, last=args.last)
    if args.html:
        target = Path(args.html)
        for name, report in outcome.stages.items():
            page = target.with_name(f"{target.stem}{outcome.page_suffixes[name]}{target.suffix}")
            page.write_text(render_skew_html(report), encoding="utf-8")
    if args.json:
        print(json.dumps(outcome.as_dict(), indent=2))
    else:
        for name, report in outcome.stages.items():
            print(f"stage {name}:")
            _print_skew(report)
    for failure in outcome.failures:
        print(f"expectation failed: {failure}", file=sys.stderr)
    return EXIT_OK if outcome.passed else EXIT_RUNTIME


def _final_stage_option(parser: argparse.ArgumentParser) -> None:
    """``--stage``: the final stage a batch command (rollup, recompute, quality) works on."""
    parser.add_argument(
        "--stage", metavar="NAME",
        help="several stages: the final stage (one with a Parquet sink) whose committed output to work on; "
             "optional when the pipeline has exactly one")


def add_rollup(sub: Subcommands) -> None:
    """``barrierflow rollup SPEC``."""
    rollup = sub.add_parser("rollup", help="daily rollups of the committed Parquet output (Spark batch)")
    rollup.add_argument("spec")
    rollup.add_argument("--day", metavar="YYYY-MM-DD",
                        help="roll up this UTC day (default: the days with output committed since the last run)")
    rollup.add_argument("--tag", default="", help="stored in the report (the DAG passes its run id)")
    rollup.add_argument("--json", action="store_true")
    _final_stage_option(rollup)
    rollup.set_defaults(handler=_cmd_rollup)


def _cmd_rollup(args: argparse.Namespace) -> int:
    from barrierflow.ops.batch import parse_day, rollup

    report = rollup(args.spec, day=parse_day(args.day) if args.day else None, tag=args.tag, stage=args.stage)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.message())
    return EXIT_OK


def add_recompute(sub: Subcommands) -> None:
    """``barrierflow recompute SPEC``."""
    recompute = sub.add_parser("recompute", help="stream-vs-batch comparison: recompute the output of a closed "
                                                 "event-time range from the source and compare (exit 1: differences)")
    recompute.add_argument("spec")
    recompute.add_argument("--start", metavar="ISO", help="first window start (default: the source's first record)")
    recompute.add_argument("--end", metavar="ISO",
                           help="windows ending before this (default: the watermark of the newest checkpoint whose "
                                "output is committed)")
    recompute.add_argument("--tag", default="", help="stored in the report (the DAG passes its run id)")
    recompute.add_argument("--report-only", action="store_true",
                           help="exit 0 when the comparison ran, also with differences (the DAG's check task fails)")
    recompute.add_argument("--json", action="store_true")
    _final_stage_option(recompute)
    recompute.set_defaults(handler=_cmd_recompute)


def _moment(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UserInputError(f"--{name} {value!r} is not an ISO time: give e.g. 2026-01-01T00:00:00+00:00") from None
    if moment.tzinfo is None:
        raise UserInputError(f"--{name} {value!r} has no timezone: give e.g. 2026-01-01T00:00:00+00:00")
    return moment


def _cmd_recompute(args: argparse.Namespace) -> int:
    from barrierflow.ops.batch import recompute

    report = recompute(args.spec, start=_moment("start", args.start), end=_moment("end", args.end), tag=args.tag,
                       stage=args.stage)
    print(json.dumps(report.as_dict(), indent=2, default=str) if args.json else report.message())
    if not report.passed:
        print(f"error: {report.message()}", file=sys.stderr)
    if report.passed or args.report_only:
        return EXIT_OK
    return EXIT_RUNTIME if report.compared else EXIT_BAD_INPUT  # not compared: why is named, e.g. give --start


def add_quality(sub: Subcommands) -> None:
    """``barrierflow quality SPEC``."""
    quality = sub.add_parser("quality", help="data quality of the committed output and rollups (Great Expectations, "
                                             "Data Docs); exit 1 when an expectation fails")
    quality.add_argument("spec")
    quality.add_argument("--epochs", type=int, metavar="N",
                         help="validate the newest N committed epochs (default: verification.quality_epochs)")
    quality.add_argument("--json", action="store_true")
    _final_stage_option(quality)
    quality.set_defaults(handler=_cmd_quality)


def _cmd_quality(args: argparse.Namespace) -> int:
    from barrierflow.ops.quality import quality

    report = quality(args.spec, epochs=args.epochs, stage=args.stage)
    print(json.dumps(report.as_dict(), indent=2, default=str) if args.json else report.message())
    for failure in report.failures:
        print(f"expectation failed: {failure.describe()}", file=sys.stderr)
    return EXIT_OK if report.passed else EXIT_RUNTIME


def add_lake(sub: Subcommands) -> None:
    """``barrierflow lake read SPEC``, ``barrierflow lake maintain SPEC``."""
    lake = sub.add_parser("lake", help="the pipeline's Iceberg and Delta tables")
    lake_sub = lake.add_subparsers(dest="lake_command", required=True, parser_class=ArgumentParser)
    read = lake_sub.add_parser("read", help="every table's version as of one cut (a completed checkpoint)")
    read.add_argument("spec")
    read.add_argument("--checkpoint", type=int, help="checkpoint id (default: the newest cut)")
    read.add_argument("--json", action="store_true")
    read.set_defaults(handler=_cmd_lake)
    maintain = lake_sub.add_parser(
        "maintain", help="table maintenance (Iceberg: expire snapshots; Delta: OPTIMIZE, VACUUM) that keeps every "
                         "version the restore rule and the retained cuts need")
    maintain.add_argument("spec")
    maintain.add_argument("--older-than-hours", type=float, default=0.0,
                          help="Iceberg: expire only snapshots older than this (default 0: any not needed)")
    maintain.add_argument("--retention-hours", type=int, default=168,
                          help="Delta: VACUUM keeps files removed within this many hours (default 168)")
    maintain.add_argument("--json", action="store_true")
    maintain.set_defaults(handler=_cmd_lake_maintain)


def _cmd_lake_maintain(args: argparse.Namespace) -> int:
    """``lake maintain``: expire, compact and vacuum each table, keeping what restores and cuts need."""
    from barrierflow.ops.lake import maintain

    done = maintain(args.spec, older_than_hours=args.older_than_hours, retention_hours=args.retention_hours)
    if args.json:
        print(json.dumps(done.as_dict(), indent=2))
    else:
        print("\n".join(done.lines()))
    return EXIT_OK


def _cmd_lake(args: argparse.Namespace) -> int:
    """``lake read``: each table's Iceberg snapshot id or Delta version as of one cut."""
    from barrierflow.ops.lake import lake_cut

    cut = lake_cut(args.spec, args.checkpoint)
    if args.json:
        print(json.dumps(cut.as_dict(), indent=2))
    else:
        print("\n".join(cut.lines()))
    return EXIT_OK
