"""bench.process_census: every process a command starts, its CPU counted under its kind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.process_census import TICKS, Census, kind_of, main

#: Starts a grandchild that burns 0.3 s of its own CPU time (not wall time), says so on stdout
#: and then waits for stdin to close; prints the grandchild's pid and exits once its own stdin
#: closes, leaving the grandchild to init.
PARENT = ("import subprocess, sys\n"
          "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdin=subprocess.PIPE)\n"
          "print(child.pid, flush=True)\n"
          "sys.stdin.read()\n")
GRANDCHILD = ("import sys, time\n"
              "sys.stdin.readline()\n"
              "t = time.process_time()\n"
              "while time.process_time() - t < 0.3:\n"
              "    pass\n"
              "print('burned', flush=True)\n"
              "sys.stdin.read()\n")


@pytest.mark.parametrize(("comm", "line", "kind"), [
    ("python3.11", "/v/bin/python3.11 -m pyspark.daemon pyspark.sql.worker.plan_data_source_read", "Spark Python"),
    ("python3.11", "/v/bin/python3.11 -m pyspark.sql.streaming.python_streaming_source_runner", "Spark Python"),
    ("java", "java -Xms64m -Xmx384m -cp /c/kafka-server.jar kafka.Kafka /tmp/k/server.properties", "Kafka broker"),
    ("java", "java -Xmx128m -cp /v/pyspark/jars/* org.apache.spark.launcher.Main org.apache.spark.deploy.SparkSubmit",
     "spark-submit launcher"),
    ("java", "/usr/lib/jvm/bin/java -cp /v/pyspark/jars/* org.apache.spark.deploy.SparkSubmit --conf a=b pyspark-shell",
     "Spark JVMs"),
    ("airflow", "/v/bin/python3.11 /v/bin/airflow scheduler", "Airflow"),
    ("postgres", "postgres: checkpointer", "PostgreSQL"),
    ("java", "java -jar other.jar", "other JVMs"),
    ("jspawnhelper", "/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper 17.0.15 350:351:353", "other JVMs"),
    ("[pytest-xdist r", "[pytest-xdist running] tests/ops/test_stop.py::test_stop", "pytest processes"),
    ("python3.11", "/v/bin/python3.11 -m barrierflow.cli.main run spec.yaml", "other Python"),
    ("bash", "bash -c true", "other"),
])
def test_each_kind_of_process_is_told_apart(comm: str, line: str, kind: str) -> None:
    assert kind_of(comm, line).startswith(kind)


def test_a_process_is_followed_after_its_parent_died_and_its_cpu_counted() -> None:
    """Each step waits for the processes to say where they are: no reading depends on timing."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, GRANDCHILD], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdin is not None and parent.stdout is not None
    grandchild_pid = int(parent.stdout.readline())
    census = Census(parent.pid)
    census.read()  # both alive: the grandchild joins through its parent
    # A writer of the grandchild's stdin pipe of our own, so that it sees no end of input when its parent exits.
    go = open(f"/proc/{grandchild_pid}/fd/0", "w")
    try:
        parent.stdin.close()
        assert parent.wait(timeout=60) == 0  # the grandchild now belongs to init
        go.write("go\n")
        go.flush()
        assert parent.stdout.readline().strip() == "burned"  # it burned, and now waits on its stdin
        census.read()
        burned = [p for (pid, _), p in census.seen.items() if pid == grandchild_pid]
        assert len(burned) == 1 and burned[0].cpu_ticks / TICKS >= 0.29
        assert census.by_kind()["other Python (drivers, tests, command lines)"][0] == 2
        rows = {r["pid"]: r for r in census.processes()}
        assert rows[grandchild_pid]["parent"] == parent.pid  # as first seen, before init took it
        assert float(rows[grandchild_pid]["core_s"]) >= 0.29  # type: ignore[arg-type]
    finally:
        go.close()
        os.kill(grandchild_pid, signal.SIGKILL)


def test_the_command_line_runs_a_command_and_names_a_bad_one(tmp_path: Path, capsys: Any) -> None:
    out, listing = tmp_path / "census.json", tmp_path / "processes.json"
    assert main(["--json", str(out), "--processes", str(listing), "--", sys.executable, "-c", "print('ran')"]) == 0
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["exit"] == 0 and sum(k["processes"] for k in figures["kinds"].values()) >= 1
    assert [r["kind"] for r in json.loads(listing.read_text(encoding="utf-8"))] == [
        "other Python (drivers, tests, command lines)"]
    assert "ran" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--", str(tmp_path / "no-such-command")])
    assert "cannot start" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--interval", "0", "--", sys.executable, "-c", "pass"])
    assert "--interval must be a positive number" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--processes", str(tmp_path / "absent" / "p.json"), "--", sys.executable, "-c", "pass"])
    assert "--processes" in (err := capsys.readouterr().err) and "does not exist" in err
