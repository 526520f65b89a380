"""CPU ticks of a process's live descendants, from ``/proc/<pid>/stat`` (Linux).

Contract: read-only; a process that ends while it is read is left out; ticks are clock ticks
(``os.sysconf("SC_CLK_TCK")`` per second).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

__all__ = ["descendant_ticks", "process_stats", "process_ticks"]


def process_stats(proc: Path = Path("/proc")) -> Iterator[tuple[Path, str, list[str]]]:
    """Every live process's ``/proc`` entry, name (``comm``) and the fields of its ``stat``
    after the name (``fields[1]`` is the parent's pid, ``fields[11:13]`` utime and stime,
    ``fields[19]`` the start time)."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = entry.joinpath("stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        name, _, rest = stat.partition("(")[2].rpartition(") ")
        yield entry, name, rest.split()


def process_ticks(pid: int, proc: Path = Path("/proc")) -> int:
    """utime + stime of the live process ``pid`` (ticks).

    Raises:
        OSError: there is no such process (it ended, or never was).
    """
    stat = proc.joinpath(str(pid), "stat").read_text(encoding="utf-8", errors="replace")
    fields = stat.rpartition(") ")[2].split()
    return int(fields[11]) + int(fields[12])


def descendant_ticks(root: int, *, reaped_children: bool = False) -> dict[int, int]:
    """utime + stime of every live descendant of ``root``, by pid (ticks); with
    ``reaped_children`` also the CPU of each one's own reaped children (cutime + cstime)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    last = 15 if reaped_children else 13
    for entry, _, fields in process_stats():
        if len(fields) < last:
            continue
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(f) for f in fields[11:last])
    out: dict[int, int] = {}
    for pid, used in ticks.items():
        parent = parents.get(pid)
        while parent is not None and parent > 1:
            if parent == root:
                out[pid] = used
                break
            parent = parents.get(parent)
    return out
