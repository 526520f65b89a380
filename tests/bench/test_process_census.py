"""bench.process_census: every process a command starts, its CPU counted under its kind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.process_census import kind_of, main

#: Burns 0.3 s of its own CPU time (not wall time); with an argument, then runs that script too.
BURN = ("import subprocess, sys, time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.3:\n"
        "    pass\n"
        "if len(sys.argv) > 1:\n"
        "    subprocess.run([sys.executable, sys.argv[1]], check=True)\n")


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


def test_a_command_and_the_process_it_starts_are_both_counted(tmp_path: Path) -> None:
    script = tmp_path / "burn.py"
    script.write_text(BURN, encoding="utf-8")
    out = tmp_path / "census.json"
    assert main(["--interval", "0.05", "--json", str(out), "--", sys.executable, str(script), str(script)]) == 0
    figures = json.loads(out.read_text(encoding="utf-8"))
    python = figures["kinds"]["other Python (drivers, tests, command lines)"]
    assert python["processes"] == 2
    assert python["core_s"] >= 0.4  # 0.3 s each, less at most one interval of each after its last reading
