"""Every operation of barrierflow.ops, one function per operation, on both shapes and without
Spark: a single-stage pipeline's checkpoints and a two-stage pipeline's cuts, both made by the
real coordinator on a hand-written Spark dir (see tests/verification/test_choice.py). Each
result has ``.stages``: one entry for one stage.

What could go wrong and is checked: an operation that still only knows one shape, a result that
loses a stage, a one-stage pipeline that suddenly writes ``global/`` records, a savepoint that
reaches only some stages of a cut, and a JSON document whose shape depends on the pipeline's
(every one has the same top-level keys for both, and ``stages`` with one entry per stage).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.ops.checkpoints import list_checkpoints, show_checkpoint
from barrierflow.ops.cut_history import pipeline_savepoints
from barrierflow.ops.progress import newest_completed_checkpoint, newest_completion_time
from barrierflow.ops.retain import retain
from barrierflow.ops.savepoint import savepoint
from barrierflow.ops.skew import skew
from barrierflow.ops.verify import verify

from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory
from tests.verification.test_choice import _two_stage_cuts


@pytest.fixture
def one(tmp_path: Path) -> Path:
    folder = tmp_path / "one"
    CheckpointFactory(folder).take(3)
    return write_spec(folder, spec_dict(folder, checkpoint={"retained": 2}))


@pytest.fixture
def two(tmp_path: Path) -> Path:
    folder = tmp_path / "two"
    folder.mkdir()
    _two_stage_cuts(folder, 3)
    return folder / "flow.yaml"


def test_list_show_and_progress_of_one_stage_and_of_a_cut(one: Path, two: Path) -> None:
    single, staged = list_checkpoints(one), list_checkpoints(two)
    assert list(single.stages) == ["t"] and list(staged.stages) == ["a", "b"]
    assert [c.checkpoint_id for c in single.cuts] == [c.checkpoint_id for c in staged.cuts] == [1, 2, 3]
    assert [m.checkpoint_id for m in single.stages["t"].completed] == [1, 2, 3]
    assert [m.checkpoint_id for m in staged.stages["b"].completed] == [1, 2, 3]
    document, documents = single.as_dict(), staged.as_dict()  # one shape: the cuts, and each stage's own
    assert set(document) == set(documents) == {"pipeline", "storage", "noun", "attempt", "abandoned", "completed",
                                              "failed", "verification", "skipped", "stages"}
    assert (document["noun"], documents["noun"]) == ("checkpoint", "global checkpoint")
    assert document["stages"]["t"]["completed"][0]["spark_batch_id"] == single.stages["t"].completed[0].spark_batch_id
    assert document["completed"][0]["stages"]["t"]["spark_batch_id"] == single.stages["t"].completed[0].spark_batch_id
    assert documents["attempt"] == 0 and set(documents["stages"]) == {"a", "b"}

    shown, cut = show_checkpoint(one, 2), show_checkpoint(two, 2)
    assert set(shown.stages) == {"t"} and set(cut.stages) == {"a", "b"}
    assert shown.as_dict()["stages"]["t"]["manifest"] == shown.stages["t"].model_dump(mode="json")  # in full
    assert set(shown.as_dict()) == set(cut.as_dict()) and set(cut.as_dict()["stages"]) == {"a", "b"}
    for spec in (one, two):
        assert newest_completed_checkpoint(spec) == 3 and newest_completion_time(spec) is not None


def test_verify_savepoint_retain_and_skew_take_every_stage(one: Path, two: Path) -> None:
    single, staged = verify(one), verify(two)
    assert [r.checkpoint_id for r in single.reports] == [r.checkpoint_id for r in staged.reports] == [1, 2, 3]
    assert not single.failed and not staged.failed
    assert [set(r.stages) for r in staged.reports] == [{"a", "b"}] * 3 and set(single.reports[0].stages) == {"t"}
    one_cut, two_cut = single.as_dict()["reports"][0], staged.as_dict()["reports"][0]
    assert set(one_cut) == set(two_cut) and set(single.as_dict()) == set(staged.as_dict())
    assert one_cut["checks"] == [] and one_cut["stages"]["t"]["checks"]  # a cut of one stage has no cut checks
    assert any(c["name"] == "b: channel-cut" for c in two_cut["checks"]) and set(two_cut["stages"]) == {"a", "b"}

    for spec, names in ((one, {"t"}), (two, {"a", "b"})):
        view = savepoint(spec, 1)
        assert set(view.stages) == names and all(m.kind is CheckpointKind.SAVEPOINT for m in view.stages.values())
        [listed] = pipeline_savepoints(spec)
        assert listed.checkpoint_id == 1 and set(listed.barrier_batches) == names
        assert set(listed.as_dict()) == {"checkpoint_id", "attempt", "completion_time", "barrier_batches"}
        outcome = retain(spec, dry_run=True)
        assert set(outcome.stages) == names and 1 in outcome.plan.savepoints
        report = skew(spec)
        assert set(report.stages) == names
        assert all([c.checkpoint_id for c in r.checkpoints] == [1, 2, 3] for r in report.stages.values())
    retained, retained_two = retain(one, dry_run=True).as_dict(), retain(two, dry_run=True).as_dict()
    assert set(retained) == set(retained_two) and set(retained["stages"]) == {"t"}
    assert retained["deleted"]["checkpoints"] == retained["stages"]["t"]["deleted"]["checkpoints"]
    assert retained["savepoints"] == [1] and retained["kept"] == [2, 3]
    assert retained["deleted"]["global_records"] == 0
    assert set(skew(one).as_dict()) == set(skew(two).as_dict()) == {"pipeline", "passed", "stages"}
    assert not (one.parent / "checkpoints" / "global").exists()  # one stage never writes cut records
