"""``barrierflow state`` and ``upgrade``: reading a cut's state, and changing the spec over it.

Each command's parser sits beside its handler; :mod:`barrierflow.cli.main` dispatches.
"""

from __future__ import annotations

import argparse
import json
import sys

from barrierflow.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME, ArgumentParser, Subcommands


def add_state(sub: Subcommands) -> None:
    """``barrierflow state schema|query|diff|stats SPEC``."""
    state = sub.add_parser("state", help="read a completed checkpoint's state (Spark's state readers, on a scratch "
                                         "copy): schema, query, diff, stats")
    state_sub = state.add_subparsers(dest="action", required=True, parser_class=ArgumentParser)
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
    for command in (st_query, st_diff):
        command.add_argument("--variable", metavar="NAME",
                             help="a keyed function's operator (transformWithState): the state variable to read "
                                  "(required when it has several; 'timers': its registered timers)")
    st_stats.add_argument("--top", type=int, default=10, metavar="N", help="largest keys shown (default 10)")
    state.set_defaults(handler=_cmd_state)


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
                                   operator=args.operator, sql=args.sql, output=args.output, limit=args.limit,
                                   variable=args.variable)
        if args.json:
            print(json.dumps(result.as_dict(), indent=2))
            return EXIT_OK
        variable = f", state variable {result.variable}" if result.variable else ""
        print(f"stage {result.stage}, checkpoint {result.checkpoint_id} (batch {result.batch_id}), operator "
              f"{result.operator_id}{variable}: {result.rows} rows")
        if result.output:
            print(f"  written to {result.output}")
        _table(result.preview)
        if result.truncated:
            print(f"  ... {result.rows - len(result.preview)} more rows (--limit, or --output PATH for all)")
        return EXIT_OK
    if args.action == "diff":
        diff = state.state_diff(args.spec, from_id=args.from_id, to_id=args.to_id, stage=args.stage,
                                operator=args.operator, output=args.output, sample=args.sample,
                                variable=args.variable)
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
    if stats.variables is not None:
        ttl = f"ttl {stats.ttl_seconds:g} s" if stats.ttl_seconds is not None else "no ttl"
        watermark = "no watermark" if stats.watermark_ms is None else f"watermark {_instant(stats.watermark_ms)}"
        expired = "-" if stats.expired is None else str(stats.expired)
        live = "-" if stats.live is None else str(stats.live)
        print(f"keyed state: {live} live keys, {expired} expired (a timer at or below the watermark, cleared by the "
              f"next batch), {stats.timers if stats.timers is not None else 0} timers; {ttl}, {watermark}")
        _table([{"variable": v["name"], "kind": v["kind"], "rows": v["rows"]} for v in stats.variables])
    _table([{"partition": p["partition"], "keys": p["keys"], "bytes": p["bytes"]} for p in stats.partitions])
    print(f"largest keys (bytes of key and value as JSON, top {len(stats.largest)}):")
    _table(stats.largest)
    print("growth (bytes of state files a restore loads):")
    _table([{"checkpoint": g.checkpoint_id, "batch": g.batch_id, "bytes": g.state_bytes,
             "change": "-" if g.change is None else f"{g.change:+d}"} for g in stats.growth])
    return EXIT_OK


def _instant(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def add_upgrade(sub: Subcommands) -> None:
    """``barrierflow upgrade SPEC --to NEW_SPEC``."""
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
    upgrade.set_defaults(handler=_cmd_upgrade)


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
