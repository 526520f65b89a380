"""Static checks of docker-compose.yml (there is no Docker engine in CI): the services of the
multi-machine shape, published ports, healthchecks, start order, and secrets only from .env."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"

AIRFLOW_SERVICES = {"airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
REQUIRED_SERVICES = AIRFLOW_SERVICES | {
    "airflow-db", "airflow-init",
    "spark-master", "spark-worker-1", "spark-worker-2",
    "kafka", "minio", "minio-init", "sink-db",
}
#: Services that run once and exit (no healthcheck; dependants wait for successful completion).
ONE_SHOT_SERVICES = {"airflow-init", "minio-init"}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|KEY", re.IGNORECASE)
REQUIRED_SUBSTITUTION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:\?[^}]+\}$")
# ${VAR}, ${VAR:-default}, ${VAR:?message}; `$$` is compose's escape for a literal `$`.
VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
DOCUMENTED_PORT = re.compile(r"^#\s+(\d+)\s+([a-z0-9-]+)\s")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


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


def test_required_services_exist(services: dict[str, Any]) -> None:
    assert REQUIRED_SERVICES <= set(services), REQUIRED_SERVICES - set(services)


def test_images(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        assert services[name]["image"] == "apache/airflow:3.3.2-python3.11", name
    for name in ("spark-master", "spark-worker-1", "spark-worker-2"):
        assert re.fullmatch(r"apache/spark:4\.\d+\.\d+-python3", services[name]["image"]), name
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", services["kafka"]["image"])
    for name, service in services.items():
        assert ":" in service["image"] and not service["image"].endswith(":latest"), f"{name}: pin a tag"


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
    assert {"spark-master", "kafka", "minio-init", "sink-db"} <= set(services["airflow-scheduler"]["depends_on"])
    for name in ("spark-worker-1", "spark-worker-2"):
        assert "spark-master" in services[name]["depends_on"], name
    assert "minio" in services["minio-init"]["depends_on"]


def test_secrets_only_from_required_environment_substitution(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for key, value in environment(service).items():
            if SECRET_NAME.search(key):
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


def test_env_example_holds_placeholders_only() -> None:
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            if SECRET_NAME.search(key):
                assert value == "change-me", f"{key} must be the placeholder change-me"


def test_airflow_services_mount_the_project(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        service = services[name]
        mounts = {v.split(":")[0]: v.split(":")[1] for v in service["volumes"] if isinstance(v, str)}
        for folder in ("dags", "jobs", "plugins", "include"):
            assert mounts.get(f"./{folder}") == f"/opt/airflow/{folder}", f"{name}: ./{folder}"
        env = environment(service)
        assert env["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://spark-master:7077", name
        assert env["AWS_ENDPOINT_URL_S3"] == "http://minio:9000", name
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False", name
        assert "/opt/airflow/include" in env["PYTHONPATH"].split(":"), name
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@airflow-db:5432/airflow"), name


def test_commands_of_the_airflow_components(services: dict[str, Any]) -> None:
    assert services["airflow-api-server"]["command"] == "api-server"
    assert services["airflow-scheduler"]["command"] == "scheduler"
    assert services["airflow-dag-processor"]["command"] == "dag-processor"
    assert services["airflow-triggerer"]["command"] == "triggerer"


def test_kafka_runs_in_kraft_mode(services: dict[str, Any]) -> None:
    env = environment(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "zookeeper" not in " ".join(env).lower()
    assert len(env["CLUSTER_ID"]) == 22, "CLUSTER_ID is a base64-encoded UUID"


def test_minio_init_creates_the_checkpoint_bucket(services: dict[str, Any]) -> None:
    script = " ".join(strings_in(services["minio-init"].get("entrypoint")))
    assert "mc mb --ignore-existing" in script and "BARRIERFLOW_CHECKPOINT_BUCKET" in script
