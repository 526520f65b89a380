"""Where a JVM's CPU goes, per benchmark mode: Java Flight Recorder recordings of the driver JVM
taken around each run, and their execution samples summed by method.

A benchmark that compares modes on one SparkSession (``bench --scenario checkpoint-cost
--jfr DIR``) starts a recording named after the run before it and stops it into
``DIR/<round>-<mode>.jfr`` after it (``jcmd <pid> JFR.start`` / ``JFR.stop``, settings
``profile``: a Java stack sample of each running thread every 10-20 ms). :func:`hot_methods`
reads one file with the JDK's ``jfr`` tool and counts the samples by the method on top of the
stack and by the area of the frame nearest the top that has one (:data:`AREAS`); :func:`render_profile` puts the modes
side by side as samples per second of run, so a mode that makes the JVM do more work shows it in
the method that does it.

Contract: read-only on the JVM apart from the recordings it starts and stops; needs ``jcmd`` and
``jfr`` on PATH (the JDK's). A sample is a thread seen running Java code, not a CPU second:
compare the modes' rows, not a row against the JVM's CPU time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from barrierflow.errors import BarrierflowError, UserInputError

__all__ = ["AREAS", "HotMethods", "Recording", "area_of", "hot_methods", "render_profile"]

#: The areas a checkpoint could add work to, by the class-name prefixes of their frames; a sample
#: counts in the area of the frame nearest the top of its stack that has one (:func:`area_of`).
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("state store", ("org.apache.spark.sql.execution.streaming.state.", "org.rocksdb.")),
    ("Python runner (socket to Python workers)", ("org.apache.spark.api.python.",
                                                  "org.apache.spark.sql.execution.python.")),
    ("py4j (calls from the driver's Python)", ("py4j.",)),
    ("streaming progress and listeners", ("org.apache.spark.sql.streaming.StreamingQueryProgress",
                                          "org.apache.spark.sql.execution.streaming.ProgressReporter",
                                          "org.apache.spark.sql.streaming.StreamingQueryListener",
                                          "org.json4s.")),
    ("Spark's checkpoint logs (offsets, commits)", ("org.apache.spark.sql.execution.streaming.HDFSMetadataLog",
                                                    "org.apache.spark.sql.execution.streaming.CheckpointFileManager")),
    ("file system calls", ("org.apache.hadoop.fs.", "java.io.File", "sun.nio.fs.", "sun.nio.ch.FileChannelImpl")),
    ("shuffle", ("org.apache.spark.shuffle.", "org.apache.spark.storage.")),
    ("generated code and operators", ("org.apache.spark.sql.catalyst.expressions.GeneratedClass",
                                      "org.apache.spark.sql.execution.")),
)
JFR_SETTINGS = "profile"


@dataclass
class HotMethods:
    """The execution samples of one recording: in all, by top method, by area (:data:`AREAS`)."""

    samples: int = 0
    top: Counter[str] = field(default_factory=Counter)
    areas: Counter[str] = field(default_factory=Counter)

    def add(self, other: HotMethods) -> None:
        self.samples += other.samples
        self.top.update(other.top)
        self.areas.update(other.areas)


class Recording:
    """A JFR recording of the JVM ``pid`` named ``name``; :meth:`stop` writes it to ``path``."""

    def __init__(self, pid: int, name: str, path: Path) -> None:
        self.pid, self.name, self.path = pid, name, path

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _jcmd(self.pid, "JFR.start", f"name={self.name}", f"settings={JFR_SETTINGS}")

    def stop(self) -> Path:
        _jcmd(self.pid, "JFR.stop", f"name={self.name}", f"filename={self.path}")
        return self.path


def _jcmd(pid: int, *args: str) -> None:
    tool = shutil.which("jcmd")
    if tool is None:
        raise UserInputError("--jfr needs the JDK's jcmd on PATH (apt-get install openjdk-17-jdk-headless)")
    done = subprocess.run([tool, str(pid), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0 or "error" in done.stdout.lower():
        raise BarrierflowError(f"jcmd {pid} {' '.join(args)} failed: {(done.stdout + done.stderr).strip()}")


def _frame_name(frame: Mapping[str, object]) -> str:
    method = frame.get("method") or {}
    assert isinstance(method, Mapping)
    owner = method.get("type") or {}
    assert isinstance(owner, Mapping)
    return f"{str(owner.get('name', '?')).replace('/', '.')}.{method.get('name', '?')}"  # jfr prints a/b/C


def hot_methods(path: Path) -> HotMethods:
    """The execution samples of the recording at ``path`` by top method and by area."""
    tool = shutil.which("jfr")
    if tool is None:
        raise UserInputError("reading a JFR recording needs the JDK's jfr tool on PATH (the JDK's bin)")
    done = subprocess.run([tool, "print", "--json", "--stack-depth", "64", "--events", "jdk.ExecutionSample",
                           str(path)], capture_output=True, text=True, check=True)
    events = json.loads(done.stdout)["recording"]["events"]
    out = HotMethods()
    for event in events:
        frames = ((event.get("values") or {}).get("stackTrace") or {}).get("frames") or []
        if not frames:
            continue
        names = [_frame_name(f) for f in frames]
        out.samples += 1
        out.top[names[0]] += 1
        out.areas[area_of(names)] += 1
    return out


def area_of(names: Sequence[str]) -> str:
    """The area (:data:`AREAS`) of a stack, top frame first: that of the frame nearest the top
    that belongs to one (of a frame in several, the first listed), else ``other``."""
    for name in names:
        for area, prefixes in AREAS:
            if name.startswith(prefixes):
                return area
    return "other"


def render_profile(by_mode: Mapping[str, HotMethods], seconds: Mapping[str, float], modes: Sequence[str],
                   top: int = 15) -> str:
    """The modes side by side: samples per second of run by area, then the ``top`` methods of
    all modes together (by the sum of their per-second rates)."""
    def rate(hot: HotMethods, count: int, mode: str) -> str:
        return f"{count / seconds[mode]:.1f}" if seconds.get(mode) else "-"

    head = "| | " + " | ".join(f"{m}: samples/s" for m in modes) + " |"
    rule = "|---|" + "---:|" * len(modes)
    lines = ["JVM execution samples per second of run (JFR, settings profile; summed over the measured runs):",
             "", head, rule,
             "| all | " + " | ".join(rate(by_mode[m], by_mode[m].samples, m) for m in modes) + " |"]
    areas = [a for a, _ in AREAS] + ["other"]
    for area in areas:
        lines.append(f"| {area} | " + " | ".join(rate(by_mode[m], by_mode[m].areas[area], m) for m in modes) + " |")
    weight: Counter[str] = Counter()
    for m in modes:
        for name, count in by_mode[m].top.items():
            if seconds.get(m):
                weight[name] += count / seconds[m]
    lines += ["", f"Top methods (top of stack), the {top} most sampled:", "", head.replace("| |", "| method |"), rule]
    for name, _ in weight.most_common(top):
        lines.append(f"| `{name}` | " + " | ".join(rate(by_mode[m], by_mode[m].top[name], m) for m in modes) + " |")
    return "\n".join(lines)
