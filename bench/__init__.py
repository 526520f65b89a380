"""Benchmarks that print numbers (never timed tests): ``python -m bench`` (:mod:`bench.run`),
``make bench``; docs/benchmarks.md holds the current figures, bench/results/ every run. Not part
of the library (the wheel ships ``include/barrierflow`` only); a benchmark may import ``barrierflow``
and ``tests.support``."""

from pathlib import Path


def emit_table(table: str, markdown: str | None) -> None:
    """Print a benchmark's Markdown table, and also write it to ``markdown`` when given."""
    print(table)
    if markdown:
        Path(markdown).write_text(table + "\n", encoding="utf-8")
