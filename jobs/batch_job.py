"""spark-submit entry point of the batch side: daily rollups and the stream-vs-batch comparison.

    spark-submit jobs/batch_job.py rollup --spec SPEC [--stage NAME] [--day YYYY-MM-DD] [--tag RUN_ID]
    spark-submit jobs/batch_job.py recompute --spec SPEC [--stage NAME] [--start ISO] [--end ISO] [--tag RUN_ID]

Only translates its arguments into ``barrierflow rollup SPEC ...`` / ``barrierflow recompute
SPEC ... --report-only`` (see ``barrierflow.cli.main``) and exits with the CLI's code: 0 ok,
2 bad input, 1 runtime failure. ``recompute`` exits 0 also when the output differs: the
report is stored in the checkpoint store (``reports/recompute-latest.json``) and the
DAG's ``compare`` task fails naming every difference. ``--tag`` is stored in the report so
that task reads the report of its own run. ``--stage``: for a pipeline of several stages, the
final stage (Parquet sink) whose output to work on (the DAGs of such a stage pass it).

When the ``barrierflow`` package is not installed in the interpreter spark-submit runs
(``PYSPARK_PYTHON``), the project's ``include/`` folder next to ``jobs/`` is put on ``sys.path``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batch_job.py", description="barrierflow batch jobs (spark-submit).")
    sub = parser.add_subparsers(dest="job", required=True)
    rollup = sub.add_parser("rollup", help="daily rollups of the committed output")
    recompute = sub.add_parser("recompute", help="recompute a closed event-time range and compare")
    for job in (rollup, recompute):
        job.add_argument("--spec", required=True, metavar="PATH", help="the pipeline spec YAML file")
        job.add_argument("--tag", default="", help="stored in the report")
        job.add_argument("--stage", default="", metavar="NAME", help="several stages: the final stage to work on")
    rollup.add_argument("--day", default="", metavar="YYYY-MM-DD", help="the UTC day (default: days with new output)")
    recompute.add_argument("--start", default="", metavar="ISO")
    recompute.add_argument("--end", default="", metavar="ISO")
    return parser


def cli_args(args: argparse.Namespace) -> list[str]:
    """The ``barrierflow`` CLI arguments for the parsed entry-point ``args`` (empty values are left out)."""
    argv = [args.job, args.spec, "--json"]
    if args.tag:
        argv += ["--tag", args.tag]
    if args.stage:
        argv += ["--stage", args.stage]
    if args.job == "rollup":
        return argv + (["--day", args.day] if args.day else [])
    argv.append("--report-only")
    for name in ("start", "end"):
        if getattr(args, name):
            argv += [f"--{name}", getattr(args, name)]
    return argv


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("barrierflow") is None:
        sys.path.insert(0, str(INCLUDE_DIR))
    from barrierflow.cli.main import main as cli_main

    return cli_main(cli_args(args))


if __name__ == "__main__":
    sys.exit(main())
