"""Static checks of docker-compose.yml (there is no Docker engine in CI): valid against the
Compose Specification's JSON schema (vendored in deploy/compose-spec/), the services of the
multi-machine shape on the project image, images pinned, published ports, healthchecks and
start-up ordering on health, named volumes declared, secrets only from .env, and every
environment variable the code reads either set for the driver and the executors or listed here
as optional with the reason."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
COMPOSE_SCHEMA = ROOT / "deploy" / "compose-spec" / "compose-spec.json"
DOCKERFILE = "deploy/image/Dockerfile"

AIRFLOW_SERVICES = {"airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
SPARK_SERVICES = {"spark-master", "spark-worker"}
#: Every service that runs barrierflow code: the project image.
PROJECT_IMAGE_SERVICES = AIRFLOW_SERVICES | {"airflow-init"} | SPARK_SERVICES
REQUIRED_SERVICES = PROJECT_IMAGE_SERVICES | {"airflow-db", "kafka", "minio", "minio-init", "sink-db", "iceberg-rest"}
#: Services that run once and exit (no healthcheck; dependants wait for successful completion).
ONE_SHOT_SERVICES = {"airflow-init", "minio-init"}
#: The driver runs in the scheduler (LocalExecutor, spark-submit in client mode), the executors
#: on the workers: both need what the code reads.
DRIVER, EXECUTORS = "airflow-scheduler", "spark-worker"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|KEY", re.IGNORECASE)
REQUIRED_SUBSTITUTION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:\?[^}]+\}$")
# ${VAR}, ${VAR:-default}, ${VAR:?message}; `$$` is compose's escape for a literal `$`.
VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
DOCUMENTED_PORT = re.compile(r"^#\s+(\d+)\s+([a-z0-9-]+)\s")
#: A pinned tag: a version with at least major.minor (``17.6-bookworm``, ``4.1.0``), a MinIO
#: release stamp, or a digest. Never ``latest`` or a bare major (``postgres:17``).
PINNED_IMAGE = re.compile(r"^[a-z0-9./-]+(:(\d+\.\d+[\w.-]*|RELEASE\.\d{4}-\d{2}-\d{2}T[\w-]+)|@sha256:[0-9a-f]{64})$")

#: What the code reads from the environment (found by :func:`variables_the_code_reads`):
#: either set for the driver and the executors below, or listed here with why it is not needed.
REQUIRED_VARIABLES = {
    "BARRIERFLOW_HOME": "where relative paths in specs resolve (spec loader, DAG file, plugin)",
    "PYSPARK_PYTHON": "the Python of the executors' Python workers: the image's virtualenv",
    "AWS_ENDPOINT_URL_S3": "the S3 endpoint of the checkpoint store (storage/s3.py)",
    "AWS_REGION": "the S3 client's region (storage/s3.py)",
    # Not found by the scan: boto3 reads them.
    "AWS_ACCESS_KEY_ID": "S3 credentials, read by boto3",
    "AWS_SECRET_ACCESS_KEY": "S3 credentials, read by boto3",
}
OPTIONAL_VARIABLES = {
    "AWS_ENDPOINT_URL": "the endpoint of every AWS service; AWS_ENDPOINT_URL_S3 is set instead",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "unset: the configured endpoint is used",
    "BARRIERFLOW_PIPELINES_DIR": "default $BARRIERFLOW_HOME/pipelines; the Airflow services set it to the image's "
                                 "demo specs (include/pipelines), the executors never read it",
    "BARRIERFLOW_ASSET_POLL_SECONDS": "default 10",
    "BARRIERFLOW_EMBEDDED_BROKER_JAVA_OPTIONS": "unset: the embedded broker's default JVM options (the compose "
                                                "services use a Kafka service, not the embedded broker)",
    "BARRIERFLOW_RECOVERY_POKE_SECONDS": "default 30",
    "BARRIERFLOW_LAUNCH_WATCH_SECONDS": "default 10 (how often the launch's trigger looks at the running pipeline)",
    "BARRIERFLOW_SUPERVISED_BY": "set by the detached launcher for the spark-submits it supervises",
    "BARRIERFLOW_SPARK_CONN_ID": "default spark_default (AIRFLOW_CONN_SPARK_DEFAULT is set)",
    "BARRIERFLOW_LEASE_TTL_SECONDS": "default in barrierflow/lease",
    "BARRIERFLOW_CHANNEL_SERVERS": "set by `run --processes` for the stage processes it starts",
    "BARRIERFLOW_SUPERVISOR_PID": "set by `run --processes` for the stage processes it starts",
    "BARRIERFLOW_LEASE_FENCE": "set by `run --processes` for the stage processes it starts (its lease's fence)",
    "BARRIERFLOW_CRASH_AT": "fault injection of the crash tests only",
    "BARRIERFLOW_JVM_CACHE": "default ~/.cache/barrierflow/maven; only the embedded Kafka broker reads the jars, "
                             "and the stack runs its own Kafka service",
    "BARRIERFLOW_MAVEN_REPOSITORY": "default Maven Central; read by `python -m barrierflow.jvm install` only",
    "GX_ANALYTICS_ENABLED": "set by the code itself (setdefault) before importing Great Expectations",
    "PGHOST": "only describes a DSN without a host; BARRIERFLOW_SINK_DSN names it",
    "PGPORT": "only describes a DSN without a port; BARRIERFLOW_SINK_DSN names it",
    "PGDATABASE": "only describes a DSN without a database; BARRIERFLOW_SINK_DSN names it",
    "PYSPARK_DRIVER_PYTHON": "set by the image (and defaulted by the code to its own interpreter)",
    "PYSPARK_GATEWAY_PORT": "set by spark-submit for the driver",
    "SPARK_LOCAL_IP": "set by the code for local masters only",
    "SPARK_HOME": "unset: pip's pyspark; read to decide whether a local driver's Python workers may skip Spark's zips",
    "BARRIERFLOW_SHARED_WORK_DIR": "unset: the stack runs the LocalExecutor, whose tasks all run on one host, so a "
                                   "relaunch after a lost launch reads the work dirs where they are",
    "BARRIERFLOW_K8S_TOKEN_FILE": "default: the pod's service-account token; read only for a Kubernetes master, "
                                  "the stack's Spark is a standalone cluster",
    "BARRIERFLOW_K8S_CA_FILE": "default: the pod's service-account CA; read only for a Kubernetes master, "
                               "the stack's Spark is a standalone cluster",
    "BARRIERFLOW_WORKER_PYTHON": "set by the code itself, for a local driver's worker launcher only (the image sets "
                                 "PYSPARK_PYTHON, so the launcher is not used there)",
}
#: Where the code that runs in the stack lives (barrierflow/testing/, the test doubles, never runs there).
CODE_DIRS = ("include/barrierflow", "dags", "jobs", "plugins")
ENV_READS = (
    re.compile(r"""(?:environ\.get|getenv|environ\.setdefault)\(\s*["']([A-Z][A-Z0-9_]*)["']"""),
    re.compile(r"""environ\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\]"""),
    re.compile(r"""["']([A-Z][A-Z0-9_]*)["']\s+(?:not\s+)?in\s+os\.environ"""),
    # Module constants naming a variable: TTL_ENV = "BARRIERFLOW_LEASE_TTL_SECONDS"
    re.compile(r"""^[A-Z_]*ENV[A-Z_]*\s*(?::[^=\n]+)?=\s*["']([A-Z][A-Z0-9_]*)["']""", re.MULTILINE),
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def strings_in(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings_in(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings_in(item)]
    return [value] if isinstance(value, str) else []


def documented_ports() -> dict[int, str]:
    """``host port -> service`` from the 'Host ports' comment block at the top of the file."""
    ports: dict[int, str] = {}
    in_block = False
    for line in COMPOSE_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("# Host ports"):
            in_block = True
        elif in_block:
            match = DOCUMENTED_PORT.match(line)
            if not match:
                break
            ports[int(match.group(1))] = match.group(2)
    return ports


def schema_errors(validator: jsonschema.protocols.Validator, document: Any) -> list[str]:
    return [f"{'/'.join(map(str, error.absolute_path)) or '(top level)'}: {error.message}"
            for error in validator.iter_errors(document)]


def variables_the_code_reads() -> dict[str, set[str]]:
    """``variable -> files`` of every environment variable read by the code that runs in the stack."""
    found: dict[str, set[str]] = {}
    for folder in CODE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("include/barrierflow/testing/"):
                continue
            text = path.read_text(encoding="utf-8")
            for pattern in ENV_READS:
                for name in pattern.findall(text):
                    found.setdefault(name, set()).add(relative)
    return found


def test_valid_against_the_compose_specification(
        compose: dict[str, Any], schema_validator: jsonschema.protocols.Validator) -> None:
    assert schema_errors(schema_validator, compose) == []


@pytest.mark.parametrize(("mutate", "complaint"), [
    (lambda c: c["services"]["kafka"].update(healthchek={}), "healthchek"),
    (lambda c: c["services"]["spark-worker"]["depends_on"]["spark-master"].update(condition="healthy"), "healthy"),
    (lambda c: c["services"]["sink-db"].update(ports="5433:5432"), "5433:5432"),
], ids=["misspelt key", "unknown depends_on condition", "ports not a list"])
def test_the_schema_check_rejects_a_broken_file(
        compose: dict[str, Any], schema_validator: jsonschema.protocols.Validator, mutate: Any, complaint: str) -> None:
    broken = copy.deepcopy(compose)
    mutate(broken)
    errors = schema_errors(schema_validator, broken)
    assert errors and any(complaint in error for error in errors), errors


def test_required_services_exist(services: dict[str, Any]) -> None:
    assert REQUIRED_SERVICES <= set(services), REQUIRED_SERVICES - set(services)


def test_barrierflow_code_runs_on_the_project_image(services: dict[str, Any]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    for name in PROJECT_IMAGE_SERVICES:
        service = services[name]
        assert service["image"] == f"barrierflow:{version}", f"{name}: the project image, tagged with its version"
        assert service["build"] == {"context": ".", "dockerfile": DOCKERFILE}, name
        assert (ROOT / service["build"]["dockerfile"]).is_file()
    assert {s.get("image") for n, s in services.items() if n not in PROJECT_IMAGE_SERVICES}.isdisjoint(
        {f"barrierflow:{version}"}), "only the services listed in PROJECT_IMAGE_SERVICES use the project image"


def test_images_are_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        assert PINNED_IMAGE.match(service["image"]), f"{name}: pin {service['image']!r} to a version"
    assert not PINNED_IMAGE.match("postgres:17") and not PINNED_IMAGE.match("minio/minio:latest")


def test_spark_standalone_master_and_two_scalable_workers(services: dict[str, Any]) -> None:
    master, worker = services["spark-master"], services["spark-worker"]
    assert master["command"][:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert master["command"][master["command"].index("--port") + 1] == "7077"
    assert worker["command"][:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert worker["command"][-1] == "spark://spark-master:7077"
    assert worker["deploy"]["replicas"] == 2
    # `docker compose up --scale spark-worker=N` needs replicas that do not collide.
    for key in ("container_name", "hostname", "ports"):
        assert key not in worker, f"spark-worker: {key} would stop --scale"


def test_published_ports_are_documented_and_local_only(services: dict[str, Any]) -> None:
    documented = documented_ports()
    assert documented, "the 'Host ports' comment block is missing"
    published: dict[int, str] = {}
    for name, service in services.items():
        for mapping in service.get("ports", []):
            assert isinstance(mapping, str), f"{name}: use the short 'IP:HOST:CONTAINER' syntax"
            ip, host, _container = mapping.split(":")
            assert ip == "127.0.0.1", f"{name}: {mapping} must bind 127.0.0.1 only"
            published[int(host)] = name
    assert published == documented


def test_long_running_services_have_healthchecks(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name in ONE_SHOT_SERVICES:
            assert service.get("restart") == "no", f"{name} runs once"
            continue
        check = service.get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
        assert check["test"][0] in {"CMD", "CMD-SHELL"}, name


def test_depends_on_waits_for_health_or_completion(services: dict[str, Any]) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions"
        for dependency, spec in depends_on.items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            expected = (
                "service_completed_successfully" if dependency in ONE_SHOT_SERVICES else "service_healthy"
            )
            assert spec.get("condition") == expected, f"{name} -> {dependency}"
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        assert "airflow-db" in services[name]["depends_on"], name
    for name in AIRFLOW_SERVICES:
        assert "airflow-init" in services[name]["depends_on"], name
    assert {"spark-master", "spark-worker", "kafka", "minio-init", "sink-db"} <= set(
        services["airflow-scheduler"]["depends_on"])
    assert "spark-master" in services["spark-worker"]["depends_on"]
    assert "minio" in services["minio-init"]["depends_on"]


def test_named_volumes_are_declared_and_used(compose: dict[str, Any], services: dict[str, Any]) -> None:
    used = set()
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0] if isinstance(mount, str) else mount.get("source", "")
            assert not source.startswith((".", "/")), f"{name}: {mount} is a bind mount; use a named volume"
            used.add(source)
    assert used == set(compose["volumes"]), "declare every named volume under `volumes:`, and use every one"


def test_the_driver_and_the_executors_share_the_work_dirs(services: dict[str, Any]) -> None:
    """file:// paths of the specs resolve under BARRIERFLOW_HOME/var: the same volume for both."""
    for name in (DRIVER, EXECUTORS):
        assert "barrierflow-var:/opt/airflow/var" in services[name]["volumes"], name
        assert environment(services[name])["BARRIERFLOW_HOME"] == "/opt/airflow", name


def test_every_variable_the_code_reads_is_set_or_optional(services: dict[str, Any]) -> None:
    read = variables_the_code_reads()
    assert {"BARRIERFLOW_HOME", "AWS_ENDPOINT_URL_S3", "PYSPARK_PYTHON"} <= set(read), "the scan finds nothing"
    unclassified = {name: sorted(files) for name, files in read.items()
                    if name not in REQUIRED_VARIABLES and name not in OPTIONAL_VARIABLES}
    assert unclassified == {}, ("the code reads these environment variables: set them in docker-compose.yml's "
                                "x-barrierflow-env, or list them in OPTIONAL_VARIABLES here with the reason")
    assert set(REQUIRED_VARIABLES).isdisjoint(OPTIONAL_VARIABLES)
    for name in (DRIVER, EXECUTORS):
        env = environment(services[name])
        missing = {variable for variable in REQUIRED_VARIABLES if not env.get(variable)}
        assert missing == set(), f"{name} lacks {sorted(missing)}"


def test_variables_the_specs_need_are_set(services: dict[str, Any]) -> None:
    """``${VAR}`` (without a default) in the image's specs, ``bootstrap: env:VAR`` and ``dsn_env``."""
    from barrierflow.spec.loader import _ENV

    env = environment(services[DRIVER])
    for spec in sorted((ROOT / "include" / "pipelines").glob("*.yaml")):
        text = spec.read_text(encoding="utf-8")
        needed = {m.group(1) for m in _ENV.finditer(text) if m.group(2) is None}
        needed |= set(re.findall(r"bootstrap:\s*['\"]?env:([A-Za-z_][A-Za-z0-9_]*)", text))
        needed |= set(re.findall(r"dsn_env:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)", text))
        assert {name for name in needed if not env.get(name)} == set(), spec.name
    assert env["BARRIERFLOW_SINK_DSN"] == "postgresql://barrierflow@sink-db:5432/sink"
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"


def test_secrets_only_from_required_environment_substitution(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for key, value in environment(service).items():
            if SECRET_NAME.search(key) and not key.endswith("_FILE"):  # a file's path is no secret
                assert REQUIRED_SUBSTITUTION.match(value), f"{name}: {key}={value!r} is not ${{VAR:?...}}"
            for user_info in re.findall(r"://[^/@\s]*:([^/@\s]+)@", value):
                assert REQUIRED_SUBSTITUTION.match(user_info), f"{name}: {key} has a literal password"


def test_every_variable_is_listed_in_env_example(compose: dict[str, Any]) -> None:
    listed = {
        line.split("=", 1)[0].strip()
        for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#") and "=" in line
    }
    used = {name for text in strings_in(compose) for name in VARIABLE.findall(text)}
    assert used, "no ${VAR} substitutions found"
    assert used - listed == set(), "add these to .env.example"
    assert listed - used == set(), ".env.example lists variables docker-compose.yml does not use"


def test_env_example_holds_placeholders_only_and_env_is_ignored() -> None:
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            if SECRET_NAME.search(key):
                assert value == "change-me", f"{key} must be the placeholder change-me"
    ignored = subprocess.run(["git", "check-ignore", "--quiet", "--no-index", ".env"], cwd=ROOT, check=False)
    assert ignored.returncode == 0, ".env must be git-ignored"


def test_airflow_services_get_the_cluster_and_the_store(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        env = environment(services[name])
        assert env["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://spark-master:7077", name
        assert env["AWS_ENDPOINT_URL_S3"] == "http://minio:9000", name
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False", name
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@airflow-db:5432/airflow"), name
        # The stack shows the demo DAGs: it names the image's copy of the repository's example specs
        # (the DAG file's default is the user's $BARRIERFLOW_HOME/pipelines).
        assert env["BARRIERFLOW_PIPELINES_DIR"] == "/opt/airflow/include/pipelines", name
    dockerfile = (ROOT / "deploy" / "image" / "Dockerfile").read_text(encoding="utf-8")
    assert "COPY --chown=barrierflow:0 include/pipelines /opt/airflow/include/pipelines" in dockerfile


def test_the_spark_connection_names_the_standalone_master(services: dict[str, Any], tmp_path: Path) -> None:
    """What Airflow's Spark provider makes of AIRFLOW_CONN_SPARK_DEFAULT is the master's URL."""
    uri = environment(services[DRIVER])["AIRFLOW_CONN_SPARK_DEFAULT"]
    script = ("from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook\n"
              "print(SparkSubmitHook(conn_id='spark_default')._connection['master'])\n")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW_CONN_SPARK_DEFAULT": uri,
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    master = services["spark-master"]["command"]
    assert done.stdout.strip().splitlines()[-1] == f"spark://{master[master.index('--host') + 1]}:7077"


def test_commands_of_the_airflow_components(services: dict[str, Any]) -> None:
    for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert services[f"airflow-{component}"]["command"] == ["airflow", component]
    assert services["airflow-init"]["command"][-1].startswith("airflow db migrate")


def test_kafka_runs_in_kraft_mode(services: dict[str, Any]) -> None:
    env = environment(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "zookeeper" not in " ".join(env).lower()
    assert len(env["CLUSTER_ID"]) == 22, "CLUSTER_ID is a base64-encoded UUID"


def test_minio_init_creates_the_checkpoint_and_lake_buckets(services: dict[str, Any]) -> None:
    script = " ".join(strings_in(services["minio-init"].get("entrypoint")))
    for bucket in ("BARRIERFLOW_CHECKPOINT_BUCKET", "BARRIERFLOW_LAKE_BUCKET"):
        assert f'mc mb --ignore-existing "local/$${bucket}"' in script, bucket
        assert environment(services["minio-init"])[bucket] == environment(services[DRIVER])[bucket]


def test_the_iceberg_rest_catalog_keeps_its_tables_on_the_lake_bucket(services: dict[str, Any]) -> None:
    """The REST catalog service: Iceberg's REST catalog fixture, pinned; its warehouse in the lake
    bucket minio-init creates, through S3FileIO on MinIO; its catalog on a named volume; and the
    driver and the executors get its URI for ``catalog: {type: rest, uri_env: ...}``."""
    rest = services["iceberg-rest"]
    assert rest["image"].startswith("apache/iceberg-rest-fixture:")
    env = environment(rest)
    assert env["CATALOG_WAREHOUSE"] == "s3://${BARRIERFLOW_LAKE_BUCKET:-barrierflow-lake}/iceberg"
    assert env["CATALOG_IO__IMPL"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert env["CATALOG_S3_ENDPOINT"] == environment(services[DRIVER])["AWS_ENDPOINT_URL_S3"]
    assert env["CATALOG_URI"].startswith("jdbc:sqlite:file:/var/lib/iceberg-rest/")
    assert any(str(v).startswith("iceberg-rest-data:/var/lib/iceberg-rest") for v in rest["volumes"])
    assert rest["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    for name in (DRIVER, EXECUTORS):
        assert environment(services[name])["BARRIERFLOW_ICEBERG_REST_URI"] == "http://iceberg-rest:8181"
