"""A single-stage pipeline's Iceberg and Delta tables as its cuts record them (no Spark): the
Iceberg sink ``ice`` commits every 2 checkpoints with rows, the Delta sink ``dl`` every one;
the sinks are driven through the two-phase-commit template as in ``tests/sinks``.

What the Checkpoints page and ``checkpoints show`` list per cut
(:func:`barrierflow.pipeline.table_cut.cut_table_versions`) is compared with the tables' own
histories read with pyiceberg and ``deltalake``; ``verify``'s table checks
(:func:`barrierflow.verification.tables.table_checks`) pass only when compared, say "not
compared" for a checkpoint ``commit_every`` held, and fail naming the table when its snapshot
expired or its version's files were vacuumed."""

from __future__ import annotations

from pathlib import Path

import yaml
from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.table_cut import COMMITTED, NOT_AT_THIS_CHECKPOINT, cut_table_versions
from barrierflow.verification.report import CheckStatus
from barrierflow.verification.tables import table_checks
from deltalake import DeltaTable

from tests.sinks import test_delta_sink, test_iceberg_sink
from tests.sinks.lake_env import commit, iceberg_pipeline_spec, rows


def test_each_cut_lists_its_table_versions_and_verify_compares_them_with_the_tables(tmp_path: Path) -> None:
    spec_path = iceberg_pipeline_spec(tmp_path)
    data = yaml.safe_load(spec_path.read_text())
    data["sinks"][0]["commit_every"] = 2
    data["sinks"].append({"name": "dl", "type": "delta", "path": f"file://{tmp_path / 'tables' / 'totals'}"})
    spec_path.write_text(yaml.safe_dump(data))
    ice = test_iceberg_sink.make_sink(tmp_path, commit_every=2)
    dl = test_delta_sink.make_sink(tmp_path)
    for checkpoint, keys in ((1, [1, 2]), (2, [3]), (3, [4])):
        commit(ice, checkpoint, checkpoint, rows(keys))
        commit(dl, checkpoint, checkpoint, rows(keys))
    stages = open_pipeline(spec_path).stages

    iceberg = test_iceberg_sink.reader(tmp_path).load_table("lake.totals")
    snapshots = {int(s.summary.additional_properties["barrierflow.checkpoint-id"]): s.snapshot_id
                 for s in iceberg.snapshots()}
    assert list(snapshots) == [2]  # checkpoints 1 and 2 in one commit, 3 held
    delta = DeltaTable(str(tmp_path / "tables" / "totals"))
    versions = {int(h["barrierflow.checkpoint-id"]): int(h["version"]) for h in delta.history()
                if "barrierflow.checkpoint-id" in h}
    assert sorted(versions) == [1, 2, 3]
    for checkpoint in (1, 2, 3):
        tables = {t.sink: t for t in cut_table_versions(stages, checkpoint)}
        assert set(tables) == {"ice", "dl"}
        assert (tables["dl"].status, tables["dl"].version, tables["dl"].committed_with) == (
            COMMITTED, versions[checkpoint], checkpoint)
        if checkpoint == 2:
            assert (tables["ice"].status, tables["ice"].version, tables["ice"].committed_with) == (
                COMMITTED, snapshots[2], 2)
        else:
            assert (tables["ice"].status, tables["ice"].version) == (NOT_AT_THIS_CHECKPOINT, None)
            assert tables["ice"].describe() == "iceberg lake.totals: not committed at this checkpoint (commit_every 2)"
        assert tables["dl"].as_dict()["name"] == f"{stages[0].name}/dl"

    checks = {c.name.rsplit("/", 1)[1]: c for c in table_checks(stages, 2)}
    assert {k: c.status for k, c in checks.items()} == {"ice": CheckStatus.PASSED, "dl": CheckStatus.PASSED}
    held = {c.name.rsplit("/", 1)[1]: c for c in table_checks(stages, 1)}
    assert held["ice"].status is CheckStatus.SKIPPED and held["ice"].message.startswith("not compared")
    assert "every 2 checkpoints" in held["ice"].message
    assert held["dl"].status is CheckStatus.PASSED

    # Checkpoint 4 commits 3 and 4 in one snapshot; then checkpoint 2's snapshot is expired, and
    # the data file of Delta version 1 (checkpoint 1) removed as VACUUM would.
    commit(ice, 4, 4, rows([5]))
    commit(dl, 4, 4, rows([5]))
    test_iceberg_sink.reader(tmp_path).load_table("lake.totals").maintenance.expire_snapshots() \
        .by_id(snapshots[2]).commit()
    def files(version: int) -> set[str]:
        return set(DeltaTable(str(tmp_path / "tables" / "totals"), version=version).get_add_actions(flatten=True)
                   .column("path").to_pylist())

    added = files(versions[1]) - (files(versions[1] - 1) if versions[1] > 0 else set())
    assert added
    for name in added:
        (tmp_path / "tables" / "totals" / name).unlink()
    failed = {c.name.rsplit("/", 1)[1]: c for c in table_checks(stages, 2)}
    assert failed["ice"].status is CheckStatus.FAILED
    assert f"iceberg lake.totals has no snapshot {snapshots[2]}" in failed["ice"].message
    assert "expire Iceberg snapshots" in failed["ice"].message  # the fix
    assert failed["dl"].status is CheckStatus.FAILED and "VACUUM" in failed["dl"].message
    assert str(tmp_path / "tables" / "totals") in failed["dl"].message
    later = {c.name.rsplit("/", 1)[1]: c.status for c in table_checks(stages, 4)}
    assert later == {"ice": CheckStatus.PASSED, "dl": CheckStatus.FAILED}  # version 4 still holds version 1's file


def test_a_cut_naming_a_version_another_checkpoint_wrote_fails_naming_the_property(tmp_path: Path) -> None:
    """The cut record of checkpoint 2 altered to say its snapshot was written by checkpoint 1:
    the snapshot's own ``barrierflow.checkpoint-id`` (2) differs, and verify says which."""
    import json

    spec_path = iceberg_pipeline_spec(tmp_path)
    ice = test_iceberg_sink.make_sink(tmp_path)
    commit(ice, 1, 1, rows([1]))
    commit(ice, 2, 2, rows([2]))
    stages = open_pipeline(spec_path).stages
    record = tmp_path / "store" / "cuts" / f"chk-{2:012d}.json"
    body = json.loads(record.read_text())
    body["tables"]["ice"]["checkpoint_id"] = 1
    record.write_text(json.dumps(body))
    [check] = table_checks(stages, 2)
    assert check.status is CheckStatus.FAILED
    assert "barrierflow.checkpoint-id is '2', the cut expects '1'" in check.message
    assert check.name == f"table {stages[0].name}/ice" and "lake.totals" in check.message
