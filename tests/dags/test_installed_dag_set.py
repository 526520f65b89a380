"""Which DAGs an install lists: those of the pipelines its user configured, plus the extras a spec
opts into. The DAG file reads ``$BARRIERFLOW_PIPELINES_DIR``, default ``$BARRIERFLOW_HOME/pipelines``
(never the repository's example and benchmark specs); the chaos DAG is made only for a spec with
``chaos: {dag: true}``, which needs scratch servers for its PostgreSQL and Kafka sinks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dags.conftest import DAGS_FOLDER, parse_dags, spec_yaml

#: The DAGs of one single-stage pipeline without a Parquet sink (spec_yaml's sink discards).
STREAMING = ("pipeline", "supervise", "verify", "retain", "recover", "reconcile", "skew", "stop", "upgrade")


def _ids(name: str, *kinds: str) -> set[str]:
    return {f"barrierflow_{kind}__{name}" for kind in kinds}


def _fresh_install(monkeypatch: pytest.MonkeyPatch, home: Path) -> Any:
    """dags/ parsed as on an install that sets BARRIERFLOW_HOME and nothing else."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.delenv("BARRIERFLOW_PIPELINES_DIR", raising=False)
    monkeypatch.setenv("BARRIERFLOW_HOME", str(home))
    return DagBag(dag_folder=DAGS_FOLDER, safe_mode=False)


def test_a_fresh_install_lists_only_the_users_pipelines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "orders.yaml").write_text(spec_yaml("orders"), encoding="utf-8")
    bag = _fresh_install(monkeypatch, tmp_path)
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == _ids("orders", *STREAMING)  # no chaos DAG, no demo or benchmark DAG


def test_an_install_without_a_pipelines_folder_lists_no_dag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bag = _fresh_install(monkeypatch, tmp_path)
    assert bag.import_errors == {}
    assert bag.dag_ids == []


def test_a_plain_spec_gets_no_chaos_dag_and_one_that_opts_in_does(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path) -> None:
    (pipelines_dir / "orders.yaml").write_text(spec_yaml("orders"), encoding="utf-8")
    assert set(parse_dags(monkeypatch, pipelines_dir).dag_ids) == _ids("orders", *STREAMING)

    (pipelines_dir / "orders.yaml").write_text(spec_yaml("orders") + "chaos:\n  dag: true\n", encoding="utf-8")
    bag = parse_dags(monkeypatch, pipelines_dir)
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == _ids("orders", *STREAMING, "chaos")
    chaos = bag.dags["barrierflow_chaos__orders"]
    assert chaos.schedule is None and chaos.task_ids == ["chaos"] and "chaos" in chaos.tags


def test_opting_in_with_a_postgres_sink_needs_a_scratch_database(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    postgres = spec_yaml("orders").replace("  - type: discard\n", "  - type: postgres\n    table: totals\n")
    (pipelines_dir / "orders.yaml").write_text(postgres + "chaos:\n  dag: true\n", encoding="utf-8")
    bag = parse_dags(monkeypatch, pipelines_dir)
    assert set(bag.dag_ids) == {"barrierflow_pipeline__orders"}  # the spec does not load: one failing DAG
    refused = bag.dags["barrierflow_pipeline__orders"]
    assert "invalid-spec" in refused.tags
    with pytest.raises(AirflowFailException, match=r"sink 'postgres': set chaos\.postgres_dsn_env"):
        refused.get_task("invalid_spec").python_callable()

    scratch = postgres + "chaos:\n  dag: true\n  postgres_dsn_env: CHAOS_SCRATCH_DSN\n"
    (pipelines_dir / "orders.yaml").write_text(scratch, encoding="utf-8")
    assert set(parse_dags(monkeypatch, pipelines_dir).dag_ids) == _ids("orders", *STREAMING, "chaos")
