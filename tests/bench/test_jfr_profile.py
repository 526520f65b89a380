"""bench/jfr_profile.py: a real JFR recording of a small JVM read back by method and area, and the
modes side by side (a benchmark's profile: nothing about speed is asserted)."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from bench.jfr_profile import HotMethods, hot_methods, render_profile

BUSY = """
public class Busy {
    static long spin(long n) { long x = 0; for (long i = 0; i < n; i++) { x += i * 31 ^ (x >>> 3); } return x; }
    public static void main(String[] a) {
        long s = 0;
        for (int round = 0; round < 400; round++) { s += spin(2_000_000); }
        System.out.println(s);
    }
}
"""


@pytest.mark.skipif(shutil.which("jfr") is None,
                    reason="the JDK's jfr tool (openjdk-17-jdk-headless) is not installed: only bench --jfr "
                           "needs it, Spark runs on the JRE")
def test_a_recording_is_read_back_by_the_method_that_ran(tmp_path: Path) -> None:
    """A JVM that spends its time in one method: that method tops the samples, and every sample
    is counted once in some area."""
    source = tmp_path / "Busy.java"
    source.write_text(BUSY, encoding="utf-8")
    recording = tmp_path / "busy.jfr"
    subprocess.run(["java", f"-XX:StartFlightRecording=filename={recording},settings=profile", str(source)],
                   check=True, capture_output=True, timeout=300)
    hot = hot_methods(recording)
    assert hot.samples > 0
    assert hot.top.most_common(1)[0][0] == "Busy.spin", hot.top.most_common(5)
    assert sum(hot.areas.values()) == hot.samples
    assert hot.areas["other"] >= hot.top["Busy.spin"]  # Busy is in none of the Spark areas


def test_the_modes_stand_side_by_side_per_second_of_run() -> None:
    without = HotMethods(100, Counter({"a.B.run": 60, "c.D.go": 40}), Counter({"state store": 30, "other": 70}))
    with_abs = HotMethods(150, Counter({"a.B.run": 60, "py4j.X.call": 90}),
                          Counter({"state store": 30, "py4j (calls from the driver's Python)": 90, "other": 30}))
    table = render_profile({"no checkpoints": without, "ABS 1 s": with_abs}, {"no checkpoints": 10.0, "ABS 1 s": 30.0},
                           ["no checkpoints", "ABS 1 s"], top=2)
    assert "| all | 10.0 | 5.0 |" in table
    assert "| state store | 3.0 | 1.0 |" in table
    assert "| py4j (calls from the driver's Python) | 0.0 | 3.0 |" in table
    # the two methods of the largest per-second rates summed over the modes, largest first
    assert table.index("`a.B.run` | 6.0 | 2.0 |") < table.index("`c.D.go` | 4.0 | 0.0 |")
    assert "py4j.X.call" not in table.split("Top methods")[1]


def test_a_sample_counts_in_the_area_of_the_frame_nearest_the_top() -> None:
    from bench.jfr_profile import area_of

    task = ["org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider.put",
            "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIteratorForCodegenStage2.next",
            "org.apache.spark.storage.BlockManager.get", "org.apache.spark.executor.Executor$TaskRunner.run"]
    assert area_of(task) == "state store"
    assert area_of(task[1:]) == "generated code and operators"
    assert area_of(["java.net.SocketInputStream.read", "org.apache.spark.api.python.PythonRunner.read"]) \
        == "Python runner (socket to Python workers)"
    assert area_of(["java.lang.Thread.sleep"]) == "other"
