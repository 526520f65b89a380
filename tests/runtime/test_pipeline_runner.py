"""The one run driver, without Spark: every shape gets the same :class:`PipelineRunner` and only
who cuts and where the stages run differ (:func:`open_driver` is the one place that says so);
the exhaustion rule and the result are the same for every shape.

What could go wrong and is checked: a shape that gets a driver of its own again (``run
--processes`` included), a one-stage driver whose lease moved (stores and runs of earlier
releases hold it there), an exhaustion rule that stops on the first covering cut, a result that
counts records of stages reading channels as records read by the pipeline, a ``--duration``
clock of ``run --processes`` that no longer counts the stage processes' start-up, and stage
processes (stand-ins that report ready and obey the stop file the way a stage does) whose death
or failed stop the loop lets pass, or that outlive a failed run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.global_manifest import GlobalManifest, global_key
from barrierflow.errors import JobFailedError, UserInputError
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime import pipeline_runner
from barrierflow.runtime.cuts import GlobalCheckpoints as GlobalCuts
from barrierflow.runtime.cuts import OwnCheckpoints as StageCuts
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.runtime.pipeline_runner import PipelineRunner, RunResult, StageResult, StageStats, covered
from barrierflow.runtime.run_driver import open_driver
from barrierflow.runtime.running import RunningPipeline
from barrierflow.runtime.stage_processes import StageProcesses, StageProcessFiles, SupervisedCuts
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.spec.stages import PipelineSpec

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
    # run --processes: the same loop, cut by the supervisor's coordinator, stages in processes.
    processes = open_driver(two, processes=True)
    assert type(processes) is PipelineRunner
    assert isinstance(processes.keeper, SupervisedCuts) and isinstance(processes.host, StageProcesses)
    assert [r.name for r in processes.runners] == ["a", "b"]
    assert processes.lease().path == Path(two.work_dir) / "job.lease"
    with pytest.raises(UserInputError, match="--processes is for pipelines of several stages"):
        open_driver(one, processes=True)
    # a canary's held commits are made by the driver's sinks: never silently dropped in processes
    with pytest.raises(UserInputError, match=r"held commits.*without --processes"):
        open_driver(two, processes=True, hold_commits=True)


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


#: A stand-in for ``barrierflow run SPEC --stage NAME``: reports its query running the way a stage
#: does (the ready file), then, by its third argument: ``die`` exits 3 at once; ``ok`` waits for
#: the stop file and exits 0; ``sink`` waits for it and exits 1 naming a failed sink commit (what a
#: final stage does when its last commit fails).
STAGE = """
import json, os, sys, time
work, how = sys.argv[1], sys.argv[2]
if how == "refuse":
    print("error: stage b of pipeline flow: the spec changed what its saved state was built with", flush=True)
    sys.exit(2)
with open(os.path.join(work, ".ready.tmp"), "w") as out:
    json.dump({"pid": os.getpid()}, out)
os.replace(os.path.join(work, ".ready.tmp"), os.path.join(work, "_process_ready.json"))
if how == "die":
    print("stage lost its executor", flush=True)
    sys.exit(3)
while not os.path.exists(os.path.join(work, "_process_stop.json")):
    time.sleep(0.02)
if how == "sink":
    print("SinkCommitFailedError: sink out could not commit epoch 1", flush=True)
    sys.exit(1)
"""


class StandInProcesses(StageProcesses):
    """Stage processes that run :data:`STAGE` (``how``: by stage name) instead of a Spark stage."""

    def __init__(self, keeper: GlobalCuts, how: dict[str, str]) -> None:
        super().__init__(keeper, start_timeout=120.0, stop_timeout=120.0)
        self.how = how

    def command(self, stage: StageRunner) -> list[str]:
        return [sys.executable, "-c", STAGE, str(stage.layout.work_dir), self.how[stage.name]]


class StoredCuts(GlobalCuts):
    """Who cuts, without Kafka or stage processes that snapshot: the global checkpoints already
    in the store complete one per tick (``done``: how many ticks before cuts complete; None: never)."""

    def __init__(self, job: RunningPipeline, done: int | None) -> None:
        super().__init__(job)
        self.done, self.ticks, self.events = done, 0, list[str]()
        self.stored = sorted(job.global_checkpoints())

    follows_cuts = True  # the restore at start only loads the attempt

    def start(self, *, checkpoints: int | None) -> None:
        self.events.append("start")

    def queries_started(self) -> None:
        # The pipeline coordinator starts only once every stage process reported ready.
        assert all(StageProcessFiles(s.layout.work_dir).ready_pid() for s in self.pipeline.stages)
        self.events.append("queries started")

    def tick(self) -> None:
        self.ticks += 1

    @property
    def completed(self) -> list[GlobalManifest]:
        if self.done is None or self.ticks < self.done:
            return []
        return [GlobalManifest.model_validate_json(self.pipeline.objects.get_bytes(global_key(c, "_metadata")))
                for c in self.stored]

    def progress(self, stats: dict[str, StageStats], elapsed: float) -> str:
        return f"tick {self.ticks}"


class FakeClock:
    """The run loop's ``time``: :meth:`sleep` moves :meth:`monotonic` on, nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class SlowStart(StandInProcesses):
    """Stage processes whose start-up takes 500 s of ``clock`` (the run loop's)."""

    def __init__(self, keeper: GlobalCuts, how: dict[str, str], clock: FakeClock) -> None:
        super().__init__(keeper, how)
        self.clock = clock

    def start(self, started: float) -> None:
        super().start(started)
        self.clock.now += 500.0


def _staged_job(tmp_path: Path) -> RunningPipeline:
    pipeline, _ = _two_stage_cuts(tmp_path, 1, bootstrap="localhost:9092")
    assert isinstance(pipeline.spec, PipelineSpec)
    return StagedPipelineJob(pipeline.spec, spec_path=pipeline.spec_path).pipeline


def test_run_processes_goes_through_the_one_loop_and_stops_its_stage_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(pipeline_runner, "time", clock)  # the run loop's clock only
    job = _staged_job(tmp_path)
    keeper = StoredCuts(job, done=3)
    host = SlowStart(keeper, {"a": "ok", "b": "ok"}, clock)
    lines: list[Any] = []
    result = PipelineRunner(keeper, host).run(checkpoints=1, progress=lines.append, progress_every=60)

    assert keeper.events == ["start", "queries started"] and keeper.ticks == 3
    # The stop protocol: every stage was asked to stop at the last completed cut and exited 0.
    assert [p.files.stop_requested() for p in host.processes] == [1, 1]
    assert [p.process.returncode for p in host.processes] == [0, 0]
    # One line, at the limit: the first is due a minute after the stages run, not on the first
    # tick after their 500 s start-up.
    assert lines == ["tick 3"]
    assert [c.checkpoint_id for c in result.completed] == [1] and result.source_stages == ("a",)
    assert {name: [m.checkpoint_id for m in s.completed] for name, s in result.stages.items()} == {"a": [1], "b": [1]}


def test_a_dead_stage_process_fails_the_run_and_the_others_are_killed(tmp_path: Path) -> None:
    job = _staged_job(tmp_path)
    keeper = StoredCuts(job, done=None)
    host = StandInProcesses(keeper, {"a": "ok", "b": "die"})
    with pytest.raises(JobFailedError) as failed:
        PipelineRunner(keeper, host).run()
    message = str(failed.value)
    assert "stage b of pipeline flow exited before the run ended (exit status 3)" in message
    assert "stage lost its executor" in message  # the last lines of its log
    assert host.processes[0].process.poll() is not None  # stage a was killed, not asked to stop
    assert host.processes[0].files.stop_requested() is None


def test_a_stage_process_that_refuses_its_input_fails_the_run_as_bad_input_before_any_cut(tmp_path: Path) -> None:
    """A stage process exits 2 before its query starts (its saved state cannot honour the spec):
    the run fails with UserInputError (exit 2) quoting it, the pipeline coordinator never started."""
    job = _staged_job(tmp_path)
    keeper = StoredCuts(job, done=1)
    host = StandInProcesses(keeper, {"a": "ok", "b": "refuse"})
    with pytest.raises(UserInputError) as refused:
        PipelineRunner(keeper, host).run()
    message = str(refused.value)
    assert "stage b of pipeline flow refused its input and exited (exit status 2)" in message, message
    assert "the spec changed what its saved state was built with" in message, message
    assert keeper.events == ["start"] and keeper.ticks == 0


def test_a_final_stage_that_stops_on_a_failed_sink_commit_fails_the_run_quoting_it(tmp_path: Path) -> None:
    job = _staged_job(tmp_path)
    keeper = StoredCuts(job, done=1)
    host = StandInProcesses(keeper, {"a": "ok", "b": "sink"})
    with pytest.raises(JobFailedError) as failed:
        PipelineRunner(keeper, host).run(checkpoints=1)
    message = str(failed.value)
    assert "stage b of pipeline flow stopped with exit status 1" in message
    assert "SinkCommitFailedError: sink out could not commit epoch 1" in message
    assert all(p.process.poll() is not None for p in host.processes)


def test_the_duration_clock_of_a_run_counts_the_start_of_its_stages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--duration`` starts after the restore at start and before the stages (their queries,
    or their processes) start, in every shape: a start-up longer than the duration ends the run
    on its first tick."""
    clock = FakeClock()
    monkeypatch.setattr(pipeline_runner, "time", clock)  # the run loop's clock only
    job = _staged_job(tmp_path)
    keeper = StoredCuts(job, done=None)
    host = SlowStart(keeper, {"a": "ok", "b": "ok"}, clock)
    result = PipelineRunner(keeper, host).run(duration=60)
    assert keeper.ticks == 1 and result.elapsed_seconds == 500.0
    assert [p.process.returncode for p in host.processes] == [0, 0]


def test_a_stage_processs_key_figures_reach_the_supervisor_through_its_progress_file(tmp_path: Path) -> None:
    """The keys a stage process's keyed functions started, expired and hold travel in its
    progress file; a stage without a keyed function reports none."""
    from barrierflow.runtime.progress import StageProgress

    files = StageProcessFiles(tmp_path)
    files.write_progress(StageProgress("b", 7, 12.5, 3, records=40, batches=8, keys_started=11, keys_expired=4,
                                       keys_live=7))
    read = files.progress("b")
    assert (read.keys_started, read.keys_expired, read.keys_live, read.records, read.batches) == (11, 4, 7, 40, 8)
    files.write_progress(StageProgress("b", 8, 1.0, 3, records=41, batches=9))
    read = files.progress("b")
    assert (read.keys_started, read.keys_expired, read.keys_live) == (None, None, None)


def test_the_steady_rate_ends_with_the_last_batch_that_read_records(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that read nothing (one that only carried a barrier after the input ran dry) does
    not stretch the run's steady seconds: they end at the commit of the last batch with records."""
    import json
    from types import SimpleNamespace

    (tmp_path / "offsets").mkdir()
    for batch, end in ((0, 100), (1, 300), (2, 500), (3, 500)):
        (tmp_path / "offsets" / str(batch)).write_text(
            "v1\n{}\n" + json.dumps({"partitions": {"0": end, "1": end}, "barrier": batch}), encoding="utf-8")
    now = [10.0]
    monkeypatch.setattr(pipeline_runner.time, "monotonic", lambda: now[0])
    runner = SimpleNamespace(latest_batch=None, layout=SimpleNamespace(spark_checkpoint=tmp_path))
    stats = StageStats(last_commit_mono=now[0])
    for batch, at in ((0, 11.0), (1, 13.0), (2, 15.0), (3, 19.0)):  # batch 3 read nothing
        now[0], runner.latest_batch = at, batch
        stats.committed(runner)  # type: ignore[arg-type]
    assert (stats.first_batch_mono, stats.first_batch_records) == (11.0, 200)
    assert (stats.last_commit_mono, stats.records, stats.latest_batch) == (15.0, 1000, 3)
