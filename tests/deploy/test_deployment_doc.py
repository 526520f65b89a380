"""Every command in the fenced shell blocks of docs/deployment.md is one the project supports:
make targets exist in the Makefile, `barrierflow` and `jobs/run_pipeline.py` arguments parse with
their real parsers, `airflow` commands parse with Airflow's own parser and name DAGs the DAG
file makes, `docker compose` subcommands name services of docker-compose.yml, spark-submit names
the compose master, and the files named exist (and, for commands run in a container, are in
the project image)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import _parser as barrierflow_parser
from barrierflow.errors import UserInputError

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deployment.md"
FENCE = re.compile(r"^```(bash|sh|shell|console)\s*\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: What docs/deployment.md may ask of `docker compose`: subcommand -> the flags it may use
#: (every other argument must be a service of docker-compose.yml).
COMPOSE_SUBCOMMANDS: dict[str, set[str]] = {
    "config": {"--quiet"}, "build": set(), "up": {"-d", "--scale"}, "ps": set(), "logs": {"-f"},
    "down": {"--volumes"}, "exec": set(),
}
#: Folders the image copies under /opt/airflow (deploy/image/Dockerfile): what a command run
#: in a container can name.
IMAGE_FOLDERS = ("dags/", "jobs/", "plugins/", "include/pipelines/", "include/expectations/")
PATH_LIKE = re.compile(r"^[\w./-]+\.(yaml|yml|json|py|txt|example|md)$")


def doc_commands(text: str) -> list[list[str]]:
    """The commands of the fenced shell blocks of ``text``, tokenized, comments dropped."""
    commands = []
    for _language, body in FENCE.findall(text):
        for line in body.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                commands.append(argv)
    return commands


@pytest.fixture(scope="module")
def commands() -> list[list[str]]:
    found = doc_commands(DOC.read_text(encoding="utf-8"))
    assert len(found) >= 10, "docs/deployment.md has lost its commands"
    return found


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


def in_container(argv: list[str]) -> list[str] | None:
    """The command of ``docker compose exec SERVICE CMD...``, else None."""
    return argv[4:] if argv[:3] == ["docker", "compose", "exec"] else None


def all_commands(commands: list[list[str]]) -> list[tuple[list[str], bool]]:
    """Every command and every command run in a container, with ``True`` for the latter."""
    return [(c, False) for c in commands] + [(inner, True) for c in commands if (inner := in_container(c))]


def check_paths(argv: list[str], in_image: bool) -> None:
    for arg in argv[1:]:
        if PATH_LIKE.match(arg) and not arg.startswith("-"):
            assert (ROOT / arg).exists(), f"{shlex.join(argv)}: {arg} does not exist"
            if in_image:
                assert arg.startswith(IMAGE_FOLDERS), f"{shlex.join(argv)}: {arg} is not in the image"


def check_compose(argv: list[str], compose: dict[str, Any]) -> None:
    services = compose["services"]
    subcommand, rest = argv[2], argv[3:]
    assert subcommand in COMPOSE_SUBCOMMANDS, f"{shlex.join(argv)}: docker compose {subcommand} is not documented here"
    if subcommand == "exec":
        assert rest[0] in services, f"{shlex.join(argv)}: no service {rest[0]!r}"
        assert services[rest[0]]["image"].startswith("barrierflow:"), "exec into the project image"
        return
    args = iter(rest)
    for arg in args:
        if arg == "--scale":
            name, _, count = next(args).partition("=")
            assert name in services and count.isdigit(), f"{shlex.join(argv)}: --scale SERVICE=N"
            assert not {"container_name", "hostname", "ports"} & set(services[name]), f"{name} cannot be scaled"
        elif arg.startswith("-"):
            assert arg in COMPOSE_SUBCOMMANDS[subcommand], f"{shlex.join(argv)}: flag {arg}"
        else:
            assert arg in services, f"{shlex.join(argv)}: no service {arg!r}"


def check_barrierflow(argv: list[str]) -> None:
    try:
        barrierflow_parser().parse_args(argv[1:])
    except UserInputError as exc:
        pytest.fail(f"{shlex.join(argv)}: {exc}")


def check_spark_submit(argv: list[str], compose: dict[str, Any]) -> None:
    master = compose["services"]["spark-master"]["command"]
    expected = f"spark://{master[master.index('--host') + 1]}:{master[master.index('--port') + 1]}"
    assert argv[argv.index("--master") + 1] == expected, f"{shlex.join(argv)}: the compose master is {expected}"
    application = next(a for a in argv[argv.index("--master") + 2:] if not a.startswith("-"))
    spec = importlib.util.spec_from_file_location("doc_job", ROOT / application)
    assert spec is not None and spec.loader is not None, application
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.build_parser().parse_args(argv[argv.index(application) + 1:])
    except SystemExit:
        pytest.fail(f"{shlex.join(argv)}: {application} rejects its arguments")


def check_make(argv: list[str]) -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in argv[1:]:
        if "=" not in target:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), f"make {target}: no such target"


def check_bench(argv: list[str]) -> None:
    """``python -m bench ...``: the benchmark runner at the repository root parses the arguments."""
    from bench.run import build_parser

    try:
        build_parser().parse_args(argv[3:])
    except SystemExit:
        pytest.fail(f"{shlex.join(argv)}: python -m bench rejects its arguments")


def test_the_extractor_reads_fenced_shell_blocks_only() -> None:
    text = "a\n```bash\nmake demo  # c\nx \\\n  y\n```\n```python\nprint(1)\n```\n"
    assert doc_commands(text) == [["make", "demo"], ["x", "y"]]


def test_every_command_is_supported(commands: list[list[str]], compose: dict[str, Any]) -> None:
    checked = 0
    for argv, in_image in all_commands(commands):
        program = Path(argv[0]).name
        if argv[:2] == ["docker", "compose"]:
            check_compose(argv, compose)
        elif program == "barrierflow":
            check_barrierflow(argv)
        elif program == "spark-submit":
            check_spark_submit(argv, compose)
        elif program == "make":
            check_make(argv)
        elif program.startswith("python") and argv[1:3] == ["-m", "bench"]:
            check_bench(argv)
        elif program == "cp":
            assert len(argv) == 3 and (ROOT / argv[1]).is_file(), shlex.join(argv)
        elif program == "airflow":
            continue  # test_airflow_commands_parse_and_name_real_dags
        else:
            pytest.fail(f"{shlex.join(argv)}: a command this test does not know; check it here or remove it")
        check_paths(argv, in_image)
        checked += 1
    assert checked >= 10


def test_airflow_commands_parse_and_name_real_dags(commands: list[list[str]], tmp_path: Path) -> None:
    """Airflow's own CLI parser (no command runs) and the DAG ids the DAG file makes from the specs."""
    airflow_commands = [argv[1:] for argv, in_image in all_commands(commands) if argv[0] == "airflow"]
    assert airflow_commands, "the doc runs no airflow command"
    script = """
import json, sys
from airflow.cli.cli_parser import get_parser
from barrierflow.airflow.dag_ids import DAG_KINDS, dag_id_for
from barrierflow.ops.discovery import discover_pipelines

parsed = []
for argv in json.loads(sys.argv[1]):
    try:
        args = get_parser().parse_args(argv)
    except SystemExit:
        parsed.append(None)
    else:
        parsed.append(getattr(args, "dag_id", None))
dags = sorted(dag_id_for(p.name, kind) for p in discover_pipelines(sys.argv[2]) for kind in DAG_KINDS)
print(json.dumps({"parsed": parsed, "dags": dags}))
"""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "BARRIERFLOW_HOME": str(ROOT),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}"}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(airflow_commands),
                           str(ROOT / "include" / "pipelines")],
                          env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for argv, dag_id in zip(airflow_commands, result["parsed"], strict=True):
        assert dag_id is not None, f"airflow {shlex.join(argv)}: Airflow's parser rejects it (or it names no DAG)"
        assert dag_id in result["dags"], f"airflow {shlex.join(argv)}: no DAG {dag_id!r} (has {result['dags'][:5]}...)"
