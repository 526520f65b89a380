"""``barrierflow run``, ``stop`` and ``chaos``: running a pipeline, stopping it, running it under kills.

Each command's parser sits beside its handler; :mod:`barrierflow.cli.main` dispatches.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from barrierflow.cli.exits import EXIT_OK, EXIT_RUNTIME, Subcommands
from barrierflow.errors import UserInputError
from barrierflow.spec.durations import parse_duration_seconds

if TYPE_CHECKING:
    from barrierflow.ops.run import Progress, StartupPhase
    from barrierflow.ops.stop import StopOutcome


def add_run(sub: Subcommands) -> None:
    """``barrierflow run SPEC``."""
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
    run.set_defaults(handler=_cmd_run)


def _write_progress(line: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[2K" + line)
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _stages_progress_line(p: Progress) -> str:
    """The progress line of several stages: per stage batch, rec/s and epoch, then the last
    completed global checkpoint."""
    stages = " | ".join(f"{s.stage}: batch={s.batch_id if s.batch_id is not None else '-'} "
                        f"rec/s={s.records_per_second:,.0f} epoch={s.epoch}" for s in p.stages)
    return (f"{stages} | global_checkpoint={p.last_completed if p.last_completed is not None else '-'} "
            f"failed={p.failed}")


def _phase_line(phase: StartupPhase) -> None:
    """A step of the run's start (the restore), on the progress line until the first batch."""
    _write_progress(f"starting: {phase.message}")


def _progress_line(p: Progress) -> None:
    """The one live progress display of ``run``: the run's figures for one stage, every
    stage's for several."""
    if len(p.stages) > 1:
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
    from barrierflow.ops.run import freshness_lines, run, run_stage

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
    for line in freshness_lines(result.freshness, stages=count):
        print(f"  {line}")
    for stage, letters in outcome.stage_dead_letters.items():
        print(f"  stage {stage}: dead letters: {letters.count} ({letters.uri})")
    if outcome.stop is not None:
        print(_stop_line(outcome.pipeline, outcome.stop, args.spec))
    return EXIT_OK


def add_stop(sub: Subcommands) -> None:
    """``barrierflow stop SPEC [--savepoint]``."""
    stop = sub.add_parser("stop", help="stop the running pipeline (on any host sharing its checkpoint storage); "
                                       "--savepoint: after one more checkpoint, kept as a savepoint")
    stop.add_argument("spec")
    stop.add_argument("--savepoint", action="store_true",
                      help="take one more checkpoint first, let every sink commit it, keep it as a savepoint")
    stop.add_argument("--timeout", default="10m", help="how long to wait for the stop (default 10m; e.g. 90s, 5m)")
    stop.add_argument("--json", action="store_true")
    stop.set_defaults(handler=_cmd_stop)


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
        print(json.dumps(result.as_dict(), indent=2))
        return EXIT_OK
    print(_stop_line(result.pipeline, result.outcome, args.spec))
    return EXIT_OK


def add_chaos(sub: Subcommands) -> None:
    """``barrierflow chaos SPEC --kills N``."""
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
    chaos.add_argument("--kill-kinds", choices=["host"], metavar="host",
                       help="host: lose the host of the pipeline's running Airflow launch instead (its launcher's "
                            "whole process tree frozen and SIGKILLed: no clean shutdown, no exit record, no released "
                            "lease) --kills times, --min-gap to --max-gap s apart, and wait for the launch task to "
                            "relaunch it (a restart: block needed; run it on the launcher's host)")
    chaos.add_argument("--freeze-seconds", type=float, default=0.0, metavar="S",
                       help="--kill-kinds host: keep the tree frozen this long before the kill (the lease TTL shows "
                            "the watch a lost host's stale heartbeat exactly)")
    chaos.add_argument("--relaunch-timeout", type=float, default=600.0, metavar="S",
                       help="--kill-kinds host: longest wait for the relaunched pipeline's next checkpoint (s)")
    chaos.add_argument("--json", action="store_true")
    chaos.set_defaults(handler=_cmd_chaos)


def _cmd_chaos(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.kill_kinds == "host":
        return _cmd_host_chaos(args)
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


def _cmd_host_chaos(args: argparse.Namespace) -> int:
    from barrierflow.ops.host_chaos import lose_launch_hosts

    result = lose_launch_hosts(args.spec, kills=args.kills, seed=args.seed, min_gap=args.min_gap,
                               max_gap=args.max_gap, freeze_seconds=args.freeze_seconds,
                               timeout=args.relaunch_timeout)
    print(json.dumps(result.as_dict(), indent=2) if args.json else "\n".join(result.lines()))
    return EXIT_OK if result.passed else EXIT_RUNTIME
