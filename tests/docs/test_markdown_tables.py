"""Every Markdown table of the user documentation renders as a table: README.md, docs/*.md and
examples/**/README.md are read the way GitHub's Markdown (GFM) reads tables, and each table must
have a header, a delimiter row with as many cells, and rows with exactly that many cells.

GFM splits a table row on every ``|`` that is not escaped as ``\\|``, also inside a code span
(so a ``|`` in a cell's code must be written ``\\|``); a row with another cell count is cut or
padded by GitHub, and a row that follows no header (a table interrupted by a paragraph) is shown
as raw ``| a | b |`` text. Both are what this test refuses, naming the file and line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A delimiter row: cells of dashes with optional alignment colons.
DELIMITER = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def documents() -> list[Path]:
    """The Markdown files users read: README.md, docs/*.md, examples/**/README.md."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "examples").glob("**/README.md"))]
    return [path for path in found if path.is_file()]


def cells(row: str) -> list[str]:
    """The cells of a table row as GFM splits them: on every ``|`` not escaped by a backslash
    (code spans included), one leading and one trailing ``|`` being the row's edges."""
    text = row.strip()
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            current.append(text[i:i + 2])
            i += 2
            continue
        if char == "|":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    if text.startswith("|"):
        parts = parts[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        parts = parts[:-1]
    return parts


@dataclass(frozen=True)
class Problem:
    line: int
    message: str


def table_problems(text: str) -> list[Problem]:
    """Every row of ``text`` whose cell count differs from its table's header, and every row
    (a line starting with ``|``) that belongs to no table; fenced code blocks are skipped."""
    lines = text.splitlines()
    problems: list[Problem] = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if FENCE.match(lines[i]):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence or not line:
            i += 1
            continue
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if "|" in line and DELIMITER.match(following) and "-" in following:
            width = len(cells(line))
            if len(cells(following)) != width:
                problems.append(Problem(i + 2, f"delimiter row has {len(cells(following))} cells, "
                                               f"the header {width}"))
            i += 2
            # GFM: the table goes on until a blank line (or another block starts)
            while i < len(lines) and lines[i].strip() and not FENCE.match(lines[i]):
                row = lines[i].strip()
                if len(cells(row)) != width:
                    problems.append(Problem(i + 1, f"row has {len(cells(row))} cells, the header {width} "
                                                   f"(an unescaped | inside a cell? write \\|): {row[:80]}"))
                i += 1
            continue
        if line.startswith("|"):
            problems.append(Problem(i + 1, f"table row outside any table (no header and delimiter row "
                                           f"above it; shown as raw text): {line[:80]}"))
        i += 1
    return problems


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_markdown_table_row_has_its_headers_cell_count(path: Path) -> None:
    problems = table_problems(path.read_text(encoding="utf-8"))
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(
        f"  line {p.line}: {p.message}" for p in problems)


def test_the_documents_checked_include_the_readme_and_every_docs_page() -> None:
    checked = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert "README.md" in checked
    assert {"docs/pipeline-spec.md", "docs/exactly-once.md", "docs/airflow.md"} <= checked


def test_the_checker_refuses_a_table_interrupted_by_a_paragraph() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\nA paragraph.\n| 3 | 4 |\n"
    assert [p.line for p in table_problems(text)] == [6]


def test_the_checker_counts_cells_as_github_does() -> None:
    assert cells(r"| `a\|b` | c |") == [r" `a\|b` ", " c "]
    assert cells("| `a|b` | c |") == [" `a", "b` ", " c "]  # an unescaped | splits a code span too
    good = "| field | meaning |\n|---|---|\n| `x\\|y` | either |\n"
    bad = "| field | meaning |\n|---|---|\n| `x|y` | either |\n"
    assert table_problems(good) == []
    assert [p.line for p in table_problems(bad)] == [3]
    assert table_problems("```\n| not | a table |\n```\n") == []
