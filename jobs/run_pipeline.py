"""spark-submit entry point: run one barrierflow pipeline spec.

    spark-submit jobs/run_pipeline.py --spec include/pipelines/demo.yaml [--duration S] [--checkpoints N]
                                      [--until-exhausted]

Only translates its arguments into ``barrierflow run SPEC ...`` (see
``barrierflow.cli.main``) and exits with the CLI's code: 0 ok, 2 bad input, 1 runtime
failure. ``--duration`` stops the job after that many seconds and ``--checkpoints`` after
that many completed checkpoints, and ``--until-exhausted`` once a bounded source was read to
its end and everything is committed; without any of them it runs until stopped.

When the ``barrierflow`` package is not installed in the interpreter spark-submit runs
(``PYSPARK_PYTHON``), the project's ``include/`` folder next to ``jobs/`` is put on
``sys.path``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run_pipeline.py", description="Run a barrierflow pipeline spec (spark-submit entry point)."
    )
    parser.add_argument("--spec", required=True, metavar="PATH", help="the pipeline spec YAML file")
    parser.add_argument("--duration", metavar="SECONDS", help="stop after this many seconds")
    parser.add_argument("--checkpoints", metavar="N", help="stop after N completed checkpoints")
    parser.add_argument("--until-exhausted", action="store_true",
                        help="stop once a bounded source is exhausted and everything is committed")
    return parser


def cli_args(args: argparse.Namespace) -> list[str]:
    """The ``barrierflow`` CLI arguments for the parsed entry-point ``args``."""
    argv = ["run", args.spec]
    if args.duration is not None:
        argv += ["--duration", args.duration]
    if args.checkpoints is not None:
        argv += ["--checkpoints", args.checkpoints]
    if args.until_exhausted:
        argv.append("--until-exhausted")
    return argv


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("barrierflow") is None:
        sys.path.insert(0, str(INCLUDE_DIR))
    from barrierflow.cli.main import main as cli_main

    return cli_main(cli_args(args))


if __name__ == "__main__":
    sys.exit(main())
