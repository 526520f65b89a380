# The two commands of README.md. Both create .venv and install pinned requirements first.
#   make demo   run the demo pipeline (local Spark, local storage, built-in generator)
#   make test   lint + the whole test suite (what .ci/run calls)
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt constraints.txt pyproject.toml | sha256sum | cut -c1-16)
DEMO_CHECKPOINTS ?= 6
PYTEST_WORKERS ?= 2

.PHONY: demo test lint bench install clean

$(STAMP):
	@command -v java >/dev/null || { echo "error: Spark needs Java 17+ on PATH (apt-get install openjdk-17-jre-headless)"; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=24"
	$(BIN)/pip install --quiet -r requirements-dev.txt -c constraints.txt
	$(BIN)/pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/barrierflow run include/pipelines/demo.yaml --checkpoints $(DEMO_CHECKPOINTS)
	$(BIN)/barrierflow checkpoints list include/pipelines/demo.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

test: lint
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/barrierflow bench --markdown docs/benchmarks-latest.md

clean:
	rm -rf var .pytest_cache
