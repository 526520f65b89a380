"""Benchmarks that print numbers (never timed tests)."""

from pathlib import Path


def emit_table(table: str, markdown: str | None) -> None:
    """Print a benchmark's Markdown table, and also write it to ``markdown`` when given."""
    print(table)
    if markdown:
        Path(markdown).write_text(table + "\n", encoding="utf-8")
