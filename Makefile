# The commands of README.md. Each creates .venv and installs pinned requirements first.
#   make demo     run the demo pipeline (local Spark, local storage, built-in generator)
#   make demo-stages  the three-stage demo on the embedded Kafka-protocol broker (starts afresh)
#   make demo-cycle   the demo with a feedback loop (a cycle), same broker (starts afresh)
#   make install  .venv with the pinned Python requirements, and the pinned JVM artifacts (Apache Kafka,
#                 Spark's Kafka connector, Hadoop's S3A file system)
#                 from Maven Central, each verified against its sha256 in barrierflow/jvm/artifacts.lock
#   make test     lint + the whole test suite (what .ci/run calls); installs PostgreSQL and Chromium
#                 from Debian when they are missing
#   make test-quick  the contributors' inner loop: lint + the tests that start no Spark, Kafka,
#                 PostgreSQL or Airflow (docs/development.md)
#   make bench    the benchmarks (bench/, not part of the library) -> bench/results/latest.md
#   make bench-flink  barrierflow vs Flink SQL side by side (installs Flink into .venv-flink: make flink)
#   make bench-channels  the transport between stages: the older driver-side writer against the executors' producers (bench/channel_transport.py)
#   make bench-kafka  Kafka -> keyed totals -> discard beside the raw client ceiling, and side by side with
#                 Spark's connector, plain Spark and Flink SQL on the same topic (bench/kafka_source.py)
#   make airflow  Airflow (standalone) on 127.0.0.1 with dags/ and plugins/, home var/airflow
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt constraints.txt pyproject.toml | sha256sum | cut -c1-16)
FLINK_VENV := .venv-flink
FLINK_STAMP := $(FLINK_VENV)/.installed-$(shell cat requirements-flink.txt | sha256sum | cut -c1-16)
DEMO_CHECKPOINTS ?= 6
PYTEST_WORKERS ?= 2
AIRFLOW_PORT ?= 8080
# The scheduler's and triggerer's log servers (Airflow binds them to every interface).
AIRFLOW_LOG_PORT ?= $(shell echo $$(( $(AIRFLOW_PORT) + 1 )))
AIRFLOW_TRIGGER_LOG_PORT ?= $(shell echo $$(( $(AIRFLOW_PORT) + 2 )))
AIRFLOW_HOME_DIR := $(CURDIR)/var/airflow
# The specs `make airflow` serves: the repository's demo specs; `make airflow AIRFLOW_PIPELINES_DIR=DIR`
# serves yours (Airflow elsewhere reads $BARRIERFLOW_PIPELINES_DIR, default $BARRIERFLOW_HOME/pipelines).
AIRFLOW_PIPELINES_DIR ?= $(CURDIR)/include/pipelines

.PHONY: demo demo-stages demo-cycle demo-lakehouse test test-quick lint bench install jvm clean airflow chromium postgres flink bench-flink bench-channels bench-kafka bytecode

$(STAMP):
	@command -v java >/dev/null || { echo "error: Spark needs Java 17+ on PATH (apt-get install openjdk-17-jre-headless)"; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=24"
	$(BIN)/pip install --quiet -r requirements-dev.txt -c constraints.txt
	$(BIN)/pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

# The JVM artifacts: fetched into ~/.cache/barrierflow/maven (or $$BARRIERFLOW_JVM_CACHE) once, every jar
# verified against the lock on every run (a quarter of a second); a changed jar fails naming it.
jvm: $(STAMP)
	$(BIN)/python -m barrierflow.jvm install
	$(BIN)/python -m barrierflow.jvm helper

install: $(STAMP) jvm

# The shipped specs (include/pipelines/*.yaml) name their paths relative to the repository root
# (var/<pipeline>, include/expectations/...): a spec file's relative paths resolve against
# $$BARRIERFLOW_HOME when it is set, else the spec file's folder (docs/pipeline-spec.md).
demo demo-stages demo-cycle demo-lakehouse bench bench-flink bench-channels bench-kafka: export BARRIERFLOW_HOME ?= $(CURDIR)

demo: install
	$(BIN)/barrierflow run include/pipelines/demo.yaml --checkpoints $(DEMO_CHECKPOINTS)
	$(BIN)/barrierflow checkpoints list include/pipelines/demo.yaml

# The embedded broker keeps its channels in the work dir (var/stages-demo/work/embedded-broker),
# so a stopped or killed run restarts with the same `barrierflow run` command. The demo targets
# still start afresh: a second `make demo-stages` would otherwise restore the finished run and
# show nothing, and a demo must not depend on state an older version of the code left behind.
demo-stages: install
	rm -rf var/stages-demo
	$(BIN)/barrierflow run include/pipelines/stages.yaml --until-exhausted --duration 600
	$(BIN)/barrierflow checkpoints list include/pipelines/stages.yaml

demo-cycle: install
	rm -rf var/cycle-demo
	$(BIN)/barrierflow run include/pipelines/cycle.yaml --until-exhausted --duration 600
	$(BIN)/barrierflow checkpoints list include/pipelines/cycle.yaml

# A table pipeline on the embedded defaults (Iceberg, SQLite catalog in the work dir), run to the end
# of its bounded source, then every table as of the newest cut.
demo-lakehouse: install
	rm -rf var/demo-lakehouse
	$(BIN)/barrierflow run include/lakehouse/demo-lakehouse.yaml --until-exhausted --duration 600
	$(BIN)/barrierflow lake read include/lakehouse/demo-lakehouse.yaml

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

# The Checkpoints page's acceptance test drives Debian's chromium (headless).
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo "installing Debian's chromium for the UI tests" \
	       && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
	  || { echo "error: the UI tests need Chromium on PATH (apt-get install chromium)"; exit 2; }

# PostgreSQL's server for the sink and outage tests (they start their own on 127.0.0.1), unless
# BARRIERFLOW_TEST_POSTGRES_DSN names an external one.
postgres:
	@[ -n "$$BARRIERFLOW_TEST_POSTGRES_DSN" ] || command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo "installing Debian's PostgreSQL server for the tests" \
	       && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } \
	  || { echo "error: the PostgreSQL tests need its server (initdb, postgres, pg_ctl): apt-get install postgresql," \
	            "or set BARRIERFLOW_TEST_POSTGRES_DSN to a server with max_prepared_transactions > 0"; exit 2; }

# The repository's own modules compiled once: with PYTHONDONTWRITEBYTECODE set (as on these
# machines) every process would otherwise compile what it imports anew (each Spark driver, Python
# worker, Airflow task and DAG parse). A stale .pyc is never used: Python checks the source's
# size and time.
bytecode: install
	$(BIN)/python -m compileall -q -j 0 include dags plugins tests bench >/dev/null

test: lint chromium postgres bytecode
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -p no:cacheprovider --durations=30

# The inner loop: ruff, the import contracts and every test that starts no Spark, Kafka, PostgreSQL
# or Airflow (tests/conftest.py marks the others `services`, by the fixtures they use, their
# markers and the driver and server helpers their module uses). `make test` stays the whole suite.
test-quick: lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) -p no:cacheprovider -m "not services" -q --durations=10

bench: install
	$(BIN)/python -m bench --markdown bench/results/latest.md

# Generator stage -> channel -> keyed-totals stage, the old channel writer against this one
# (bench/results/channel-transport/: each run writes its record there); prints a table, asserts nothing.
bench-channels: install
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m bench.channel_transport

# The Kafka source against the raw client ceiling measured in the same run, and side by side with
# Spark's connector, plain Spark and Flink SQL (Flink's Kafka connector: the flink-kafka JVM set of
# `make install`) on the same topic (bench/results/kafka-source/, kafka-side-by-side/);
# prints tables, asserts nothing.
bench-kafka: install $(FLINK_STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m bench.kafka_source

# Flink in a virtual environment of its own (never in the main requirements), for
# `python -m bench --compare flink-sql` (make bench-flink).
$(FLINK_STAMP): requirements-flink.txt
	@command -v java >/dev/null || { echo "error: Flink needs Java 17+ on PATH"; exit 2; }
	@test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install --quiet -r requirements-flink.txt
	@rm -f $(FLINK_VENV)/.installed-* && touch $(FLINK_STAMP)

flink: $(FLINK_STAMP)

bench-flink: install $(FLINK_STAMP)
	$(BIN)/python -m bench --compare flink-sql --seconds 30 --rounds 3 --markdown bench/results/flink-latest.md

# Local Airflow: scheduler, DAG processor, triggerer and API server (`airflow standalone`) on
# 127.0.0.1:$(AIRFLOW_PORT), with this project's DAGs (of the specs in $(AIRFLOW_PIPELINES_DIR))
# and plugins (the Checkpoints page),
# SQLite metadata and its generated admin password in var/airflow (git-ignored). Ctrl-C stops it.
airflow: install
	@mkdir -p $(AIRFLOW_HOME_DIR)
	@echo "Airflow UI: http://127.0.0.1:$(AIRFLOW_PORT)/  (checkpoints: Browse -> Checkpoints)"
	@echo "Log in as 'admin'; the password is generated at the first start into"
	@echo "  $(AIRFLOW_HOME_DIR)/simple_auth_manager_passwords.json.generated"
	PATH="$(CURDIR)/$(BIN):$$PATH" \
	AIRFLOW_HOME=$(AIRFLOW_HOME_DIR) \
	AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__PLUGINS_FOLDER=$(CURDIR)/plugins \
	AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW__API__HOST=127.0.0.1 \
	AIRFLOW__API__PORT=$(AIRFLOW_PORT) \
	AIRFLOW__API__BASE_URL=http://127.0.0.1:$(AIRFLOW_PORT) \
	AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$(AIRFLOW_PORT)/execution/ \
	AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=$(AIRFLOW_LOG_PORT) \
	AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=$(AIRFLOW_TRIGGER_LOG_PORT) \
	BARRIERFLOW_HOME=$(CURDIR) \
	BARRIERFLOW_PIPELINES_DIR=$(AIRFLOW_PIPELINES_DIR) \
	$(BIN)/airflow standalone

clean:
	rm -rf var .pytest_cache
