"""``bench --scenario lake-commit`` runs end to end at a tiny size and reports every step."""

from __future__ import annotations

from pathlib import Path

from bench.lake_commit import run_lake_commit_benchmark


def test_the_scenario_measures_each_step_of_both_formats(tmp_path: Path) -> None:
    lines = run_lake_commit_benchmark(3, markdown=str(tmp_path / "out.md"))
    steps = [line.split("|")[1].strip() for line in lines if line.startswith("| ") and "p50" not in line]
    assert steps == ["iceberg: pre-commit", "iceberg: commit (add_files, ledger, cut)", "delta: pre-commit",
                     "delta: commit (add actions, ledger, cut)", "delta: the same rows written again (write_deltalake)",
                     "four tables (2 iceberg, 2 delta): the checkpoint's four commits, side by side",
                     "two iceberg tables: the checkpoint's two commits, side by side"]
    text = (tmp_path / "out.md").read_text()  # the run's record: the command, its header, the table
    assert text.startswith("`") and text.endswith("\n".join(lines) + "\n")
    assert lines[0].startswith("3 checkpoints per format")
