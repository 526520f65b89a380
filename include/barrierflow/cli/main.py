"""``barrierflow`` — run pipelines and inspect their checkpoints.

Exit codes: 0 success, 2 bad input (spec, arguments, checkpoint chosen), 1 runtime failure,
141 when the reader of the output went away (``| head``: a shell's code for SIGPIPE).
Each command parses its arguments, calls one operation of :mod:`barrierflow.ops` and renders
the result; no rule of its own lives here.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING

from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.spec.durations import parse_duration_seconds

if TYPE_CHECKING:
    from barrierflow.ops.checkpoints import CheckpointListing, CheckpointView
    from barrierflow.ops.run import PipelineProgress, Progress, StartupPhase
    from barrierflow.ops.stop import StopOutcome
    from barrierflow.ops.validate import StageShape
    from barrierflow.reports.skew import SkewReport
    from barrierflow.verification.choice import CheckpointRequest

EXIT_OK, EXIT_RUNTIME, EXIT_BAD_INPUT = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise UserInputError(f"{self.prog}: {message}")


def _version() -> str:
    """The installed distribution's version (package metadata, as pip shows it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("barrierflow")
    except PackageNotFoundError:
        raise UserInputError("barrierflow is not installed as a distribution, so it has no version: install it "
                             "(pip install -e . in the repository) and run again") from None


class _VersionAction(argparse.Action):
    """``--version``: the version is read only when asked for (a source checkout without the
    distribution installed still runs every other command)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="barrierflow", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log at INFO level, with the traceback of a failure (before the command: "
                             "barrierflow --verbose run SPEC)")
    parser.add_argument("--version", action=_VersionAction, help="print the installed barrierflow's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    run = sub.add_parser("run", help="run a pipeline with ABS checkpoints")
    run.add_argument("spec", help="pipeline spec YAML, e.g. include/pipelines/demo.yaml")
    run.add_argument("--duration", type=float, help="stop after this many seconds")
    run.add_argument("--checkpoints", type=int, help="stop after this many completed checkpoints")
    run.add_argument("--until-exhausted", action="store_true",
                     help="bounded sources: stop once every record is covered by a completed checkpoint")
    run.add_argument("--quiet", action="store_true", help="no live progress line")
    run.add_argument("--processes", action="store_true",
                     help="several stages: run every stage in a process (Spark application) of its own, the pipeline "
                          "coordinator in this one")
    run.add_argument("--stage", metavar="NAME",
                     help="several stages: run only this stage (what --processes starts for each stage)")
    run.add_argument("--attempt-of-supervisor", metavar="PID", type=int, help=argparse.SUPPRESS)

    restore = sub.add_parser("restore", help="rebuild the job's Spark checkpoint from a completed checkpoint")
    restore.add_argument("spec")
    which = restore.add_mutually_exclusive_group()
    which.add_argument("--checkpoint", type=int, help="checkpoint id (verified structurally first)")
    which.add_argument("--latest", action="store_true",
                       help="the latest completed checkpoint (default), verified structurally first")
    which.add_argument("--latest-valid", action="store_true",
                       help="the newest checkpoint that passes structural verification (skipped ones are listed)")
    restore.add_argument("--accept-duplicates", action="store_true",
                         help="do not suppress the replay of epochs already committed (their output is written again)")
    restore.add_argument("--json", action="store_true")

    reconcile = sub.add_parser("reconcile", help="finish in-doubt sink transactions")
    reconcile.add_argument("spec")
    reconcile.add_argument("--dry-run", action="store_true", help="show the decisions, change nothing")
    reconcile.add_argument("--json", action="store_true")

    chk = sub.add_parser("checkpoints", help="inspect checkpoints")
    chk_sub = chk.add_subparsers(dest="action", required=True, parser_class=_ArgumentParser)
    lst = chk_sub.add_parser("list", help="list completed (and failed) checkpoints")
    lst.add_argument("spec")
    lst.add_argument("--json", action="store_true")
    show = chk_sub.add_parser("show", help="show one checkpoint's manifest")
    show.add_argument("spec")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")

    verify = sub.add_parser("verify", help="verify checkpoints (structural; --deep: state + expectations)")
    verify.add_argument("spec")
    pick = verify.add_mutually_exclusive_group()
    pick.add_argument("--checkpoint", type=int, help="checkpoint id")
    pick.add_argument("--latest", type=int, metavar="N", help="the newest N checkpoints (default: all)")
    verify.add_argument("--deep", action="store_true",
                        help="also restore into a scratch dir, read the state and run the expectation suite")
    verify.add_argument("--json", action="store_true")
    verify.add_argument("--html", metavar="PATH", help="also write an HTML report to PATH")

    skew = sub.add_parser("skew", help="watermark-skew report over the completed checkpoints (+ expectations)")
    skew.add_argument("spec")
    skew.add_argument("--last", type=int, metavar="N", help="report the newest N checkpoints (default: all)")
    skew.add_argument("--json", action="store_true")
    skew.add_argument("--html", metavar="PATH", help="also write an HTML report with plots to PATH")

    lake = sub.add_parser("lake", help="the pipeline's Iceberg and Delta tables")
    lake_sub = lake.add_subparsers(dest="lake_command", required=True)
    lake_read = lake_sub.add_parser("read", help="every table's version as of one cut (a completed checkpoint)")
    lake_read.add_argument("spec")
    lake_read.add_argument("--checkpoint", type=int, help="checkpoint id (default: the newest cut)")
    lake_read.add_argument("--json", action="store_true")

    rollup = sub.add_parser("rollup", help="daily rollups of the committed Parquet output (Spark batch)")
    rollup.add_argument("spec")
    rollup.add_argument("--day", metavar="YYYY-MM-DD",
                        help="roll up this UTC day (default: the days with output committed since the last run)")
    rollup.add_argument("--tag", default="", help="stored in the report (the DAG passes its run id)")
    rollup.add_argument("--json", action="store_true")

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

    quality = sub.add_parser("quality", help="data quality of the committed output and rollups (Great Expectations, "
                                             "Data Docs); exit 1 when an expectation fails")
    quality.add_argument("spec")
    quality.add_argument("--epochs", type=int, metavar="N",
                         help="validate the newest N committed epochs (default: verification.quality_epochs)")
    quality.add_argument("--json", action="store_true")
    for batch_command in (rollup, recompute, quality):
        batch_command.add_argument(
            "--stage", metavar="NAME",
            help="several stages: the final stage (one with a Parquet sink) whose committed output to work on; "
                 "optional when the pipeline has exactly one")

    chaos = sub.add_parser("chaos", help="prove exactly-once on this pipeline: a failure-free run and a run under N "
                                         "random kills in scratch copies, outputs compared row by row; exit 1 "
                                         "unless nothing is missing, extra or duplicated")
    chaos.add_argument("spec")
    chaos.add_argument("--kills", type=int, required=True, metavar="N", help="how many kills (at least 1)")
    chaos.add_argument("--seed", type=int, default=0, help="random seed: the same seed makes the same choices")
    chaos.add_argument("--mode", choices=["group", "stage", "jvm", "mixed"], default="group",
                       help="what a kill hits: the whole process group, one stage process (--processes), the "
                            "driver's JVM alone, or any of them")
    chaos.add_argument("--min-gap", type=float, default=5.0, metavar="S", help="shortest run before a kill (s)")
    chaos.add_argument("--max-gap", type=float, default=30.0, metavar="S", help="longest run before a kill (s)")
    chaos.add_argument("--point-share", type=float, default=0.25, metavar="P",
                       help="share of the kills made by the pipeline itself at a protocol point of barrierflow.faults")
    chaos.add_argument("--points", metavar="P1,P2",
                       help="the protocol points those runs crash at (default: every point the pipeline reaches)")
    chaos.add_argument("--processes", action="store_true", help="several stages: every stage in a process of its own")
    chaos.add_argument("--run-timeout", type=float, default=1800.0, metavar="S",
                       help="longest a run that is not killed may take (the reference, armed runs, the last run) "
                            "before chaos kills it and stops with its log (s)")
    chaos.add_argument("--upgrade-to", metavar="NEW_SPEC",
                       help="upgrade mode: kill 'barrierflow upgrade SPEC --to NEW_SPEC' at random steps (rewrite, "
                            "canary, commit, rollback) instead of the runs, upgrading back and forth until N kills")
    chaos.add_argument("--canary-checkpoints", type=int, metavar="N",
                       help="upgrade mode: checkpoints each upgrade's canary verifies (default 2)")
    chaos.add_argument("--kills-per-upgrade", type=int, metavar="M",
                       help="upgrade mode: most kills one upgrade takes before it may complete (default 4)")
    chaos.add_argument("--scratch", metavar="DIR", help="where the copies, logs and report go "
                                                        "(default: beside the pipeline's work dir)")
    chaos.add_argument("--json", action="store_true")

    retain = sub.add_parser("retain", help="delete checkpoints and files the retention policy does not keep")
    retain.add_argument("spec")
    retain.add_argument("--dry-run", action="store_true", help="report what would be deleted, change nothing")
    retain.add_argument("--json", action="store_true")

    savepoint = sub.add_parser("savepoint", help="make a completed checkpoint a savepoint (never deleted)")
    savepoint.add_argument("spec")
    savepoint.add_argument("--checkpoint", type=int, help="checkpoint id (default: the latest completed)")
    savepoint.add_argument("--json", action="store_true")

    stop = sub.add_parser("stop", help="stop the running pipeline (on any host sharing its checkpoint storage); "
                                       "--savepoint: after one more checkpoint, kept as a savepoint")
    stop.add_argument("spec")
    stop.add_argument("--savepoint", action="store_true",
                      help="take one more checkpoint first, let every sink commit it, keep it as a savepoint")
    stop.add_argument("--timeout", default="10m", help="how long to wait for the stop (default 10m; e.g. 90s, 5m)")
    stop.add_argument("--json", action="store_true")

    state = sub.add_parser("state", help="read a completed checkpoint's state (Spark's state readers, on a scratch "
                                         "copy): schema, query, diff, stats")
    state_sub = state.add_subparsers(dest="action", required=True, parser_class=_ArgumentParser)
    st_schema = state_sub.add_parser("schema", help="each stage's stateful operators with key and value schemas")
    st_query = state_sub.add_parser("query", help="one operator's state as a table (--sql over table 'state')")
    st_diff = state_sub.add_parser("diff", help="keys added, changed and removed between two checkpoints")
    st_stats = state_sub.add_parser("stats", help="keys and bytes per partition, the largest keys, growth")
    for command in (st_schema, st_query, st_diff, st_stats):
        command.add_argument("spec")
        if command is not st_diff:
            command.add_argument("--checkpoint", type=int, metavar="N",
                                 help="checkpoint (or savepoint) id (default: the latest completed)")
        command.add_argument("--stage", metavar="NAME", help="several stages: the stage to read (required, except "
                                                             "for schema, which shows every stage)")
        if command is not st_schema:
            command.add_argument("--operator", type=int, metavar="ID",
                                 help="the stateful operator (required when the stage has several)")
        command.add_argument("--json", action="store_true")
    st_query.add_argument("--sql", help="a Spark SQL query over the table 'state', e.g. "
                                        "\"SELECT * FROM state WHERE value_count > 10\"")
    st_query.add_argument("--limit", type=int, default=20, metavar="N", help="rows shown (default 20)")
    st_diff.add_argument("--from", dest="from_id", type=int, required=True, metavar="N", help="the older checkpoint")
    st_diff.add_argument("--to", dest="to_id", type=int, required=True, metavar="M", help="the newer checkpoint")
    st_diff.add_argument("--sample", type=int, default=10, metavar="N", help="keys shown per kind of change")
    for command in (st_query, st_diff):
        command.add_argument("--output", metavar="PATH",
                             help="write the whole table with Spark to PATH (.parquet or .json: a directory of part "
                                  "files) instead of a preview")
    st_stats.add_argument("--top", type=int, default=10, metavar="N", help="largest keys shown (default 10)")

    upgrade = sub.add_parser("upgrade", help="change a stopped pipeline's spec over its savepoint: the compatibility "
                                             "report (--dry-run), or the change itself (a rescale, a stage added or "
                                             "dropped is rewritten into a new savepoint, which the new spec is "
                                             "restored from; the new spec then runs a verified canary, and a "
                                             "failed canary rolls back)")
    upgrade.add_argument("spec", help="the spec the state was built with")
    upgrade.add_argument("--to", dest="new_spec", required=True, metavar="NEW_SPEC", help="the changed spec")
    upgrade.add_argument("--dry-run", action="store_true", help="report only: nothing is rewritten or restored")
    upgrade.add_argument("--checkpoint", type=int, metavar="N",
                         help="--dry-run: checkpoint or savepoint id (default: the latest completed); otherwise the "
                              "savepoint to upgrade from (default: the latest savepoint)")
    upgrade.add_argument("--drop-stage", dest="drop_stages", action="append", default=[], metavar="NAME",
                         help="a stage the new spec removes, dropped with its state (several stages; repeat for "
                              "more); a removed stage not named is refused")
    upgrade.add_argument("--canary-checkpoints", type=int, default=3, metavar="N",
                         help="how many completed checkpoints of the new spec must pass deep verification before "
                              "its output is committed (default 3; 0: no canary); a failed canary rolls back")
    upgrade.add_argument("--no-canary-compare", dest="canary_compare", action="store_false",
                         help="the canary makes no stream-vs-batch comparison of the windows it computed; deep "
                              "verification still runs")
    upgrade.add_argument("--assume-compatible", dest="assume_compatible", action="store_true",
                         help="take a stage whose compatibility is unknown (state without a recorded fingerprint "
                              "that Spark's state metadata cannot decide) as compatible, on your word; the upgrade "
                              "records the new spec's fingerprint with that state, marked as assumed")
    upgrade.add_argument("--json", action="store_true")

    validate = sub.add_parser("validate", help="validate a spec; for several stages show the graph and its cycles")
    validate.add_argument("spec")
    validate.add_argument("--json", action="store_true")
    validate.add_argument("--deep", action="store_true",
                          help="also import every stage's transformation and check it on its source's columns in "
                               "a local Spark session (output mode, watermark, columns, sink keys; no data read)")

    init = sub.add_parser("init", help="create a project in ./NAME: a pipeline spec, its package, a test, Airflow DAGs")
    init.add_argument("name", help="the pipeline's name; its package is the name with '-' as '_'")
    from barrierflow.scaffold.templates import SINKS, SOURCES

    init.add_argument("--source", choices=SOURCES, default=SOURCES[0],
                      help="what the pipeline reads: the built-in generator (default) or JSON records of a Kafka topic")
    init.add_argument("--sink", choices=SINKS, default=SINKS[0],
                      help="where it writes, exactly once: Parquet files (default), a PostgreSQL table, a Kafka topic")

    return parser


def _write_progress(line: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[2K" + line)
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _stages_progress_line(p: PipelineProgress) -> str:
    """The progress line of several stages: per stage batch, rec/s and epoch, then the last
    completed global checkpoint."""
    stages = " | ".join(f"{s.stage}: batch={s.batch_id if s.batch_id is not None else '-'} "
                        f"rec/s={s.records_per_second:,.0f} epoch={s.epoch}" for s in p.stages)
    return (f"{stages} | global_checkpoint={p.last_completed if p.last_completed is not None else '-'} "
            f"failed={p.failed}")


def _phase_line(phase: StartupPhase) -> None:
    """A step of the run's start (the restore), on the progress line until the first batch."""
    _write_progress(f"starting: {phase.message}")


def _progress_line(p: Progress | PipelineProgress) -> None:
    """The one live progress display of ``run``: one stage's job, or every stage of several."""
    from barrierflow.ops.run import PipelineProgress

    if isinstance(p, PipelineProgress):
        _write_progress(_stages_progress_line(p))
        return
    if p.batch_id is None and p.records == 0:  # nothing done yet: the last start step stands
        return
    line = (f"batch={p.batch_id if p.batch_id is not None else '-'} records={p.records} "
            f"rec/s={p.records_per_second:,.0f} epoch={p.epoch} "
            f"last_checkpoint={p.last_completed if p.last_completed is not None else '-'} "
            f"uploads_in_flight={p.uploads_in_flight} failed={p.failed}")
    if p.event_time is not None:
        e = p.event_time
        line += (f" late_dropped={e.rows_dropped_late} paused={','.join(e.paused) or '-'} "
                 f"idle={','.join(e.idle) or '-'} wm_skew="
                 + (f"{e.watermark_skew_seconds:g}s" if e.watermark_skew_seconds is not None else "-"))
    _write_progress(line)


def _cmd_run(args: argparse.Namespace) -> int:
    from barrierflow.ops.run import run, run_stage

    if args.stage and args.processes:
        raise UserInputError("--stage and --processes exclude each other: --processes starts one --stage process "
                             "per stage itself; give one of them")
    if args.stage:
        run_stage(args.spec, args.stage)
        return EXIT_OK
    if args.attempt_of_supervisor is None:  # a spec with a restart strategy runs under its supervisor
        from barrierflow.ops.supervised_run import run_supervised

        supervised = run_supervised(args.spec, duration=args.duration, checkpoints=args.checkpoints,
                                    until_exhausted=args.until_exhausted, quiet=args.quiet,
                                    processes=args.processes, verbose=args.verbose)
        if supervised is not None:
            print(supervised.summary())
            return EXIT_OK
    outcome = run(args.spec, duration=args.duration, checkpoints=args.checkpoints,
                  until_exhausted=args.until_exhausted, progress=None if args.quiet else _progress_line,
                  progress_every=1.0 if sys.stderr.isatty() else 30.0, processes=args.processes,
                  phases=None if args.quiet else _phase_line)
    if sys.stderr.isatty() and not args.quiet:
        sys.stderr.write("\n")
    result = outcome.result
    count = len(outcome.stages)
    broker = f"; embedded broker {outcome.embedded_broker} (stopped)" if outcome.embedded_broker else ""
    print(f"pipeline {outcome.pipeline} ({count} stage{'s' if count > 1 else ''}, attempt {outcome.attempt}): "
          f"{result.batches} batches, {result.records} records in {result.elapsed_seconds:.1f} s "
          f"({result.throughput:,.0f} rec/s after the first batch); {len(result.completed)} {outcome.noun}s "
          f"completed, {len(result.failed)} failed; dead letters: {outcome.dead_letters}{broker}")
    for manifest in result.completed:
        print(f"  {outcome.noun} {manifest.checkpoint_id}: {manifest.total_ms:.0f} ms")
    for failure in result.failed:
        reason = getattr(failure.reason, "value", failure.reason)
        print(f"  {outcome.noun} {failure.checkpoint_id} failed: {reason}: {failure.message}")
    for stage, letters in outcome.stage_dead_letters.items():
        print(f"  stage {stage}: dead letters: {letters.count} ({letters.uri})")
    if outcome.stop is not None:
        print(_stop_line(outcome.pipeline, outcome.stop, args.spec))
    return EXIT_OK


def _stop_line(pipeline: str, stop: StopOutcome, spec: str) -> str:
    if stop.savepoint is not None:
        return (f"pipeline {pipeline} stopped with savepoint {stop.savepoint} ({stop.noun} {stop.savepoint}, committed "
                f"by every sink) at {stop.location}; 'barrierflow run {spec}' continues from it")
    return f"pipeline {pipeline} {stop.message}"


def _cmd_stop(args: argparse.Namespace) -> int:
    from barrierflow.ops.stop import stop

    try:
        timeout = parse_duration_seconds(args.timeout)
    except ValueError as exc:
        raise UserInputError(f"--timeout: {exc}") from None
    result = stop(args.spec, savepoint=args.savepoint, timeout=timeout)
    if args.json:
        print(json.dumps({"pipeline": result.pipeline, "stopped": result.holder, **result.outcome.as_dict()},
                         indent=2))
        return EXIT_OK
    print(_stop_line(result.pipeline, result.outcome, args.spec))
    return EXIT_OK


def _verified(listing: CheckpointListing, checkpoint_id: int) -> str:
    verdict = listing.verdicts.get(checkpoint_id)
    return verdict.label if verdict is not None else "-"


def _print_verdict_reason(listing: CheckpointListing, checkpoint_id: int) -> None:
    verdict = listing.verdicts.get(checkpoint_id)
    if verdict is not None and not verdict.passed:
        print(f"{'':>5} verification: {verdict.reason}")


def _print_listing(listing: CheckpointListing, spec: str) -> None:
    """Every cut, one row each, with its status, duration (trigger to completion) and stored
    verification verdict (``-``: never verified), and under it the row of every stage's part
    (its own checkpoint: kind, barrier batch, mode, alignment, sync and async times,
    channel-state records, bytes); an unreadable manifest is named on stderr."""
    noun = listing.noun
    for skipped in listing.skipped:
        print(f"skipped {skipped.file}, which cannot be read: {skipped.reason}", file=sys.stderr)
    if not listing.cuts and not listing.failed_cuts and not listing.skipped:
        print(f"no {noun}s in {listing.storage} yet; run 'barrierflow run {spec}'")
        return
    print(f"pipeline {listing.pipeline}: {noun}s in {listing.storage} (attempt {listing.attempt})")
    print(f"{'id':>5} {'attempt':>7} {'status':10} {'completed (UTC)':26} {'total ms':>9} {'verified':14} "
          f"{'stage':12} {'kind':10} {'batch':>6} {'mode':10} {'align ms':>9} {'sync ms':>8} {'async ms':>9} "
          f"{'chan recs':>9} {'full B':>10} {'new B':>10}")
    for c in listing.cuts:
        status = "ABANDONED" if c.checkpoint_id in listing.abandoned else "COMPLETED"
        completed = c.completion_time.astimezone(UTC).isoformat(timespec="seconds")
        print(f"{c.checkpoint_id:>5} {c.attempt:>7} {status:10} {completed:26} {c.total_ms:>9.1f} "
              f"{_verified(listing, c.checkpoint_id)}")
        for name, part in c.stages.items():
            own = listing.stages[name].manifest(c.checkpoint_id) if name in listing.stages else None
            kind, full, new = (own.kind.value, own.full_bytes, own.incremental_bytes) if own else ("-", "-", "-")
            print(f"{'':>5} {'':>7} {'':10} {'':26} {'':>9} {'':14} {name:12} {kind:10} {part.spark_batch_id:>6} "
                  f"{part.mode or '-':10} {part.alignment_ms:>9.1f} {part.sync_ms:>8.1f} {part.async_ms:>9.1f} "
                  f"{part.channel_state_records:>9} {full:>10} {new:>10}")
        _print_verdict_reason(listing, c.checkpoint_id)
    for g in listing.failed_cuts:
        print(f"{g.checkpoint_id:>5} {'-':>7} {'FAILED':10} {g.reason}: {g.message}")


def _print_view(view: CheckpointView) -> None:
    """The cut, then each stage's part and its manifest field by field with its files."""
    m = view.manifest
    print(f"{view.noun} {m.checkpoint_id} of {m.pipeline} (attempt {m.attempt}): completed "
          f"{m.completion_time.astimezone(UTC).isoformat(timespec='seconds')}, {m.total_ms:.1f} ms after its trigger")
    for name, stage in view.stages.items():
        kind = "" if stage.kind.value == "checkpoint" else f" [{stage.kind.value}]"
        print(f"  stage {name}{kind}: batch {stage.spark_batch_id}, sync {stage.sync_ms:.1f} ms, async "
              f"{stage.async_ms:.1f} ms, {len(stage.files)} files, {stage.full_bytes} bytes")
        for source, offsets in stage.barrier_offsets.items():
            print(f"    source {source} at the barrier: {json.dumps(offsets)}")
            form = view.starting_offsets.get(name, {}).get(source)
            if form is not None:  # what a new pipeline started at this cut gives its Kafka source
                print(f"    source {source} as starting_offsets: {json.dumps(form)}")
        if stage.alignment is not None:
            a = stage.alignment
            print(f"    alignment {a.mode}, {a.alignment_ms:.1f} ms; barrier positions {json.dumps(a.barrier_offsets)}")
            for entry in a.channel_state:
                edge = " (back-edge)" if entry.back_edge else ""
                print(f"    channel state {entry.partition} [{entry.start}, {entry.end}): {entry.records} "
                      f"records{edge}")
        data = stage.model_dump(mode="json")
        files = data.pop("files")
        for key, value in data.items():
            print(f"    {key:18} {json.dumps(value) if isinstance(value, dict | list) else value}")
        print(f"    files ({len(files)}):")
        for f in files:
            print(f"      {f['path']:60} {f['size']:>10} {f['sha256'][:12]} {'new' if f['uploaded'] else 'shared'}")


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    from barrierflow.ops.checkpoints import list_checkpoints, show_checkpoint

    if args.action == "show":
        view = show_checkpoint(args.spec, args.id)
        if args.json:
            print(json.dumps(view.as_dict(), indent=2))
        else:
            _print_view(view)
        return EXIT_OK
    listing = list_checkpoints(args.spec)
    if args.json:
        print(json.dumps(listing.as_dict(), indent=2))
    else:
        _print_listing(listing, args.spec)
    return EXIT_OK


def _cmd_restore(args: argparse.Namespace) -> int:
    from barrierflow.ops.restore import restore
    from barrierflow.verification.choice import LATEST, LATEST_VALID

    requested: CheckpointRequest = (args.checkpoint if args.checkpoint is not None
                                    else LATEST_VALID if args.latest_valid else LATEST)
    outcome = restore(args.spec, requested, accept_duplicates=args.accept_duplicates)
    if args.json:
        print(json.dumps(outcome.as_dict(), indent=2))
        return EXIT_OK
    for cid, why in outcome.choice.skipped:
        print(f"skipped {outcome.noun} {cid}: {why}")
    print(f"restored {outcome.noun} {outcome.checkpoint_id} of {outcome.pipeline} in every stage "
          f"({outcome.choice.verification}); attempt {outcome.attempt}")
    for name, stage in outcome.stages.items():
        report = stage.report
        if report is not None:
            print(f"  stage {name}: batch {report.spark_batch_id}, {report.files} files, {report.bytes} bytes, sha256 "
                  f"checked; resumes at batch {report.spark_batch_id + 1}")
            for d in report.decisions:
                print(f"  stage {name}: {d.action:6} {d.sink} {d.transaction_id}: {d.reason}")
            if report.replay:
                print(f"  stage {name}: epochs {report.replay['epochs']} were already committed: their "
                      f"{report.replay['batches']} batches are replayed up to {report.replay['through']} with the "
                      f"output suppressed")
        if stage.cutoff:
            print(f"  stage {name}: skips what older attempts wrote after {stage.cutoff}")
    if outcome.abandoned:
        print(f"  abandoned newer {outcome.noun}s: {outcome.abandoned}")
    print(f"ready: 'barrierflow run {args.spec}' continues from there")
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    from pathlib import Path

    from barrierflow.ops.verify import verify
    from barrierflow.verification.html import render_html

    outcome = verify(args.spec, checkpoint_id=args.checkpoint, latest=args.latest, deep=args.deep)
    if args.html:
        Path(args.html).write_text(render_html(outcome.pipeline, outcome.stage_reports), encoding="utf-8")
    if args.json:
        print(json.dumps(outcome.summary(), indent=2))
        return EXIT_RUNTIME if outcome.failed else EXIT_OK
    for r in outcome.reports:
        counts = (f"{r.passed_count}/{r.check_count} checks{f'; {r.deep_verdict()}' if r.deep else ''}; "
                  f"stages: {', '.join(r.stages)}")
        print(f"{outcome.noun} {r.checkpoint_id}: {'passed' if r.passed else 'FAILED'} ({counts})")
        for c in r.failures:
            print(f"  {c.name}: {c.message}" + (f" [{c.file}]" if c.file else ""))
    if not outcome.reports:
        print(f"no {outcome.noun}s in {outcome.storage} to verify")
    return EXIT_RUNTIME if outcome.failed else EXIT_OK


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


def _cmd_lake(args: argparse.Namespace) -> int:
    """``lake read``: each table's Iceberg snapshot id or Delta version as of one cut."""
    from barrierflow.ops.lake import lake_cut

    cut = lake_cut(args.spec, args.checkpoint)
    if args.json:
        print(json.dumps(cut.as_dict(), indent=2))
    else:
        print("\n".join(cut.lines()))
    return EXIT_OK


def _cmd_retain(args: argparse.Namespace) -> int:
    from barrierflow.ops.retain import retain

    outcome = retain(args.spec, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(outcome.as_dict(), indent=2))
        return EXIT_OK
    verb = "would delete" if args.dry_run else "deleted"
    cuts, noun = outcome.plan, outcome.noun
    print(f"pipeline {cuts.pipeline} ({cuts.policy.value}, retained={outcome.retained}): kept {noun}s {cuts.kept}, "
          f"savepoints {cuts.savepoints}")
    print(f"  {verb}: {noun}s {cuts.checkpoints}, unfinished {cuts.incomplete}; bytes "
          f"{'to free' if args.dry_run else 'freed'}: {cuts.bytes_freed}")
    for name, plan in outcome.stages.items():
        print(f"  stage {name}: {verb} checkpoints {plan.checkpoints}, incomplete {plan.incomplete}, "
              f"{len(plan.shared)} shared files, {len(plan.ledger)} ledger entries, {len(plan.reservations)} stale "
              f"reservations; bytes {plan.bytes_freed} {plan.bytes}")
        local = plan.local
        if local is not None:
            print(f"    work dir {local.work_dir}: {local.summary() if local.skipped else f'{verb} {local.summary()}'}")
            for note in local.notes:
                print(f"      note: {note}")
    return EXIT_OK


def _cmd_savepoint(args: argparse.Namespace) -> int:
    from barrierflow.ops.savepoint import savepoint

    view = savepoint(args.spec, checkpoint_id=args.checkpoint)
    cid, pipeline = view.checkpoint_id, view.manifest.pipeline
    batches = {name: m.spark_batch_id for name, m in view.stages.items()}
    if args.json:
        print(json.dumps({"pipeline": pipeline, "noun": view.noun, "savepoint": cid, "stages": batches}, indent=2))
        return EXIT_OK
    where = ", ".join(f"stage {name}: batch {batch}" for name, batch in batches.items())
    print(f"{view.noun} {cid} of {pipeline} is a savepoint in every stage ({where}); retention never deletes it. "
          f"Restore it with 'barrierflow restore {args.spec} --checkpoint {cid}'")
    return EXIT_OK


def _cmd_reconcile(args: argparse.Namespace) -> int:
    from barrierflow.ops.reconcile import reconcile

    outcome = reconcile(args.spec, dry_run=args.dry_run)
    plan = outcome.plan
    if args.json:
        print(json.dumps(outcome.as_dict(), indent=2))
        return EXIT_OK
    verb = "would" if args.dry_run else "did"
    print(f"pipeline {plan.pipeline}: latest completed {outcome.noun} {plan.latest_completed}; "
          f"{outcome.runner} {'running' if plan.job_running else 'not running'}")
    for stage, decisions in outcome.stages.items():
        for d in decisions:
            print(f"  stage {stage}: {verb} {d.action:6} {d.sink} {d.transaction_id} (epoch {d.checkpoint_id}, "
                  f"{d.state}): {d.reason}")
    if not plan.decisions:
        print(f"  nothing in doubt (transaction ledgers in {outcome.storage})")
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from barrierflow.ops.validate import validate_deep, validate_spec

    shapes = None
    if args.deep:
        summary, shapes = validate_deep(args.spec)
    else:
        summary = validate_spec(args.spec)
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps({
            "pipeline": summary.pipeline, "stages": list(summary.stages), "channels": summary.channels,
            "edges": [{"channel": e.channel, "writer": e.writer, "reader": e.reader} for e in summary.edges],
            "cycles": [{"stages": list(c.stages), "back_edge": {"channel": c.back_edge.channel,
                                                                "writer": c.back_edge.writer,
                                                                "reader": c.back_edge.reader}}
                       for c in summary.cycles],
            "source_stages": list(summary.source_stages), "final_stages": list(summary.final_stages),
            "mode": summary.mode, "alignment_timeout": summary.alignment_timeout, "warnings": list(summary.warnings),
            **({"transformations": [{"stage": s.stage, "input": s.input_columns, "output": s.output_columns}
                                    for s in shapes]} if shapes is not None else {})}, indent=2))
        return EXIT_OK
    timeout = f", alignment timeout {summary.alignment_timeout:g}s" if summary.alignment_timeout else ""
    print(f"{args.spec}: valid {summary.title} ({summary.mode} checkpoints{timeout})")
    print(f"  source stages: {', '.join(summary.source_stages)}; final stages: "
          f"{', '.join(summary.final_stages) or '(none)'}")
    for edge in summary.edges:
        back = "  (back-edge)" if any(c.back_edge == edge for c in summary.cycles) else ""
        print(f"  {edge.writer} -> {edge.reader} via channel {edge.channel} "
              f"(topic {summary.channels[edge.channel]}){back}")
    for cycle in summary.cycles:
        print(f"  cycle: {cycle}")
    _print_shapes(shapes)
    return EXIT_OK


def _print_shapes(shapes: list[StageShape] | None) -> None:
    """``validate --deep``: each stage's transformation as input columns -> output columns."""
    for shape in shapes or []:
        print(f"  transformation of {shape.stage} (checked): ({', '.join(shape.input_columns)}) -> "
              f"({', '.join(f'{n} {t}' for n, t in shape.output_columns.items())})")


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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


def _cmd_rollup(args: argparse.Namespace) -> int:
    from barrierflow.ops.batch import parse_day, rollup

    report = rollup(args.spec, day=parse_day(args.day) if args.day else None, tag=args.tag, stage=args.stage)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.message())
    return EXIT_OK


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


def _cmd_quality(args: argparse.Namespace) -> int:
    from barrierflow.ops.quality import quality

    report = quality(args.spec, epochs=args.epochs, stage=args.stage)
    print(json.dumps(report.as_dict(), indent=2, default=str) if args.json else report.message())
    for failure in report.failures:
        print(f"expectation failed: {failure.describe()}", file=sys.stderr)
    return EXIT_OK if report.passed else EXIT_RUNTIME


def _cmd_chaos(args: argparse.Namespace) -> int:
    from pathlib import Path

    from barrierflow.ops.chaos import ChaosOptions, chaos

    points = tuple(p.strip() for p in args.points.split(",") if p.strip()) if args.points else None
    options = ChaosOptions(kills=args.kills, seed=args.seed, mode=args.mode, min_gap=args.min_gap,
                           max_gap=args.max_gap, point_share=args.point_share, processes=args.processes,
                           scratch=Path(args.scratch).resolve() if args.scratch else None,
                           points=points, run_timeout=args.run_timeout,
                           upgrade_to=Path(args.upgrade_to).resolve() if args.upgrade_to else None,
                           canary_checkpoints=args.canary_checkpoints, kills_per_upgrade=args.kills_per_upgrade)
    outcome = chaos(args.spec, options)
    if args.json:
        print(json.dumps(outcome.result.as_dict(), indent=2, default=str))
    else:
        print("\n".join(outcome.lines))
        print(f"  report: {outcome.report_html} ({outcome.report_json}); also {outcome.stored[1]}")
    return EXIT_OK if outcome.result.passed else EXIT_RUNTIME


def _table(rows: list[dict[str, object]]) -> None:
    """Rows as aligned text columns (a preview: every row is short)."""
    if not rows:
        return
    columns = list(rows[0])
    cells = [[str(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _cmd_state(args: argparse.Namespace) -> int:
    from barrierflow.ops import state

    if args.action == "schema":
        schema = state.state_schema(args.spec, checkpoint_id=args.checkpoint, stage=args.stage)
        if args.json:
            print(json.dumps(schema.as_dict(), indent=2))
            return EXIT_OK
        print(f"pipeline {schema.pipeline}: state of {schema.noun} {schema.checkpoint_id}")
        for stage in schema.stages:
            if not stage.operators:
                print(f"stage {stage.stage}: no state (batch {stage.batch_id})")
            for op in stage.operators:
                print(f"stage {stage.stage}: operator {op.operator_id} {op.name}, stores {', '.join(op.stores)}, "
                      f"{op.partitions} partitions (batch {stage.batch_id})")
                print(f"  key:   {op.key_schema}")
                print(f"  value: {op.value_schema}")
        return EXIT_OK
    if args.action == "query":
        result = state.state_query(args.spec, checkpoint_id=args.checkpoint, stage=args.stage,
                                   operator=args.operator, sql=args.sql, output=args.output, limit=args.limit)
        if args.json:
            print(json.dumps(result.as_dict(), indent=2))
            return EXIT_OK
        print(f"stage {result.stage}, checkpoint {result.checkpoint_id} (batch {result.batch_id}), operator "
              f"{result.operator_id}: {result.rows} rows")
        if result.output:
            print(f"  written to {result.output}")
        _table(result.preview)
        if result.truncated:
            print(f"  ... {result.rows - len(result.preview)} more rows (--limit, or --output PATH for all)")
        return EXIT_OK
    if args.action == "diff":
        diff = state.state_diff(args.spec, from_id=args.from_id, to_id=args.to_id, stage=args.stage,
                                operator=args.operator, output=args.output, sample=args.sample)
        if args.json:
            print(json.dumps(diff.as_dict(), indent=2))
            return EXIT_OK
        counts = ", ".join(f"{n} {kind}" for kind, n in diff.counts.items())
        print(f"stage {diff.stage}, operator {diff.operator_id}, checkpoint {diff.from_id} -> {diff.to_id}: "
              f"keys {counts}")
        if diff.output:
            print(f"  written to {diff.output}")
        for kind, rows in diff.samples.items():
            if rows:
                print(f"{kind} (first {len(rows)}):")
                _table(rows)
        return EXIT_OK
    stats = state.state_stats(args.spec, checkpoint_id=args.checkpoint, stage=args.stage, operator=args.operator,
                              top=args.top)
    if args.json:
        print(json.dumps(stats.as_dict(), indent=2))
        return EXIT_OK
    print(f"stage {stats.stage}, checkpoint {stats.checkpoint_id} (batch {stats.batch_id}), "
          f"{stats.operator.describe()}: {stats.keys} keys, {stats.bytes} bytes of state files")
    _table([{"partition": p["partition"], "keys": p["keys"], "bytes": p["bytes"]} for p in stats.partitions])
    print(f"largest keys (bytes of key and value as JSON, top {len(stats.largest)}):")
    _table(stats.largest)
    print("growth (bytes of state files a restore loads):")
    _table([{"checkpoint": g.checkpoint_id, "batch": g.batch_id, "bytes": g.state_bytes,
             "change": "-" if g.change is None else f"{g.change:+d}"} for g in stats.growth])
    return EXIT_OK


def _cmd_upgrade(args: argparse.Namespace) -> int:
    """``upgrade``: exit 0 for compatible or needs rewrite (``--dry-run``) or a completed upgrade,
    1 for incompatible (``--dry-run``) or a canary that failed and rolled back
    (UpgradeRolledBackError); 2 for unknown (``--dry-run`` without ``--assume-compatible``) and a
    refused upgrade (UserInputError)."""
    from barrierflow.ops.upgrade import UpgradeResult, upgrade

    outcome = upgrade(args.spec, args.new_spec, dry_run=args.dry_run, checkpoint_id=args.checkpoint,
                      drop_stages=args.drop_stages, canary_checkpoints=args.canary_checkpoints,
                      canary_compare=args.canary_compare, assume_compatible=args.assume_compatible)
    if isinstance(outcome, UpgradeResult):
        if args.json:
            print(json.dumps(outcome.as_dict(), indent=2))
            return EXIT_OK
        for stage, (was, now) in outcome.rescaled.items():
            print(f"stage {stage}: state rescaled {was} -> {now} partitions")
        for stage, change in outcome.value_columns.items():
            print(f"stage {stage}: aggregation state rewritten: {change}")
        for stage in outcome.rebuilt:
            print(f"stage {stage}: state rebuilt from its input, replayed to the savepoint")
        for stage in outcome.added:
            print(f"stage {stage}: added, starts on empty state")
        for stage in outcome.dropped:
            print(f"stage {stage}: dropped with its state")
        for stage in outcome.assumed:
            print(f"stage {stage}: compatibility unknown, assumed on your word (--assume-compatible); its state now "
                  "records the new spec's fingerprint, marked as assumed")
        rewritten = outcome.savepoint != outcome.source_savepoint
        made = (f"new savepoint {outcome.savepoint} ({outcome.location})" if rewritten
                else f"savepoint {outcome.savepoint} (nothing needed a rewrite)")
        verified = outcome.canary.get("verified") or []
        deep = outcome.canary.get("deep_verification") or "verified"
        canary = (f"its canary's checkpoints {verified} were committed ({deep})" if verified else "no canary was run")
        for compared in (outcome.canary.get("comparison") or {}).get("outputs", []):
            print(f"canary output of {compared['output']}: " + (
                f"{compared['stream_rows']} rows equal the batch recomputation for windows before "
                f"{compared['range']['end']} (held epochs {compared['held_epochs']})" if compared["ran"]
                else f"stream-vs-batch comparison not compared: {compared['reason']}"))
        if (outcome.canary.get("comparison") or {}).get("verdict") == "skipped":
            print("canary output: no stream-vs-batch comparison (--no-canary-compare)")
        print(f"pipeline {outcome.report.pipeline}: upgraded from savepoint {outcome.source_savepoint} (unchanged) to "
              f"{made}, restored for {args.new_spec} as attempt {outcome.attempt}; {canary}; in "
              f"{outcome.timings['total']:.1f} s; continue with 'barrierflow run {args.new_spec}'")
        return EXIT_OK
    report = outcome
    incompatible = report.verdict.value == "incompatible"
    unknown = report.verdict.value == "unknown" and not args.assume_compatible
    code = EXIT_RUNTIME if incompatible else EXIT_BAD_INPUT if unknown else EXIT_OK
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return code
    print(f"pipeline {report.pipeline}: {report.new_spec} over the state of {report.noun} {report.checkpoint_id} "
          f"of {report.spec}: {report.verdict.value.upper()}")
    for finding in report.graph:
        print(f"  {finding.verdict.value}: {finding.subject}: {finding.reason}")
    for stage in report.stages:
        print(f"  stage {stage.stage}: {stage.verdict.value}")
        for finding in stage.findings:
            print(f"    {finding.verdict.value}: {finding.subject}: {finding.reason}")
    if report.verdict.value == "needs rewrite":
        print(f"stop the pipeline with 'barrierflow stop {report.spec} --savepoint', then run 'barrierflow upgrade "
              f"{report.spec} --to {report.new_spec}' (it rewrites a rescale, value columns added with a declared "
              "default or dropped, a state rebuilt from its input, a stage added behind a new channel and a stage "
              "removed with --drop-stage NAME; it refuses what it does not rewrite yet, naming it: docs/upgrades.md)")
    by_metadata = [s.stage for s in report.stages if s.basis == "spark state metadata" and s.verdict.value != "unknown"]
    if by_metadata:
        print(f"stage{'s' if len(by_metadata) > 1 else ''} {', '.join(by_metadata)}: no recorded fingerprint; compared "
              "by Spark's state metadata (its operator metadata, state schemas and stored windows)")
    if report.unknown_stages:
        stages = ", ".join(report.unknown_stages)
        if args.assume_compatible:
            print(f"unknown stages {stages}: assumed compatible on your word (--assume-compatible); without --dry-run "
                  "the upgrade records the new spec's fingerprint with their state, marked as assumed")
        else:
            print(f"unknown is not compatible: the compatibility of {stages} cannot be decided (see above); if you "
                  f"know the new spec keeps the meaning of that state, proceed on your word with 'barrierflow upgrade "
                  f"{report.spec} --to {report.new_spec} --assume-compatible'", file=sys.stderr)
    return code


def _cmd_init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from barrierflow.ops.new_project import TEST_COMMAND, init_project

    project = init_project(args.name, Path.cwd(), source=args.source, sink=args.sink)
    print(f"created {project.folder}: {', '.join(project.files)}")
    print(f"test it:  cd {project.name} && {TEST_COMMAND}")
    servers = " (after the Kafka/PostgreSQL setup its README shows)" if "kafka" in (
        project.source, project.sink) or project.sink == "postgres" else ""
    print(f"run it:   cd {project.name} && barrierflow run {project.spec_path} --checkpoints 5{servers}")
    print(f"(with the Python barrierflow is installed in, {sys.executable}; deploying: {project.name}/README.md)")
    return EXIT_OK


def _not_py4j(record: logging.LogRecord) -> bool:
    """Py4J logs every failed call to the JVM (on the root logger, with a traceback): when the
    JVM dies that is a page of tracebacks before the one ``error:`` line that says so. Shown
    with ``--verbose`` only."""
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    try:
        args = _parser().parse_args(list(argv) if argv is not None else None)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not args.verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_py4j)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # kafka-python warns whenever one of its event-loop tasks runs over 0.1 s, which a loaded
    # driver does all the time; the line says nothing an operator can act on.
    logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not in the main thread (e.g. called from a test thread)
        pass
    handlers = {"run": _cmd_run, "checkpoints": _cmd_checkpoints,
                "restore": _cmd_restore, "reconcile": _cmd_reconcile, "verify": _cmd_verify,
                "retain": _cmd_retain, "savepoint": _cmd_savepoint, "stop": _cmd_stop, "skew": _cmd_skew,
                "rollup": _cmd_rollup, "recompute": _cmd_recompute, "quality": _cmd_quality,
                "validate": _cmd_validate, "chaos": _cmd_chaos, "init": _cmd_init,
                "state": _cmd_state, "upgrade": _cmd_upgrade, "lake": _cmd_lake}
    try:
        return handlers[args.command](args)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BarrierflowError as exc:
        if args.verbose:  # how it came about: the chain of causes (a dead JVM's Py4J errors)
            traceback.print_exception(exc, file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        print(f"interrupted at {datetime.now(UTC).isoformat(timespec='seconds')}", file=sys.stderr)
        return EXIT_RUNTIME
    except BrokenPipeError:
        # The reader of stdout went away (``barrierflow checkpoints SPEC | head``): what was left
        # to print has no reader. Point stdout at /dev/null so that the interpreter's final flush
        # does not raise again, and exit as a shell's pipeline expects (no traceback).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
