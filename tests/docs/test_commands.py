"""Every command a user is told to run, in README.md, docs/*.md and examples/*/README.md, is one
the code still takes: a moved module, a renamed subcommand or flag, a deleted make target or a
missing file fails here.

The fenced shell blocks (```bash, sh, shell, console; and unlabelled blocks whose lines are
commands, such as docs/cli.md's synopsis) are split into commands (continuations joined,
comments, ``NAME=value`` prefixes, ``&`` and ``chrt``/``docker compose exec SERVICE`` wrappers
dropped; ``&&`` and ``;`` split). Then, without starting Spark or a server:

- ``barrierflow ...``: parsed by the CLI's own parser; a synopsis line (``[--flag X]``,
  placeholders) is checked flag by flag against its subcommand's parser; every ``.yaml`` under
  include/ or examples/ it names exists. ``--help`` of every subcommand named and plain
  ``validate`` of every shipped spec (include/pipelines/, examples/*/pipeline.yaml; the
  ``PYTHONPATH`` and exports of the blocks that name it) run for real, in this process (a
  documented ``--deep`` is Spark's: the report says where it runs); ``init NAME`` runs in a
  scratch folder and its spec is validated; the other subcommands need a pipeline's store or a
  server and run in the suite's tests named in :data:`RUN_ELSEWHERE` (checked to exist and to
  call the subcommand).
- ``python -m MODULE ARGS``: the module is found (with the block's ``export PYTHONPATH``); when
  it builds an argparse parser, its ``__main__`` runs up to ``parse_args``, which parses ARGS
  and stops it (nothing else runs); ``python FILE``, ``pytest FILE``: the file exists.
- ``make TARGET``: ``make -n TARGET`` (prints, runs nothing) and every ``barrierflow`` and
  ``python -m`` command it would run is checked as above (``make demo`` is the bounded
  ``barrierflow run ... --checkpoints 6``; its spec runs in tests/state/test_demo_changes.py).
- anything else (``docker``, ``psql``, ``export``, ``kill``...): listed as not run, with why.

Every examples/ script runs elsewhere: ``local_kafka.py`` in tests/examples/test_local_kafka.py
(started, used, stopped), the example pipelines and their producers in
tests/examples/test_examples.py; here every module of their packages is imported.

The report of what was checked and run is printed (``pytest -rA`` shows it) and is part of every
failure's message. docs/deployment.md's commands are checked in more depth (compose services,
Airflow's parser) by tests/deploy/test_deployment_doc.py; the run records (bench/results/, outside docs/)
record the commands of their time and are not checked.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import itertools
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from barrierflow.cli.main import _parser as barrierflow_parser
from barrierflow.cli.main import main as barrierflow_main
from barrierflow.errors import BarrierflowError

ROOT = Path(__file__).resolve().parents[2]
#: Run logs: the commands of past runs, as they were typed then.
RUN_LOGS: set[str] = set()
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL = {"bash", "sh", "shell", "console"}
#: Words that start a command in an unlabelled block (the others are diagrams and listings).
COMMAND_WORDS = {"barrierflow", "python", "make", "docker", "psql", "airflow"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.\.\.)?$|[\[\]|]|\.\.\.")
#: Commands that start a pipeline, or read a store or a server: the tests that run them, in the
#: suite's own stores and servers (each named file must call the subcommand).
RUN_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "run": ("tests/examples/test_examples.py",),
    "checkpoints": ("tests/ops/test_global_checkpoint_ops.py",),
    "verify": ("tests/verification/test_deep.py",),
    "restore": ("tests/ops/test_global_checkpoint_ops.py",),
    "savepoint": ("tests/ops/test_global_checkpoint_ops.py",),
    "stop": ("tests/ops/test_stop.py",),
    "retain": ("tests/retention/test_local_retention.py",),
    "reconcile": ("tests/scenarios/test_outages.py",),
    "upgrade": ("tests/state/test_upgrade_refusals.py",),
    "chaos": ("tests/scenarios/test_chaos.py",),
    "skew": ("tests/reports/test_skew.py",),
    "rollup": ("tests/cli/test_batch_cli.py",),
    "recompute": ("tests/cli/test_batch_cli.py",),
    "quality": ("tests/cli/test_batch_cli.py",),
    "state": ("tests/state/test_state_reader.py",),
}
#: How a test calls a subcommand: ``main(["sub", ...])``, ``cli("sub", ...)`` or
#: ``[..., "barrierflow.cli.main", "sub", ...]``.
CALLS = r'(?:\[|cli\(|barrierflow\.cli\.main", )"{sub}"'


@dataclass
class Command:
    """One command of a page: where it is, its words, the exports before it in its block."""

    page: str
    line: int
    argv: list[str]
    pythonpath: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {shlex.join(self.argv)}"


def pages() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.relative_to(ROOT).as_posix() not in RUN_LOGS]
    return [ROOT / "README.md", *docs, *sorted((ROOT / "examples").glob("*/README.md"))]


def _unwrap(argv: list[str]) -> list[str]:
    """The command itself: without ``NAME=value`` prefixes, ``chrt --idle 0``, ``docker compose
    exec SERVICE`` and a trailing ``&``."""
    while argv and ENV_ASSIGNMENT.match(argv[0]):
        argv = argv[1:]
    if argv[:3] == ["chrt", "--idle", "0"]:
        argv = argv[3:]
    if argv[:3] == ["docker", "compose", "exec"] and len(argv) > 4:
        argv = argv[4:]
    if argv and argv[-1] == "&":
        argv = argv[:-1]
    return [w for w in argv if not re.match(r"^[0-9]?>", w)]  # redirections


def _split(argv: list[str]) -> Iterator[list[str]]:
    part: list[str] = []
    for word in argv:
        if word in {"&&", ";", "||"}:
            if part:
                yield part
            part = []
        else:
            part.append(word)
    if part:
        yield part


def commands_of(page: Path, root: Path = ROOT) -> list[Command]:
    """The commands of the page's fenced command blocks (module docstring)."""
    text = page.read_text(encoding="utf-8")
    found: list[Command] = []
    for match in FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        first = next((line.split()[0] for line in body.splitlines() if line.strip()), "")
        if language not in SHELL and not (language == "" and Path(first).name in COMMAND_WORDS):
            continue
        start = text.count("\n", 0, match.start(2)) + 1
        pythonpath: list[str] = []
        env: dict[str, str] = {}
        offset = 0
        for raw in re.split(r"(?<!\\)\n", body):
            number = start + offset
            offset += raw.count("\n") + 1
            try:
                words = shlex.split(raw.replace("\\\n", " "), comments=True)
            except ValueError as exc:
                raise AssertionError(f"{page.relative_to(root)}:{number}: not a shell line ({exc}): {raw}") from exc
            for argv in _split(words):
                prefix = [w.split("=", 1)[1] for w in argv if w.startswith("PYTHONPATH=")]
                argv = _unwrap(argv)
                if argv[:1] == ["export"] and argv[1:2] and argv[1].startswith("PYTHONPATH="):
                    pythonpath = argv[1].split("=", 1)[1].split(":")
                elif argv[:1] == ["export"] and argv[1:2] and ENV_ASSIGNMENT.match(argv[1]):
                    name, _, value = argv[1].partition("=")
                    if "$" not in value:
                        env[name] = value
                if argv:
                    extra = [p for value in prefix for p in value.split(":")]
                    found.append(Command(page.relative_to(root).as_posix(), number, argv, pythonpath + extra,
                                         dict(env)))
    return found


def all_commands() -> list[Command]:
    return [c for page in pages() for c in commands_of(page)]


def _is_barrierflow(argv: list[str]) -> bool:
    return Path(argv[0]).name == "barrierflow"


def _python_module(argv: list[str]) -> tuple[str, list[str]] | None:
    if Path(argv[0]).name.startswith("python") and len(argv) > 2 and argv[1] == "-m":
        return argv[2], argv[3:]
    return None


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def check_synopsis(parser: argparse.ArgumentParser, words: list[str], what: str) -> str:
    """A synopsis (``SUB [--flag X] [--a | --b]``): the subcommands exist, every flag is one of
    the innermost subcommand's options. Returns the subcommand path."""
    path = []
    for word in words:
        choices = _subparsers(parser)
        if word in choices:
            parser = choices[word]
            path.append(word)
        elif not word.startswith(("-", "[")) and choices and not PLACEHOLDER.search(word):
            raise AssertionError(f"{what}: no subcommand {' '.join([*path, word])!r}")
        else:
            break
    flags = {m.group(0) for w in words for m in re.finditer(r"(?<![\w-])--?[a-zA-Z][\w-]*", w)}
    unknown = sorted(flags - _options(parser))
    assert not unknown, f"{what}: {' '.join(path) or 'the command'} has no option {', '.join(unknown)}"
    actions = {option: action for action in parser._actions for option in action.option_strings}
    for flag, value in itertools.pairwise(words):
        action = actions.get(flag.strip("[]"))
        if action is not None and action.choices and "|" in value:
            listed = {v.strip("[]. ") for v in value.split("|")}
            wrong = sorted(listed - {str(c) for c in action.choices})
            assert not wrong, f"{what}: {flag.strip('[]')} takes {sorted(action.choices)}, not {wrong}"
    return " ".join(path)


def check_barrierflow(command: Command, report: list[str]) -> str:
    """Parse (or check the synopsis of) a ``barrierflow`` command; the subcommand's name."""
    args = command.argv[1:]
    for arg in args:
        if arg.endswith(".yaml") and arg.startswith(("include/", "examples/")):
            assert (ROOT / arg).is_file(), f"{command}: {arg} does not exist"
    if any(PLACEHOLDER.search(a) for a in args):
        sub = check_synopsis(barrierflow_parser(), args, str(command))
        report.append(f"synopsis checked against the parser: {command}")
        return sub.split(" ")[0] if sub else ""
    try:
        parsed = barrierflow_parser().parse_args(args)
    except SystemExit as exc:  # --version, --help
        if exc.code != 0:
            raise AssertionError(f"{command}: the CLI rejects it (exit {exc.code})") from exc
        report.append(f"ran: {command} (exit 0)")
        return ""
    except BarrierflowError as exc:
        raise AssertionError(f"{command}: the CLI rejects it: {exc}") from exc
    report.append(f"parsed: {command}")
    return str(getattr(parsed, "command", "") or "")


class _Parsed(BaseException):
    """Raised by the trapped parser once it accepted the arguments (or, for a synopsis, before
    it parses): stops the module's ``main`` there. Carries the parser."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def _shell_value(word: str) -> str:
    """A ``$(command)`` substitution's stand-in: ``1`` (the only one, ``--server-pid``, takes a pid)."""
    return "1" if word.startswith("$(") else word


def check_python_module(command: Command, module: str, args: list[str], monkeypatch: pytest.MonkeyPatch,
                        report: list[str]) -> None:
    """The module is importable with the block's PYTHONPATH; when it parses arguments with
    argparse, its ``__main__`` runs up to the parse only: a trapped ``parse_known_args`` parses
    the arguments (or, for a synopsis, hands over the parser to :func:`check_synopsis`) and
    raises, stopping it; starting a process before that fails."""
    with monkeypatch.context() as patch:
        for folder in command.pythonpath:
            if folder and not folder.startswith("$"):
                patch.syspath_prepend(str(ROOT / folder))
        spec = importlib.util.find_spec(module)
        assert spec is not None, f"{command}: no module {module} (moved or renamed?)"
        main_spec = importlib.util.find_spec(f"{module}.__main__") if spec.submodule_search_locations else spec
        source = Path(main_spec.origin).read_text(encoding="utf-8") if main_spec and main_spec.origin else ""
        if "argparse" not in source + _imported_source(main_spec):
            report.append(f"module found (no argument parser): {command}")
            return
        synopsis = any(PLACEHOLDER.search(a) for a in args)
        original = argparse.ArgumentParser.parse_known_args

        def trap(self: argparse.ArgumentParser, args: object = None, namespace: object = None) -> object:
            caller = sys._getframe(1).f_code.co_name
            if caller == "__call__":  # a subcommand's parser, inside its parent's parse
                return original(self, args, namespace)  # type: ignore[arg-type]
            if not synopsis:
                _, extras = original(self, args, namespace)  # type: ignore[arg-type]
                if caller == "parse_args" and extras:
                    self.error(f"unrecognized arguments: {' '.join(extras)}")
            raise _Parsed(self)

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError(f"{command}: {module} starts a process before it parses its arguments")

        patch.setattr(argparse.ArgumentParser, "parse_known_args", trap)
        patch.setattr(subprocess, "Popen", refuse)
        patch.setattr(sys, "argv", [module, *(_shell_value(a) for a in args)])
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except _Parsed as parsed:
            if synopsis:
                check_synopsis(parsed.parser, args, str(command))
                report.append(f"synopsis checked against the module's parser: {command}")
            else:
                report.append(f"arguments parsed by the module's parser: {command}")
            return
        except (BarrierflowError, SystemExit) as exc:
            raise AssertionError(f"{command}: {module} rejects its arguments: {exc}") from exc
        raise AssertionError(f"{command}: {module} ran without parsing arguments with argparse")


def _imported_source(spec: object) -> str:
    """The source of ``bench/run.py`` for ``python -m bench`` (whose __main__ calls it)."""
    origin = getattr(spec, "origin", None)
    if origin and Path(origin).name == "__main__.py":
        return "".join(p.read_text(encoding="utf-8") for p in Path(origin).parent.glob("run.py"))
    return ""


@functools.cache
def _make_dry_run(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def make_commands(command: Command) -> list[Command]:
    """``make -n TARGET``'s lines that are ``barrierflow`` or ``python -m`` commands."""
    targets = [t for t in command.argv[1:] if "=" not in t]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), f"{command}: no make target {target}"
    dry = _make_dry_run(tuple(command.argv[1:]))
    assert dry.returncode == 0, f"{command}: make -n failed: {dry.stderr[-2000:]}"
    inner = []
    for line in dry.stdout.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for argv in _split(words):
            argv = _unwrap(argv)
            if argv and (_is_barrierflow(argv) or _python_module(argv)):
                inner.append(Command(f"{command.page}:{command.line} (make -n {' '.join(targets)})", 0, argv))
    return inner


def test_the_extractor_reads_commands_and_their_pythonpath(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n```sh\nexport PYTHONPATH=a:b\nX=1 .venv/bin/barrierflow validate s.yaml  # c\n"
                    "make demo && python -m m \\\n  --x 1 &\n```\n```\nbarrierflow run SPEC [--quiet]\n```\n"
                    "```\nnot a command\n```\n```python\nprint(1)\n```\n", encoding="utf-8")
    found = commands_of(page, root=tmp_path)
    assert [(c.line, c.argv) for c in found] == [
        (3, ["export", "PYTHONPATH=a:b"]), (4, [".venv/bin/barrierflow", "validate", "s.yaml"]),
        (5, ["make", "demo"]), (5, ["python", "-m", "m", "--x", "1"]),
        (9, ["barrierflow", "run", "SPEC", "[--quiet]"])]
    assert found[1].pythonpath == ["a", "b"]


def test_a_renamed_flag_or_subcommand_fails() -> None:
    report: list[str] = []
    with pytest.raises(AssertionError, match="--no-such-flag"):
        check_barrierflow(Command("p", 1, ["barrierflow", "run", "include/pipelines/demo.yaml", "--no-such-flag"]),
                          report)
    with pytest.raises(AssertionError, match="has no option --gone"):
        check_barrierflow(Command("p", 1, ["barrierflow", "validate", "SPEC", "[--gone]"]), report)
    with pytest.raises(AssertionError, match="no subcommand 'checkpoints lsit'"):
        check_barrierflow(Command("p", 1, ["barrierflow", "checkpoints", "lsit", "SPEC"]), report)
    with pytest.raises(AssertionError, match="does not exist"):
        check_barrierflow(Command("p", 1, ["barrierflow", "validate", "include/pipelines/moved.yaml"]), report)


def test_a_moved_module_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AssertionError, match=r"no module barrierflow\.sources\.embedded_broker"):
        check_python_module(Command("p", 1, ["python", "-m", "barrierflow.sources.embedded_broker"]),
                            "barrierflow.sources.embedded_broker", [], monkeypatch, [])
    with pytest.raises(AssertionError, match="rejects its arguments"):
        check_python_module(Command("p", 1, ["python", "-m", "user_totals.produce"], ["examples/user-totals"]),
                            "user_totals.produce", ["127.0.0.1:9", "t", "--no-such-flag"], monkeypatch, [])


def test_every_documented_command_is_one_the_code_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BARRIERFLOW_HOME", str(ROOT))
    commands = all_commands()
    report: list[str] = []
    problems: list[str] = []
    subcommands: dict[str, list[Command]] = {}
    #: spec -> (PYTHONPATH folders, environment) of the blocks naming it, and its documented --deep
    shipped = [*(ROOT / "include" / "pipelines").glob("*.yaml"), *(ROOT / "examples").glob("*/pipeline.yaml")]
    validated: dict[str, tuple[set[str], dict[str, str], bool]] = {
        p.relative_to(ROOT).as_posix(): (set(), {}, False) for p in sorted(shipped)}
    queue = list(commands)
    while queue:
        command = queue.pop(0)
        argv = command.argv
        try:
            if _is_barrierflow(argv):
                sub = check_barrierflow(command, report)
                subcommands.setdefault(sub, []).append(command)
                spec = next((a for a in argv[2:] if a.endswith(".yaml")), "")
                if sub == "validate" and (ROOT / spec).is_file():
                    folders, env, deep = validated.setdefault(spec, (set(), {}, False))
                    validated[spec] = (folders | set(command.pythonpath), {**env, **command.env},
                                       deep or "--deep" in argv)
            elif (module := _python_module(argv)) is not None:
                check_python_module(command, module[0], module[1], monkeypatch, report)
            elif Path(argv[0]).name.startswith("python") and len(argv) > 1 and argv[1].endswith(".py"):
                assert (ROOT / argv[1]).is_file(), f"{command}: no file {argv[1]}"
                report.append(f"file exists: {command}")
            elif Path(argv[0]).name == "pytest":
                files = [a.split("::")[0] for a in argv[1:] if a.startswith("tests/")]
                assert all((ROOT / f).exists() for f in files), f"{command}: no such test file"
                report.append(f"test files exist: {command}" if files else f"not run (the suite): {command}")
            elif argv[0] == "make":
                inner = make_commands(command)
                report.append(f"make -n: {command} -> {len(inner)} barrierflow/python commands, checked below")
                queue[:0] = inner
            else:
                report.append(f"not run (shell, a server or a container: {argv[0]}): {command}")
        except AssertionError as exc:
            problems.append(str(exc))

    # cheap commands, for real: --help of every subcommand named, plain validate of the shipped
    # specs with the block's PYTHONPATH, init then validate
    for sub in sorted(s for s in subcommands if s):
        with pytest.raises(SystemExit) as done:
            barrierflow_main([*sub.split(" ")[:1], "--help"])
        assert done.value.code == 0
        capsys.readouterr()  # the help text: not part of the report
        report.append(f"ran: barrierflow {sub} --help")
    for spec, (folders, env, deep) in sorted(validated.items()):
        with monkeypatch.context() as patch:
            for folder in sorted(folders | {p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*/")}):
                if not folder.startswith("$"):
                    patch.syspath_prepend(str(ROOT / folder))
            for name, value in {"KAFKA_BOOTSTRAP": "127.0.0.1:9092", **env}.items():
                patch.setenv(name, value)
            code = barrierflow_main(["validate", str(ROOT / spec)])
        if code != 0:
            problems.append(f"barrierflow validate {spec}: exit {code}: {capsys.readouterr().err[-2000:]}")
        elsewhere = ("its --deep check (Spark) runs in tests/examples/test_examples.py" if spec.startswith("examples/")
                     else "its --deep check (Spark) is not run on this spec; tests/ops/test_validate_deep.py tests "
                          "the check")
        report.append(f"ran: barrierflow validate {spec} (exit {code})" + (f"; documented with --deep: {elsewhere}"
                                                                          if deep else ""))
    if "init" in subcommands:
        monkeypatch.chdir(tmp_path)
        assert barrierflow_main(["init", "clicks"]) == 0
        specs = sorted((tmp_path / "clicks").rglob("*.yaml"))
        pipeline_specs = [s for s in specs if "pipelines" in s.parts or s.name == "pipeline.yaml"] or specs
        with monkeypatch.context() as patch:
            # As the project's README says: commands run from its folder, BARRIERFLOW_HOME set to it.
            patch.chdir(tmp_path / "clicks")
            patch.setenv("BARRIERFLOW_HOME", str(tmp_path / "clicks"))
            patch.syspath_prepend(str(tmp_path / "clicks"))
            for spec in pipeline_specs:
                code = barrierflow_main(["validate", str(spec)])
                if code != 0:
                    problems.append(f"barrierflow init clicks; validate {spec.relative_to(tmp_path)}: exit {code}")
                for name in [m for m in sys.modules if m == "clicks" or m.startswith("clicks.")]:
                    del sys.modules[name]  # validate imported the project's package: later inits must not see it
                report.append(f"ran: barrierflow init clicks; barrierflow validate {spec.relative_to(tmp_path)}"
                              f" (exit {code}); the project's own test runs in tests/scaffold/test_init.py")
    for sub, tests in sorted(RUN_ELSEWHERE.items()):
        if sub in subcommands:
            for test in tests:
                path = ROOT / test
                if not path.is_file() or not re.search(CALLS.format(sub=sub), path.read_text(encoding="utf-8")):
                    problems.append(f"barrierflow {sub}: {test} no longer runs it (the docs' {sub} commands "
                                    f"need a test that runs them)")
            report.append(f"barrierflow {sub}: parsed here, run by {', '.join(tests)}")
    for package in sorted((ROOT / "examples").glob("*/*/__init__.py")):
        with monkeypatch.context() as patch:
            patch.syspath_prepend(str(package.parent.parent))
            for module in sorted(package.parent.glob("*.py")):
                name = f"{package.parent.name}.{module.stem}" if module.stem != "__init__" else package.parent.name
                try:
                    importlib.import_module(name)
                except Exception as exc:  # the report names what failed
                    problems.append(f"examples: import {name}: {exc!r}")
                report.append(f"imported: {module.relative_to(ROOT)}")
    report.append("run elsewhere: examples/local_kafka.py (tests/examples/test_local_kafka.py); the example "
                  "pipelines and producers (tests/examples/test_examples.py)")

    text = "\n".join(report)
    print(f"{len(commands)} documented commands; what was checked and run:\n{text}")
    assert len(commands) >= 60, f"the pages have lost their commands:\n{text}"
    assert not problems, "\n".join(problems) + f"\n\nreport:\n{text}"


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[str, argparse.ArgumentParser]]:
    children = _subparsers(parser)
    if not children:
        yield " ".join(path), parser
    for name, child in children.items():
        yield from _leaf_parsers(child, (*path, name))


def test_the_cli_synopsis_names_every_subcommand_and_option() -> None:
    """docs/cli.md's synopsis is complete: a line per subcommand, and each line names every
    option of its subcommand (``--help`` and hidden ones aside)."""
    lines: dict[str, list[str]] = {}
    for command in commands_of(ROOT / "docs" / "cli.md"):
        words = command.argv[1:]
        if command.argv[0] == "barrierflow" and words and not words[0].startswith("-"):
            sub = " ".join(w for w in words[:2] if re.fullmatch(r"[a-z-]+", w))
            lines.setdefault(sub if sub in dict(_leaf_parsers(barrierflow_parser())) else words[0], []).extend(words)
    missing = []
    for sub, parser in _leaf_parsers(barrierflow_parser()):
        words = lines.get(sub)
        if words is None:
            missing.append(f"{sub}: no synopsis line")
            continue
        named = {m.group(0) for w in words for m in re.finditer(r"--[a-z][\w-]*", w)}
        options = {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings
                   if o.startswith("--") and o != "--help"}
        if options - named:
            missing.append(f"{sub}: {', '.join(sorted(options - named))}")
    assert not missing, "docs/cli.md's synopsis lacks: " + "; ".join(missing)
