"""``barrierflow validate`` and ``init``: a spec checked, a project created.

Each command's parser sits beside its handler; :mod:`barrierflow.cli.main` dispatches.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from barrierflow.cli.exits import EXIT_OK, Subcommands

if TYPE_CHECKING:
    from barrierflow.ops.validate import StageShape


def add_validate(sub: Subcommands) -> None:
    """``barrierflow validate SPEC``."""
    validate = sub.add_parser("validate", help="validate a spec; for several stages show the graph and its cycles")
    validate.add_argument("spec")
    validate.add_argument("--json", action="store_true")
    validate.add_argument("--deep", action="store_true",
                          help="also import every stage's transformation and check it on its source's columns in "
                               "a local Spark session (output mode, watermark, columns, sink keys; no data read)")
    validate.set_defaults(handler=_cmd_validate)


def _cmd_validate(args: argparse.Namespace) -> int:
    from barrierflow.ops.validate import validate

    validation = validate(args.spec, deep=args.deep)
    summary, shapes = validation.summary, validation.shapes
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(validation.as_dict(), indent=2))
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


def add_init(sub: Subcommands) -> None:
    """``barrierflow init NAME``."""
    init = sub.add_parser("init", help="create a project in ./NAME: a pipeline spec, its package, a test, Airflow DAGs")
    init.add_argument("name", help="the pipeline's name; its package is the name with '-' as '_'")
    from barrierflow.scaffold.templates import SINKS, SOURCES

    init.add_argument("--source", choices=SOURCES, default=SOURCES[0],
                      help="what the pipeline reads: the built-in generator (default) or JSON records of a Kafka topic")
    init.add_argument("--sink", choices=SINKS, default=SINKS[0],
                      help="where it writes, exactly once: Parquet files (default), a PostgreSQL table, a Kafka topic, "
                           "an Apache Iceberg table or a Delta Lake table")
    init.set_defaults(handler=_cmd_init)


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
