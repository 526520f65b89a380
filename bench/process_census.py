"""Where a command's CPU goes, by kind of process: a census of every process it starts.

    python -m bench.process_census [--interval 0.25] [--json FILE] [--processes FILE] -- COMMAND [ARGS...]

Runs ``COMMAND`` and reads ``/proc`` every ``--interval`` seconds until it ends. A process
belongs to the census when its parent did when it was first seen (the command itself to begin
with), so a process whose parent died (a SIGKILLed driver's JVM, re-parented to init) is still
followed. Each process, told apart by its pid and start time, is classified by its command line
when it was last seen (a ``bash`` that exec'd ``java`` counts as the JVM), and its user + system
CPU at its last reading is counted. Printed: per kind, the processes and their core-seconds,
with the command's wall time and the machine's busy core-seconds over the run (``/proc/stat``)
beside them.

What it misses: CPU a process used after its last reading (at most ``--interval`` seconds of
it) and processes that start and end between two readings. Linux only. Reading ``/proc`` costs
about 1 % of a core at the default interval (measured on 2 cores with about 400 processes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.proc_stat import process_stats

__all__ = ["KINDS", "Census", "Seen", "kind_of", "main"]

TICKS = os.sysconf("SC_CLK_TCK")

#: The kinds, in the order the rules are tried: (kind, words any of which in the command line makes it that kind).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Spark Python workers (daemons, forked workers, streaming source runners)",
     ("pyspark.daemon", "pyspark.worker", "python_streaming_source_runner")),
    ("Kafka broker JVMs", ("kafka.Kafka", "kafka.tools.StorageTool")),
    ("spark-submit launcher JVMs", ("org.apache.spark.launcher.Main",)),
    ("Spark JVMs (drivers, test sessions)", ("org.apache.spark.deploy.SparkSubmit", "pyspark-shell")),
    ("Airflow", ("/airflow ", "airflow.", "[airflow")),
    ("PostgreSQL", ("postgres",)),
    ("S3 endpoint (moto)", ("moto.server",)),
)


def kind_of(comm: str, command_line: str) -> str:
    """The census kind of a process with name ``comm`` and ``command_line``."""
    text = f"{comm} {command_line}"
    for kind, words in KINDS:
        if any(word in text for word in words):
            return kind
    if comm.startswith(("pytest", "[pytest")) or command_line.startswith("[pytest"):
        return "pytest processes (xdist workers, renamed as they run)"
    if comm in ("java", "jspawnhelper") or command_line.split(" ", 1)[0].endswith(("/java", "/jspawnhelper")):
        return "other JVMs (and the JDK's process-spawn helper)"
    if comm.startswith("python") or "python" in command_line.split(" ", 1)[0]:
        return "other Python (drivers, tests, command lines)"
    return "other"


@dataclass
class Seen:
    """One process as last read."""

    comm: str
    command_line: str
    cpu_ticks: int = 0
    parent: int = 0


@dataclass
class Census:
    """The processes of one command, by (pid, start time)."""

    root: int
    seen: dict[tuple[int, int], Seen] = field(default_factory=dict)

    def read(self, proc: Path = Path("/proc")) -> None:
        """One reading of every process; new ones join when their parent belongs."""
        ours = {pid for pid, _ in self.seen} | {self.root}
        for entry, comm, fields in process_stats(proc):
            pid, parent, started = int(entry.name), int(fields[1]), int(fields[19])
            key = (pid, started)
            process = self.seen.get(key)
            if process is None:
                if pid != self.root and parent not in ours:
                    continue
                process = self.seen[key] = Seen(comm, "", parent=parent)
                ours.add(pid)
            if process.comm != comm or not process.command_line:
                process.comm = comm
                try:
                    raw = (entry / "cmdline").read_bytes()
                except OSError:
                    raw = b""
                process.command_line = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            process.cpu_ticks = int(fields[11]) + int(fields[12])

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """Per kind: processes and core-seconds, most CPU first."""
        totals: dict[str, list[float]] = {}
        for process in self.seen.values():
            entry = totals.setdefault(kind_of(process.comm, process.command_line), [0, 0.0])
            entry[0] += 1
            entry[1] += process.cpu_ticks / TICKS
        return {k: (int(n), round(s, 1)) for k, (n, s) in sorted(totals.items(), key=lambda kv: -kv[1][1])}

    def processes(self) -> list[dict[str, object]]:
        """Every process seen, most CPU first: pid, parent pid (when first seen), kind, command
        line and core-seconds."""
        rows = [{"pid": pid, "parent": s.parent, "kind": kind_of(s.comm, s.command_line), "comm": s.comm,
                 "command_line": s.command_line, "core_s": round(s.cpu_ticks / TICKS, 2)}
                for (pid, _), s in self.seen.items()]
        return sorted(rows, key=lambda r: -float(r["core_s"]))  # type: ignore[arg-type]


def _busy_ticks() -> int:
    fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:]
    return sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))  # all but idle and iowait


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.process_census", description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between readings of /proc")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--processes", type=Path,
                        help="also write every process (pid, parent, kind, command line, core-s) to this JSON file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if not args.interval > 0:
        parser.error(f"--interval must be a positive number of seconds, got {args.interval}")
    for option, path in (("--json", args.json), ("--processes", args.processes)):
        if path is not None and not path.resolve().parent.is_dir():
            parser.error(f"{option} {path}: its folder {path.resolve().parent} does not exist; create it or "
                         "give a file in an existing folder")
    busy, started = _busy_ticks(), time.monotonic()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        parser.error(f"cannot start {command[0]!r}: {exc.strerror or exc}; give a command on PATH or its path")
    census = Census(child.pid)
    while child.poll() is None:
        census.read()
        time.sleep(args.interval)
    census.read()
    wall, machine = time.monotonic() - started, (_busy_ticks() - busy) / TICKS
    kinds = census.by_kind()
    counted = sum(s for _, s in kinds.values())
    print(f"{' '.join(command)}: exit {child.returncode}, {wall:.0f} s wall, {counted:.0f} core-s counted, "
          f"machine busy {machine:.0f} core-s ({os.cpu_count()} cores)")
    print(f"{'kind':<72} {'processes':>9} {'core-s':>8} {'share':>6}")
    for kind, (n, seconds) in kinds.items():
        print(f"{kind:<72} {n:>9} {seconds:>8.1f} {seconds / counted if counted else 0:>6.1%}")
    if args.json:
        args.json.write_text(json.dumps({"command": command, "exit": child.returncode, "wall_s": round(wall, 1),
                                         "machine_busy_core_s": round(machine, 1),
                                         "kinds": {k: {"processes": n, "core_s": s} for k, (n, s) in kinds.items()}},
                                        indent=2) + "\n", encoding="utf-8")
    if args.processes:
        args.processes.write_text(json.dumps(census.processes(), indent=1) + "\n", encoding="utf-8")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
