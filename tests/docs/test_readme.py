"""The README starts with why and stays short: under 250 lines, a set-up of exactly two commands
that exist (`make demo`, `make test`), and
links into the repository (README.md and docs/*.md) that lead to a file and, with a `#anchor`, to
a heading of it. README.md and the docs speak to users: no "session N", "issue N" or commit hash
(the benchmark runs, kept as they were recorded, are in bench/results/, outside docs/).
Every command of the README and the docs is checked (and the cheap ones run) in
tests/docs/test_commands.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Pages whose text is the record of past runs, in their own words (and owner).
RUN_LOGS: set[str] = set()
#: Pages the README's tour links that are being written on other branches: a link to one is
#: accepted only while it does not exist at all (once it exists, its anchors are checked).
#: Delete an entry as soon as its page is on main.
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell)\s*\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INTERNAL_WORDS = re.compile(r"\b[Ss]ession [0-9]+|\b[Ii]ssue [0-9]+|\((?:commit )?[0-9a-f]{7,10}\)|`[0-9a-f]{7,10}`")


def user_pages() -> list[Path]:
    return [README, *sorted(p for p in (ROOT / "docs").glob("*.md")
                            if p.relative_to(ROOT).as_posix() not in RUN_LOGS)]


def section(text: str, heading_prefix: str) -> tuple[str, str]:
    """The heading line starting with ``heading_prefix`` and the text up to the next ``## ``."""
    match = re.search(rf"^({re.escape(heading_prefix)}[^\n]*)\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no heading starting with {heading_prefix!r}"
    return match.group(1), match.group(2)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCED.sub("", path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        base = slug(heading)
        name, n = base, 1
        while name in found:
            name, n = f"{base}-{n}", n + 1
        found.add(name)
    return found


def test_the_readme_is_under_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < 250, f"README.md has {lines} lines; move reference material to docs/"


def test_the_set_up_is_two_commands_that_the_makefile_has() -> None:
    heading, body = section(README.read_text(encoding="utf-8"), "## Set-up")
    blocks = SHELL_BLOCK.findall(body)
    commands = [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()]
    commands = [argv for argv in commands if argv]
    assert commands == [["make", "demo"], ["make", "test"]], commands
    assert "`make demo`" in heading and "`make test`" in heading and "two" in heading
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"the Makefile has no {target} target"
    assert re.search(r"^demo:.*\n\t\$\(BIN\)/barrierflow run include/pipelines/demo\.yaml", makefile,
                     re.MULTILINE), "make demo no longer runs the embedded default include/pipelines/demo.yaml"


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_into_the_repository_lead_somewhere(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCED.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_user_pages_name_no_sessions_issues_or_commits(page: Path) -> None:
    hits = [f"line {n}: {m.group(0)}" for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            for m in INTERNAL_WORDS.finditer(line)]
    assert not hits, f"{page.relative_to(ROOT)} speaks of the project's history, not to users: {hits}"


def test_the_slug_is_githubs() -> None:
    assert slug("PostgreSQL: `max_prepared_transactions`") == "postgresql-max_prepared_transactions"
    assert slug("The lease and fencing (across hosts)") == "the-lease-and-fencing-across-hosts"
    assert slug("One application, or one process per stage") == "one-application-or-one-process-per-stage"


def test_code_comments_name_no_issues_or_sessions() -> None:
    """Comments and docstrings state the code's contract, not the project's history: no "issue N"
    or "session N" in include/, dags/, plugins/, bench/ or the Makefile."""
    pattern = re.compile(r"\b[Ii]ssue [0-9]+|\b[Ss]ession [0-9]+")
    files = [ROOT / "Makefile", *(p for folder in ("include", "dags", "plugins", "bench")
                                  for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".yaml", ".yml", ".md"})]
    hits = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for p in files
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) for m in pattern.finditer(line)]
    assert not hits, hits


#: A figure of a table cell: a number with thousands separators or a decimal point.
FIGURE = re.compile(r"(?<![\d.,])(?:\d{1,3}(?:,\d{3})+|\d+\.\d+)(?![.,]?\d)")


def _benchmark_section(text: str, name: str) -> str | None:
    """The text under the ``##``/``###`` heading of docs/benchmarks.md that starts with ``name``,
    up to the next heading of the same or a higher level."""
    match = re.search(rf"^(#{{2,3}}) {re.escape(name)}[^\n]*\n", text, re.MULTILINE)
    if match is None:
        return None
    level = len(match.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[match.end():], re.MULTILINE)
    return text[match.end(): match.end() + end.start() if end else len(text)]


def test_every_readme_figure_is_in_the_benchmark_section_its_footnote_names() -> None:
    """Each figure of the README's comparison table is traceable: the row's footnote names a
    section of docs/benchmarks.md (or links a page of docs/ or a run record of bench/results/) that
    exists and holds that figure."""
    text = README.read_text(encoding="utf-8")
    notes_at = text.index("Measured on the 2-core development machine")
    notes = " ".join(text[notes_at: text.index("\n\n", notes_at)].split())
    footnotes = dict(re.findall(r"\[(\d+)\] (.*?)(?= \[\d+\] |\Z)", notes))
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and re.search(r"\[\d+\] \|", line)]
    assert len(rows) >= 6, "the README's comparison table has lost its measured rows"
    problems = []
    for row in rows:
        number = re.search(r"\[(\d+)\] \|", row).group(1)  # type: ignore[union-attr]
        note = footnotes.get(number)
        if note is None:
            problems.append(f"row [{number}] has no footnote")
            continue
        sources = []
        for name in re.findall(r"\(\"([^\"]+)\"\)", note):
            found = _benchmark_section(benchmarks, name)
            if found is None:
                problems.append(f"[{number}]: docs/benchmarks.md has no section {name!r}")
            else:
                sources.append(found)
        sources += [(ROOT / link).read_text(encoding="utf-8")
                    for link in re.findall(r"\]\(((?:docs|bench/results)/[^)#]+)\)", note)]
        if not sources:
            problems.append(f"[{number}]: the footnote names no section of docs/benchmarks.md and links no page")
            continue
        recorded = {m.group(0) for source in sources for m in FIGURE.finditer(source)}
        figures = [m.group(0) for cell in row.split("|")[2:] for m in FIGURE.finditer(cell)]
        assert figures or "0 / 0 / 0" in row, f"row [{number}] shows no figure: {row}"
        missing = [f for f in figures if f not in recorded]
        if missing:
            problems.append(f"[{number}]: {', '.join(missing)} not in the section(s) its footnote names")
    assert not problems, "; ".join(problems)
