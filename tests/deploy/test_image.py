"""Static checks of the project image, deploy/image/Dockerfile (no Docker engine in CI, so
`docker build` cannot run here): the base image pinned, Java 17, exactly requirements.txt with
constraints.txt and then the package without dependencies, a non-root user, and the paths the
compose file and the code rely on."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "image" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "image" / "Dockerfile.dockerignore"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of ``text``: comments dropped, ``\\`` continuations joined."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        pending.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            keyword, _, arguments = " ".join(pending).partition(" ")
            instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
            pending = []
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return instructions


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def of(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [i for i in instructions if i.keyword == keyword]


def shell_commands(instructions: list[Instruction]) -> list[list[str]]:
    """Every command of every RUN, split at ``&&`` and tokenized."""
    commands = []
    for run in of(instructions, "RUN"):
        for part in run.arguments.split("&&"):
            commands.append(shlex.split(part))
    return commands


def env_values(instructions: list[Instruction]) -> dict[str, str]:
    values: dict[str, str] = {}
    for env in of(instructions, "ENV"):
        for token in shlex.split(env.arguments):
            key, _, value = token.partition("=")
            values[key] = value
    return values


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    return dict(i.arguments.split("=", 1) for i in of(instructions, "ARG") if "=" in i.arguments)


def test_the_parser_joins_continuations_and_drops_comments() -> None:
    parsed = parse_dockerfile("# c\nFROM a:1.2\nRUN x \\\n  # inner\n  && y\n\nUSER 5\n")
    assert [(i.keyword, i.arguments, i.line) for i in parsed] == [
        ("FROM", "a:1.2", 2), ("RUN", "x && y", 3), ("USER", "5", 7)]


def test_base_image_is_python_3_11_pinned_to_a_patch_release(instructions: list[Instruction]) -> None:
    froms = of(instructions, "FROM")
    assert len(froms) == 1, "one stage"
    image = froms[0].arguments
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert requires == ">=3.11,<3.12", "the base image's Python must satisfy requires-python"


def test_java_17_is_installed_and_java_home_points_at_it(instructions: list[Instruction]) -> None:
    installs = [c for c in shell_commands(instructions) if c[:2] == ["apt-get", "install"]]
    assert len(installs) == 1 and "openjdk-17-jdk-headless" in installs[0]  # javac builds the JVM helper
    assert "--no-install-recommends" in installs[0]
    assert not any(re.match(r"openjdk-(?!17-)", package) for package in installs[0]), "one Java: 17"
    java_home = env_values(instructions)["JAVA_HOME"]
    assert any(c[:2] == ["ln", "-s"] and c[-1] == java_home for c in shell_commands(instructions)), (
        "JAVA_HOME must be the link made to the installed JDK")


def test_installs_exactly_the_pinned_requirements_then_the_package(instructions: list[Instruction]) -> None:
    pip_installs = [c[c.index("install") + 1:] for c in shell_commands(instructions)
                    if c[:2] == ["pip", "install"]]
    assert len(pip_installs) == 2, f"one install of the requirements and one of the package, got {pip_installs}"
    requirements, package = pip_installs
    copied = {Path(src).name: dest for copy in of(instructions, "COPY")
              for *sources, dest in [shlex.split(copy.arguments)] for src in sources if not src.startswith("--")}
    folder = copied["requirements.txt"]
    assert copied["constraints.txt"] == folder
    assert requirements == ["-r", f"{folder}requirements.txt", "-c", f"{folder}constraints.txt"], (
        "exactly -r requirements.txt -c constraints.txt, nothing added")
    assert package == ["--no-deps", folder.rstrip("/")], "the package, without dependencies, not editable"
    assert copied["pyproject.toml"] == folder and copied["README.md"] == folder
    assert ["pip", "check"] in shell_commands(instructions)
    # The requirements layer comes before the code, so a code change does not reinstall it.
    lines = {i.arguments: i.line for i in of(instructions, "COPY")}
    code = lines[f"include/barrierflow {folder}include/barrierflow"]
    assert lines[f"requirements.txt constraints.txt {folder}"] < code


def test_the_jvm_sets_a_pipeline_needs_and_the_helper_are_built_into_the_image(
        instructions: list[Instruction]) -> None:
    """Spark's Kafka connector and S3A (from the package's lock, verified) and barrierflow's JVM helper,
    built after the package is installed, into the cache every process of the image reads."""
    from barrierflow.jvm.lockfile import CACHE_ENV, DEFAULT_LOCK, read_lock

    commands = shell_commands(instructions)
    installs = [c for c in commands if c[:4] == ["python", "-m", "barrierflow.jvm", "install"]]
    assert len(installs) == 1, commands
    sets = [installs[0][i + 1] for i, word in enumerate(installs[0]) if word == "--set"]
    assert sorted(sets) == ["spark-kafka", "spark-s3a"]
    assert set(sets) <= {a.set_name for a in read_lock(DEFAULT_LOCK)}
    assert ["python", "-m", "barrierflow.jvm", "helper"] in commands
    package = next(i for i, c in enumerate(commands) if c[:2] == ["pip", "install"] and "--no-deps" in c)
    assert commands.index(installs[0]) > package, "the JVM sets come from the installed package's lock"
    assert env_values(instructions)[CACHE_ENV].startswith("/opt/")


def test_runs_as_a_non_root_user(instructions: list[Instruction]) -> None:
    users = of(instructions, "USER")
    assert users, "no USER: the image would run as root"
    user = users[-1].arguments.split(":")[0]
    for name, default in arg_defaults(instructions).items():
        user = user.replace(f"${{{name}}}", default)
    assert user not in {"root", "0"} and int(user) >= 1000, user
    assert instructions[-1].keyword in {"CMD", "ENTRYPOINT"} and users[-1].line > max(
        i.line for i in instructions if i.keyword in {"RUN", "COPY"}), "nothing runs as root after USER"
    useradd = next(c for c in shell_commands(instructions) if c[0] == "useradd")
    assert useradd[useradd.index("--uid") + 1] == "${BARRIERFLOW_UID}"


def test_paths_agree_with_the_compose_file_and_the_code(instructions: list[Instruction]) -> None:
    env = env_values(instructions)
    venv = env["VIRTUAL_ENV"]
    assert env["PATH"].startswith(f"{venv}/bin:")
    assert ["python", "-m", "venv", venv] in shell_commands(instructions)
    assert env["SPARK_HOME"] == f"{venv}/lib/python3.11/site-packages/pyspark"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == f"{venv}/bin/python"
    assert env["AIRFLOW_HOME"] == env["BARRIERFLOW_HOME"] == "/opt/airflow"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    for name in ("airflow-scheduler", "spark-worker"):
        service_env = compose["services"][name]["environment"]
        assert service_env["PYSPARK_PYTHON"] == env["PYSPARK_PYTHON"], name
        assert service_env["BARRIERFLOW_HOME"] == env["BARRIERFLOW_HOME"], name
    # The DAG file finds jobs/ and include/pipelines beside dags/: all under AIRFLOW_HOME.
    destinations = {shlex.split(c.arguments)[-1] for c in of(instructions, "COPY")}
    for folder in ("dags", "jobs", "plugins", "include/pipelines", "include/expectations"):
        assert f"{env['AIRFLOW_HOME']}/{folder}" in destinations, folder


def test_everything_copied_exists_and_is_in_the_build_context(instructions: list[Instruction]) -> None:
    kept = {line[1:] for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines() if line.startswith("!")}
    assert DOCKERIGNORE.read_text(encoding="utf-8").splitlines()[2] == "**", "the context is what is re-included"
    for copy in of(instructions, "COPY"):
        *sources, _destination = [t for t in shlex.split(copy.arguments) if not t.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"line {copy.line}: {source} does not exist"
            assert source in kept, f"line {copy.line}: {source} is not re-included by {DOCKERIGNORE.name}"


def test_tini_is_pid_1(instructions: list[Instruction]) -> None:
    entrypoint = of(instructions, "ENTRYPOINT")[-1].arguments
    assert entrypoint == '["/usr/bin/tini", "--"]'
    install = next(c for c in shell_commands(instructions) if c[:2] == ["apt-get", "install"])
    assert "tini" in install and "curl" in install  # curl: the compose healthchecks
