"""The one run driver, without Spark: every shape gets the same :class:`PipelineRunner` and only
who cuts differs (:func:`open_driver` is the one place that says so); the exhaustion rule and
the result are the same for both.

What could go wrong and is checked: a shape that gets a driver of its own again, a one-stage
driver whose lease moved (stores and runs of earlier releases hold it there), an exhaustion rule
that stops on the first covering cut, and a result that counts records of stages reading
channels as records read by the pipeline.
"""

from __future__ import annotations

from pathlib import Path

from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime.job import StageCuts
from barrierflow.runtime.pipeline import GlobalCuts
from barrierflow.runtime.pipeline_runner import PipelineRunner, RunResult, StageResult, covered
from barrierflow.runtime.run_driver import open_driver

from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.test_choice import _two_stage_cuts


def test_every_shape_gets_the_one_driver_and_only_who_cuts_differs(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = open_pipeline(write_spec(tmp_path / "one", spec_dict(tmp_path / "one")))
    two, _ = _two_stage_cuts(tmp_path / "two", 1, bootstrap="localhost:9092")

    single, staged = open_driver(one), open_driver(two)
    assert type(single) is type(staged) is PipelineRunner
    assert isinstance(single.keeper, StageCuts) and isinstance(staged.keeper, GlobalCuts)
    assert [r.name for r in single.runners] == ["t"] and [r.name for r in staged.runners] == ["a", "b"]
    # Both leases live where they always did: the pipeline's work dir and its checkpoint storage.
    assert single.lease().path == Path(one.work_dir) / "job.lease"
    assert staged.lease().path == Path(two.work_dir) / "job.lease"
    assert single.keeper.is_source(single.runners[0])
    assert [staged.keeper.is_source(r) for r in staged.runners] == [True, False]


def test_a_run_with_until_exhausted_stops_at_the_second_covering_cut() -> None:
    assert not covered([1, 2, 3], lambda cut: cut == 3)
    assert covered([1, 2, 3], lambda cut: cut >= 2)


def test_one_result_counts_what_the_source_stages_read_and_lists_every_stage() -> None:
    result = RunResult("p", 10.0, stages={"a": StageResult(3, 300, 200, 2.0), "b": StageResult(5, 999, 900, 4.0)},
                       source_stages=("a",))
    assert (result.batches, result.records, result.throughput) == (3, 300, 100.0)
    assert result.stage_manifests == {"a": [], "b": []}
    document = result.as_dict()
    assert document["pipeline"] == "p" and document["records"] == 300
    assert document["stages"]["b"] == {"batches": 5, "records": 999, "steady_records": 900, "steady_seconds": 4.0,
                                       "completed": []}
