"""``barrierflow checkpoints``, ``restore``, ``reconcile``, ``verify``, ``retain``, ``savepoint``: a pipeline's cuts.

Each command's parser sits beside its handler; :mod:`barrierflow.cli.main` dispatches.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC
from typing import TYPE_CHECKING

from barrierflow.cli.exits import EXIT_OK, EXIT_RUNTIME, ArgumentParser, Subcommands

if TYPE_CHECKING:
    from barrierflow.ops.checkpoints import CheckpointListing, CheckpointView
    from barrierflow.verification.choice import CheckpointRequest


def add_checkpoints(sub: Subcommands) -> None:
    """``barrierflow checkpoints list|show SPEC``."""
    chk = sub.add_parser("checkpoints", help="inspect checkpoints")
    chk_sub = chk.add_subparsers(dest="action", required=True, parser_class=ArgumentParser)
    lst = chk_sub.add_parser("list", help="list completed (and failed) checkpoints")
    lst.add_argument("spec")
    lst.add_argument("--json", action="store_true")
    show = chk_sub.add_parser("show", help="show one checkpoint's manifest")
    show.add_argument("spec")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    chk.set_defaults(handler=_cmd_checkpoints)


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
    """The cut, then each stage's part and its manifest field by field with its files, then its
    lakehouse tables (each one's snapshot id or version, or why the cut has none)."""
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
    if view.tables:
        print(f"  tables of this {view.noun} ({len(view.tables)}):")
        for table in view.tables:
            print(f"    {table.name}: {table.describe()}")


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


def add_restore(sub: Subcommands) -> None:
    """``barrierflow restore SPEC``."""
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
    restore.set_defaults(handler=_cmd_restore)


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


def add_reconcile(sub: Subcommands) -> None:
    """``barrierflow reconcile SPEC``."""
    reconcile = sub.add_parser("reconcile", help="finish in-doubt sink transactions")
    reconcile.add_argument("spec")
    reconcile.add_argument("--dry-run", action="store_true", help="show the decisions, change nothing")
    reconcile.add_argument("--json", action="store_true")
    reconcile.set_defaults(handler=_cmd_reconcile)


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


def add_verify(sub: Subcommands) -> None:
    """``barrierflow verify SPEC``."""
    verify = sub.add_parser("verify", help="verify checkpoints (structural; --deep: state + expectations)")
    verify.add_argument("spec")
    pick = verify.add_mutually_exclusive_group()
    pick.add_argument("--checkpoint", type=int, help="checkpoint id")
    pick.add_argument("--latest", type=int, metavar="N", help="the newest N checkpoints (default: all)")
    verify.add_argument("--deep", action="store_true",
                        help="also restore into a scratch dir, read the state and run the expectation suite")
    verify.add_argument("--json", action="store_true")
    verify.add_argument("--html", metavar="PATH", help="also write an HTML report to PATH")
    verify.set_defaults(handler=_cmd_verify)


def _cmd_verify(args: argparse.Namespace) -> int:
    from pathlib import Path

    from barrierflow.ops.verify import verify
    from barrierflow.verification.html import render_html

    outcome = verify(args.spec, checkpoint_id=args.checkpoint, latest=args.latest, deep=args.deep)
    if args.html:
        Path(args.html).write_text(render_html(outcome.pipeline, outcome.stage_reports), encoding="utf-8")
    if args.json:
        print(json.dumps(outcome.as_dict(), indent=2))
        return EXIT_RUNTIME if outcome.failed else EXIT_OK
    for r in outcome.reports:
        counts = (f"{r.passed_count}/{r.check_count} checks{f'; {r.deep_verdict()}' if r.deep else ''}; "
                  f"stages: {', '.join(r.stages)}")
        print(f"{outcome.noun} {r.checkpoint_id}: {'passed' if r.passed else 'FAILED'} ({counts})")
        for c in r.failures:
            print(f"  {c.name}: {c.message}" + (f" [{c.file}]" if c.file else ""))
        for c in r.checks:  # the cut's tables: what was compared, and what was not and why
            if c.name.startswith("table ") and c.passed:
                print(f"  {c.name}: {c.status.value}: {c.message}")
    if not outcome.reports:
        print(f"no {outcome.noun}s in {outcome.storage} to verify")
    return EXIT_RUNTIME if outcome.failed else EXIT_OK


def add_retain(sub: Subcommands) -> None:
    """``barrierflow retain SPEC``."""
    retain = sub.add_parser("retain", help="delete checkpoints and files the retention policy does not keep")
    retain.add_argument("spec")
    retain.add_argument("--dry-run", action="store_true", help="report what would be deleted, change nothing")
    retain.add_argument("--json", action="store_true")
    retain.set_defaults(handler=_cmd_retain)


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


def add_savepoint(sub: Subcommands) -> None:
    """``barrierflow savepoint SPEC``."""
    savepoint = sub.add_parser("savepoint", help="make a completed checkpoint a savepoint (never deleted)")
    savepoint.add_argument("spec")
    savepoint.add_argument("--checkpoint", type=int, help="checkpoint id (default: the latest completed)")
    savepoint.add_argument("--json", action="store_true")
    savepoint.set_defaults(handler=_cmd_savepoint)


def _cmd_savepoint(args: argparse.Namespace) -> int:
    from barrierflow.ops.savepoint import savepoint

    view = savepoint(args.spec, checkpoint_id=args.checkpoint)
    if args.json:
        print(json.dumps(view.as_dict(), indent=2))
        return EXIT_OK
    cid, pipeline = view.checkpoint_id, view.manifest.pipeline
    where = ", ".join(f"stage {name}: batch {m.spark_batch_id}" for name, m in view.stages.items())
    print(f"{view.noun} {cid} of {pipeline} is a savepoint in every stage ({where}); retention never deletes it. "
          f"Restore it with 'barrierflow restore {args.spec} --checkpoint {cid}'")
    return EXIT_OK
