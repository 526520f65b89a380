"""What the crash tests' drivers cost, and whether a run is CPU-bound (a probe, not a test).

    .venv/bin/python -m tests.scenarios.driver_cost crash mid_epoch@1 mid_epoch@3 mid_sink_commit@3
        one crashed driver of the random crash test's Parquet pipeline per crash point (a new
        pipeline each), printing the machine's CPU time (core-seconds, all processes: the
        driver's Python, its JVM and Spark's Python workers) and the wall time it took
    .venv/bin/python -m tests.scenarios.driver_cost busy -- bash .ci/run
        runs the command, printing every 15 s how busy the machine's cores were (in %), and
        the mean at the end
    .venv/bin/python -m tests.scenarios.driver_cost cpu -- .venv/bin/pytest tests/x.py -n 0 -p no:cacheprovider
        runs the command and prints the CPU time (core-seconds) of it and of every process under
        it, including the JVMs a SIGKILLed driver leaves behind (this process is their child
        subreaper and reaps them): the figure to compare before and after a change on a busy
        machine, where wall times are noise

Figures are the whole machine's: run it with nothing else running.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.scenarios.harness import crashed_run, windowed_spec


def _busy_jiffies() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def crash_costs(points: list[str]) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for point in points:
        folder = Path(tempfile.mkdtemp(prefix="driver-cost-"))
        spec = windowed_spec(folder, {"name": "out", "type": "parquet", "path": f"file://{folder / 'out'}"},
                             records=6000, per_batch=100)
        busy, started = _busy_jiffies()[0], time.monotonic()
        run = crashed_run(spec, point)
        cpu = (_busy_jiffies()[0] - busy) / hz
        print(f"{point}: exit {run.returncode}, CPU {cpu:.1f} core-s, wall {time.monotonic() - started:.1f} s",
              flush=True)


def busy_while(command: list[str], every: float = 15.0) -> int:
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        busy, total = _busy_jiffies()
        while not done.wait(every):
            now_busy, now_total = _busy_jiffies()
            samples.append(100.0 * (now_busy - busy) / max(1, now_total - total))
            print(f"[busy] {len(samples) * every:.0f} s: {samples[-1]:.0f} %", file=sys.stderr, flush=True)
            busy, total = now_busy, now_total

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    code = subprocess.run(command, check=False).returncode
    done.set()
    watcher.join()
    if samples:
        print(f"[busy] mean {sum(samples) / len(samples):.0f} % over {len(samples)} samples", file=sys.stderr)
    return code


def cpu_of(command: list[str], linger: float = 60.0) -> int:
    """Run ``command`` as this process's child, adopt its orphans (PR_SET_CHILD_SUBREAPER) and
    wait for them (up to ``linger`` seconds after the command ended); print the CPU time of all."""
    import ctypes
    import resource

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (Linux)
    started = time.monotonic()
    process = subprocess.Popen(command)
    code, wall, deadline = 1, 0.0, None
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:
            break
        if pid == process.pid:
            code, wall = os.waitstatus_to_exitcode(status), time.monotonic() - started
            deadline = time.monotonic() + linger
        elif pid == 0:
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.2)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] exit {code}, wall {wall:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} core-s "
          f"(user {usage.ru_utime:.1f}, sys {usage.ru_stime:.1f})", file=sys.stderr)
    return code


def main(argv: list[str]) -> int:
    if argv[:1] == ["crash"] and len(argv) > 1:
        crash_costs(argv[1:])
        return 0
    if argv[:2] == ["busy", "--"] and len(argv) > 2:
        return busy_while(argv[2:])
    if argv[:2] == ["cpu", "--"] and len(argv) > 2:
        return cpu_of(argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
