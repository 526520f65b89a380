"""What every benchmark run records about itself, and where: :class:`RunRecord` and :func:`report`.

A run starts with :meth:`RunRecord.start` (the command line, the repository's commit from
:func:`bench.provenance.commit`, the UTC start time, the machine's cores and its load average)
and ends with :func:`report`, which takes the load average again, prints one header line::

    <what>, <YYYY-MM-DD HH:MM> UTC, commit <commit>, <N> cores, load average <a> at the start,
    <b> at the end, <R> round(s)

(one line; a run of fewer than :data:`bench.spread.MIN_ROUNDS` rounds says there that it is a
trial), then the benchmark's table, and writes two files (:meth:`RunRecord.write`):

* ``<stem>.md``: the command in backticks, the header, the table's lines;
* ``<stem>.json``: ``scenario``, ``what``, ``command``, ``commit``, ``started`` (ISO 8601 with
  its UTC offset), ``cores``, ``load_average`` (``[start, end]``), ``rounds`` and ``figures``:
  the benchmark's own figures, every round's and every sample's values as measured (not only
  the medians the table shows). Floats that are not finite are written as ``null``.

The stem is ``<results_dir>/<YYYY-MM-DD-HHMM>[-<suffix>]`` (the start, UTC); when a file of
that stem exists, ``-2``, ``-3`` ... is added, so no record is ever overwritten. A benchmark's
``--markdown FILE`` puts the record at ``FILE`` and ``FILE`` with ``.json`` instead (overwriting
them, as ``--markdown`` always did); ``results_dir=None`` without it writes nothing (tests).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.provenance import commit
from bench.spread import rounds_note

__all__ = ["RESULTS", "RunRecord", "command_line", "free_stem", "jsonable", "report"]

#: bench/results/: each benchmark writes its records into a folder of its own there.
RESULTS = Path(__file__).resolve().parent / "results"
_ROOT = RESULTS.parents[1]


def free_stem(results_dir: Path, started: datetime, suffix: str = "") -> Path:
    """``results_dir/<YYYY-MM-DD-HHMM>[-suffix]`` of ``started`` (in UTC), with ``-2``, ``-3`` ...
    added while a ``.md`` or ``.json`` of that stem exists: a run never overwrites the record of
    another that started in the same minute."""
    base = f"{started.astimezone(UTC):%Y-%m-%d-%H%M}" + (f"-{suffix}" if suffix else "")
    stem, number = results_dir / base, 1
    while stem.with_suffix(".md").exists() or stem.with_suffix(".json").exists():
        number += 1
        stem = results_dir / f"{base}-{number}"
    return stem


def command_line(argv: Sequence[str] | None = None) -> str:
    """``argv`` (default ``sys.argv``) as a shell command: a program under the repository's
    ``bench/`` is shown as the ``python -m`` command that runs it (``bench/__main__.py`` as
    ``python -m bench``, ``bench/soak.py`` as ``python -m bench.soak``), anything else as given."""
    args = list(sys.argv if argv is None else argv) or ["python"]
    program = Path(args[0]).resolve()
    head = shlex.quote(args[0])
    if program.suffix == ".py" and program.is_relative_to(_ROOT / "bench"):
        parts = program.relative_to(_ROOT).with_suffix("").parts
        head = "python -m " + ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
    return " ".join([head, *(shlex.quote(a) for a in args[1:])])


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: dataclasses as dicts, tuples as lists, mapping keys as
    strings, non-finite floats as None, datetimes in ISO 8601, anything else unknown as its
    ``str``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


@dataclass
class RunRecord:
    """What one benchmark run ran: captured at its start (:meth:`start`), the load average at
    its end added by :meth:`finish` (module docstring)."""

    scenario: str
    command: str
    commit: str
    #: The run's start, timezone-aware (UTC).
    started: datetime
    cores: int
    load_start: float
    load_end: float | None = None

    @classmethod
    def start(cls, scenario: str, command: str | None = None, *, announce: bool = True) -> RunRecord:
        """Capture the start of a run of ``scenario`` (``command``: the command line, default
        :func:`command_line`) and, with ``announce``, say in one line on stderr what starts."""
        record = cls(scenario=scenario, command=command if command is not None else command_line(),
                     commit=commit(), started=datetime.now(UTC), cores=os.cpu_count() or 1,
                     load_start=os.getloadavg()[0])
        if announce:
            print(f"{record.command}: commit {record.commit}, {record.started:%Y-%m-%d %H:%M} UTC, {record.cores} "
                  f"cores, load average {record.load_start:.1f}", file=sys.stderr, flush=True)
        return record

    def finish(self) -> None:
        """Take the load average at the end (once: later calls keep the first figure)."""
        if self.load_end is None:
            self.load_end = os.getloadavg()[0]

    def end_load(self) -> float:
        """The load average at the end, taken now unless :meth:`finish` took it before."""
        self.finish()
        assert self.load_end is not None
        return self.load_end

    def header(self, what: str, rounds: int) -> str:
        """The one-line header (module docstring); the load at the end is taken if not yet."""
        return (f"{what}, {self.started:%Y-%m-%d %H:%M} UTC, commit {self.commit}, {self.cores} cores, load average "
                f"{self.load_start:.1f} at the start, {self.end_load():.1f} at the end, {rounds} round(s)"
                f"{rounds_note(rounds)}")

    def document(self, what: str, rounds: int, figures: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON record (module docstring) as a dict of JSON values."""
        return {"scenario": self.scenario, "what": what, "command": self.command, "commit": self.commit,
                "started": self.started.isoformat(timespec="seconds"), "cores": self.cores,
                "load_average": [self.load_start, self.end_load()], "rounds": rounds, "figures": jsonable(figures)}

    def stem(self, results_dir: Path, suffix: str = "") -> Path:
        """:func:`free_stem` of this run's start."""
        return free_stem(results_dir, self.started, suffix)

    def write(self, what: str, rounds: int, lines: Sequence[str], figures: Mapping[str, Any], *,
              results_dir: Path | None, suffix: str = "",
              markdown: str | Path | None = None) -> tuple[Path, Path] | None:
        """Write the ``.md`` and ``.json`` records (module docstring): at ``markdown`` when
        given, else under ``results_dir`` (created if missing, never overwriting); nothing when
        both are None. Returns the two paths written, or None."""
        if markdown is not None:
            md = Path(markdown)
        elif results_dir is not None:
            results_dir.mkdir(parents=True, exist_ok=True)
            md = self.stem(results_dir, suffix).with_suffix(".md")
        else:
            return None
        md.parent.mkdir(parents=True, exist_ok=True)
        text = "\n".join([f"`{self.command}`", "", self.header(what, rounds), "", *lines]) + "\n"
        md.write_text(text, encoding="utf-8")
        data = json.dumps(self.document(what, rounds, figures), indent=1, allow_nan=False) + "\n"
        md.with_suffix(".json").write_text(data, encoding="utf-8")
        return md, md.with_suffix(".json")


def report(record: RunRecord, what: str, rounds: int, lines: Sequence[str], figures: Mapping[str, Any], *,
           results_dir: Path | None, suffix: str = "", markdown: str | Path | None = None,
           echo: bool = True) -> tuple[Path, Path] | None:
    """End a run: print the header line, then (``echo``) the table's ``lines``, write the
    records (:meth:`RunRecord.write`) and say where. Returns the paths written, or None."""
    print(record.header(what, rounds))
    if echo:
        print("\n".join(["", *lines]))
    written = record.write(what, rounds, lines, figures, results_dir=results_dir, suffix=suffix, markdown=markdown)
    if written is not None:
        print(f"written: {written[0]}, {written[1]}", flush=True)
    return written
