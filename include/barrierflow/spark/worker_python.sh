#!/bin/sh
# The Python of the Spark workers of a driver barrierflow starts with a local master
# (PYSPARK_PYTHON, see barrierflow.spark.session.python_worker_env): runs
# $BARRIERFLOW_WORKER_PYTHON with the arguments given, untouched, without the zipped copies of
# pyspark and py4j that Spark puts first on every worker's PYTHONPATH ($SPARK_HOME/python/lib/*.zip).
#
# Python compiles modules imported from a zip on every import (it cannot cache their bytecode),
# so each Python worker process a driver starts (a daemon per worker module, the streaming
# source runner, a data source worker) spends about 0.35 s of CPU compiling pyspark, many
# seconds on a loaded machine, where Spark gives a worker 10 s to connect back. With pip's
# pyspark, SPARK_HOME is the installed package itself ($SPARK_HOME/__init__.py exists) and the
# zips are copies of it, so the workers import the same code from site-packages, where it is
# compiled once. Under any other SPARK_HOME (a Spark distribution) PYTHONPATH is left as it is.
set -eu
set -f  # PYTHONPATH entries are split on ':' below, never glob-expanded
: "${BARRIERFLOW_WORKER_PYTHON:?the Python to run (barrierflow sets it with PYSPARK_PYTHON)}"
if [ -n "${SPARK_HOME:-}" ] && [ -f "$SPARK_HOME/__init__.py" ] && [ -n "${PYTHONPATH:-}" ]; then
    kept=
    old_ifs=$IFS
    IFS=:
    for entry in $PYTHONPATH; do
        case $entry in
            "$SPARK_HOME"/python/lib/*.zip) ;;
            *) kept=${kept:+$kept:}$entry ;;
        esac
    done
    IFS=$old_ifs
    PYTHONPATH=$kept
    export PYTHONPATH
fi
exec "$BARRIERFLOW_WORKER_PYTHON" "$@"
