"""Loading a pipeline spec file into a :class:`PipelineSpec`, and resolving its paths.

Contract: :func:`load_any_spec` returns a :class:`PipelineSpec` for every YAML: a multi-stage
YAML (``stages`` and ``channels``) as written, a single-stage YAML (``sources``,
``transformation``, ``sinks`` at the top level) as a pipeline of one stage named after it with
no channels (:func:`barrierflow.spec.stages.one_stage_pipeline`). The YAML's shape is read here,
once. :func:`load_spec` gives the runnable :class:`StageSpec` of a single-stage YAML (what a
test or a benchmark builds a job on). Both either return a valid spec or raise
:class:`SpecError` whose message names the file, each offending field (dotted path; for a
multi-stage graph also the stage or channel) and what is allowed. A spec they return has every
relative path made absolute against the spec file's home (:mod:`barrierflow.spec.paths`:
``$BARRIERFLOW_HOME``, else the spec file's folder).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from barrierflow.errors import SpecError
from barrierflow.spec.client_options import SECRET_FIELDS
from barrierflow.spec.graph import build_graph
from barrierflow.spec.models import StageSpec
from barrierflow.spec.paths import project_home, resolve_spec_paths, spec_home
from barrierflow.spec.stages import PipelineSpec, is_staged, one_stage_pipeline

__all__ = ["RawPart", "load_any_spec", "load_spec", "load_spec_data", "parse_any_spec", "parse_spec",
           "parse_staged_spec", "project_home", "raw_parts", "spec_home"]

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(value: Any, path: str, problems: list[tuple[str, str]], *, keep_secrets: bool = False) -> Any:
    """Expand ``${VAR}`` and ``${VAR:-default}`` in every string of the parsed YAML
    (``keep_secrets``: except in the values of :data:`SECRET_FIELDS`, which stay as written)."""
    if isinstance(value, dict):
        return {k: v if keep_secrets and k in SECRET_FIELDS
                else _expand_env(v, f"{path}.{k}" if path else str(k), problems, keep_secrets=keep_secrets)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{path}.{i}", problems, keep_secrets=keep_secrets) for i, v in enumerate(value)]
    if isinstance(value, str):
        def repl(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            problems.append((path, f"environment variable {name} is not set (export it, or write "
                                   f"'${{{name}:-default}}' in the spec)"))
            return match.group(0)
        return _ENV.sub(repl, value)
    return value


def _format_error(err: Any) -> tuple[str, str]:
    loc = [str(p) for p in err["loc"]]
    # Drop pydantic's union-member tags (e.g. "generator") after a list index for readability.
    field = ".".join(loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        return field, "unknown field (check the spelling; see docs/pipeline-spec.md for the fields)"
    if kind == "missing":
        return field, "required field is missing"
    message = err["msg"].removeprefix("Value error, ")
    secret = any(p in SECRET_FIELDS for p in loc)  # a password given literally is never repeated
    if "input" in err and kind not in ("union_tag_invalid",) and not secret:
        message += f" (got {err['input']!r})" if not isinstance(err["input"], dict | list) else ""
    return field, message


def _prepared(data: Any, path: str, home: Path | None, *, keep_secrets: bool = False) -> dict[str, Any]:
    """``data`` checked to be a mapping, with ``${VAR}`` expanded (``keep_secrets``: not in
    secret fields) and (``home`` given) its relative paths resolved against ``home``; raises
    SpecError."""
    if not isinstance(data, dict):
        raise SpecError(path, [("(top level)", "a spec is a YAML mapping of fields to values")])
    problems: list[tuple[str, str]] = []
    expanded = _expand_env(data, "", problems, keep_secrets=keep_secrets)
    if problems:
        raise SpecError(path, problems)
    return expanded if home is None else resolve_spec_paths(expanded, home)


def parse_spec(data: Any, path: str = "<spec>", *, home: Path | None = None) -> StageSpec:
    """Validate already-parsed YAML ``data`` of a single-stage spec; see :func:`load_spec`.
    ``home``: resolve its relative paths against it (None: they stay relative)."""
    data = _prepared(data, path, home)
    if is_staged(data):
        raise SpecError(path, [("stages", "this is a pipeline of several stages, and this function takes a "
                                "single-stage spec (sources, transformation, sinks at the top level); "
                                "barrierflow.spec.load_any_spec reads both, as every barrierflow command does")])
    try:
        return StageSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(path, [_format_error(e) for e in exc.errors()]) from None


def parse_staged_spec(data: Any, path: str = "<spec>", *, home: Path | None = None) -> PipelineSpec:
    """Validate already-parsed YAML ``data`` of a multi-stage spec: its fields, then its
    graph (:func:`barrierflow.spec.graph.build_graph`). Raises SpecError naming every problem.
    ``home`` as for :func:`parse_spec`."""
    data = _prepared(data, path, home)
    # One stage without channels is written as a single-stage YAML, whose stage keeps its own
    # checkpoints; stages without channels between them (each reading its own source) are a
    # pipeline whose global checkpoints cut across all of them.
    alone = isinstance(data.get("stages"), list) and len(data["stages"]) == 1
    missing = [] if data.get("channels") or not alone else [
        ("channels", "a pipeline of one stage without channels is written as a single-stage YAML (its source, "
                     "transformation and sinks at the top level); add the channels of its stages or write it that "
                     "way")]
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(path, missing + [_format_error(e) for e in exc.errors()]) from None
    if missing:
        raise SpecError(path, missing)
    _graph, problems = build_graph(spec)
    if problems:
        raise SpecError(path, problems)
    return spec


def parse_any_spec(data: Any, path: str = "<spec>", *, home: Path | None = None) -> PipelineSpec:
    """The pipeline of a single-stage or a multi-stage YAML, told apart by the ``stages`` field
    (module docstring)."""
    if is_staged(data):
        return parse_staged_spec(data, path, home=home)
    return one_stage_pipeline(parse_spec(data, path, home=home))


def _read_yaml(path: str | os.PathLike[str]) -> Any:
    spec_path = Path(path)
    try:
        text = spec_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), [("(file)", "no such file; give the path of a pipeline YAML "
                                               "such as include/pipelines/demo.yaml")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), [("(file)", f"is not UTF-8 text ({exc.reason} at byte {exc.start}): "
                                               "save the spec as UTF-8 YAML")]) from None
    except OSError as exc:
        raise SpecError(str(path), [("(file)", f"cannot be read: {exc}")]) from None
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise SpecError(str(path), [("(file)", f"is not valid YAML: {exc}")]) from None


def _home(path: str | os.PathLike[str], home: str | os.PathLike[str] | None) -> Path:
    return Path(home).resolve() if home is not None else spec_home(path)


def load_spec(path: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None) -> StageSpec:
    """Read and validate the single-stage YAML spec at ``path``.

    Relative paths resolve against ``home``, by default
    :func:`~barrierflow.spec.paths.spec_home` (``$BARRIERFLOW_HOME``, else the file's folder).

    Raises:
        SpecError: the file is missing, is not YAML, is a multi-stage spec, or a field is wrong.
    """
    return parse_spec(_read_yaml(path), str(path), home=_home(path, home))


def load_any_spec(path: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None) -> PipelineSpec:
    """Read and validate the YAML spec at ``path``, single-stage or multi-stage, as a pipeline
    (module docstring); relative paths resolve as for :func:`load_spec`.

    Raises:
        SpecError: the file is missing, is not YAML, a field is wrong, or (multi-stage) the
            graph breaks a rule of :mod:`barrierflow.spec.graph`.
    """
    return parse_any_spec(_read_yaml(path), str(path), home=_home(path, home))


def load_spec_data(path: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The mapping :func:`load_any_spec` validates, for tools that rewrite a spec and run the
    result (``chaos`` copies): read, ``${VAR}`` expanded as :func:`load_any_spec` expands it, and
    relative paths resolved against ``home`` (as for :func:`load_spec`). Secret fields
    (:data:`~barrierflow.spec.kafka_client.SECRET_FIELDS`) stay as written, so that a rewritten
    spec file never holds a password taken from the environment; the run that loads it expands
    them then.

    Raises:
        SpecError: the file is missing, is not a YAML mapping, or names an unset environment
            variable without a default. The fields are not validated: load the spec for that.
    """
    return _prepared(_read_yaml(path), str(path), _home(path, home), keep_secrets=True)


@dataclass(frozen=True)
class RawPart:
    """One stage of a parsed (not yet loaded) spec, for tools that rewrite a spec's YAML
    (``chaos`` copies): its ``name``, its mapping ``data`` (a single-stage YAML: the spec's own)
    and ``where``: the path to that mapping in the spec's data (``("stages", index)``, or ``()``
    for a single-stage YAML, whose stage fields are top-level)."""

    name: str
    data: dict[str, Any]
    where: tuple[str | int, ...]


def raw_parts(data: dict[str, Any]) -> list[RawPart]:
    """The stages of the parsed spec ``data``, in its order (a stage without a name is named
    after the pipeline); the YAML's shape is read here, as :func:`parse_any_spec` reads it."""
    if is_staged(data):
        return [RawPart(str(stage.get("name", data.get("name"))), stage, ("stages", index))
                for index, stage in enumerate(data["stages"])]
    return [RawPart(str(data.get("name")), data, ())]
