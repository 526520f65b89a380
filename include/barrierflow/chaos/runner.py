"""The chaos run: a failure-free reference, then the same pipeline under N kills, then the
comparison (see :mod:`barrierflow.chaos` for the method).

Every run is ``barrierflow run COPY --until-exhausted --quiet`` (``--processes`` if asked) in a
process group of its own, with its output in ``<scratch>/logs/``. A run is either

* **timed**: after a random gap in ``[min_gap, max_gap]`` seconds one kill, by the mode:
  ``group`` SIGKILLs the whole process group (driver, its JVM, stage processes, the embedded
  broker's parent), ``stage`` one stage process of ``--processes`` once one has reported
  its query running (chaos waits for that if the gap ends earlier; the supervisor then fails
  the run by itself), ``jvm`` the driver's Spark JVM alone (the Python driver must notice; a
  group kill if the run has no JVM yet); ``mixed`` picks one of those at random for each
  kill (with ``--processes`` half of them stage kills); or
* **armed**: ``BARRIERFLOW_CRASH_AT=POINT@HIT`` (:mod:`barrierflow.faults`), so the run
  SIGKILLs itself at that protocol point; a share ``point_share`` of the kills.

A run that ends without having been killed is either the end (exit 0: the copy's sources are
exhausted and covered by a checkpoint) or a failure chaos reports as such (exit 1 with the
run's log): a restart that cannot restart is a finding, not noise.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml

from barrierflow.chaos.outputs import Rows, prepare_output, read_output, table_commits, unread_output, with_aliases
from barrierflow.chaos.scratch import (
    TABLE_KINDS,
    ChaosRefusedError,
    InputCount,
    ScratchOutput,
    check_judgeable,
    nothing_to_compare,
    scratch_copy,
    stages_of,
)
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.faults import ENV as CRASH_ENV
from barrierflow.faults import POINTS, SINK_POINTS, UPGRADE_POINTS
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spec.loader import load_any_spec, load_spec_data, raw_parts
from barrierflow.spec.models import GeneratorSourceSpec, KafkaSourceSpec
from barrierflow.spec.stages import PipelineSpec

Mode = Literal["group", "stage", "jvm", "mixed"]
#: Seconds a run may take to stop by itself after one of its processes was killed.
AFTER_KILL_TIMEOUT = 120.0
#: Seconds between two looks for a ready stage process while a stage kill waits for one (the
#: run is watched meanwhile: its end stops the wait at once).
READY_POLL = 0.2
MODES: tuple[str, ...] = ("group", "stage", "jvm", "mixed")



def _channel_topics(spec: PipelineSpec) -> dict[str, str]:
    """Each channel's name -> its topic (none for a pipeline without channels)."""
    return {c.name: c.topic_for(spec.name) for c in spec.channels}

class ChaosRunError(BarrierflowError):
    """A run of a chaos copy failed without being killed, or did not end in time; the message
    names the run and ends with its log."""


@dataclass(frozen=True)
class ChaosOptions:
    """How to run chaos; see ``barrierflow chaos --help``."""

    kills: int
    seed: int = 0
    mode: Mode = "group"
    min_gap: float = 5.0
    max_gap: float = 30.0
    point_share: float = 0.25
    processes: bool = False
    scratch: Path | None = None
    run_timeout: float = 1800.0
    #: The protocol points armed runs crash at (None: every point this pipeline reaches).
    points: tuple[str, ...] | None = None
    #: Upgrade mode (:mod:`barrierflow.upgrade.chaos`): the changed spec the copy is
    #: upgraded to, again and again, while the upgrades are killed (None: plain chaos).
    upgrade_to: Path | None = None
    #: Upgrade mode: the checkpoints each upgrade's canary verifies (None: 2).
    canary_checkpoints: int | None = None
    #: Upgrade mode: the most kills one upgrade takes before it is let complete (None: 4).
    kills_per_upgrade: int | None = None

    @property
    def canary(self) -> int:
        return 2 if self.canary_checkpoints is None else self.canary_checkpoints

    @property
    def per_upgrade(self) -> int:
        return 4 if self.kills_per_upgrade is None else self.kills_per_upgrade

    def check(self) -> None:
        """Raises UserInputError naming the option and the fix (``processes`` for a pipeline
        of one stage: :meth:`OpenedPipeline.refuse_stage_processes`, by the runner). Upgrade
        mode (``upgrade_to``) kills ``barrierflow upgrade``'s process group, whose canary runs
        the pipeline in that process: ``--processes`` and the modes other than ``group`` are
        refused with it, and the upgrade-only options and points without it."""
        if self.kills < 1:
            raise UserInputError(f"--kills must be at least 1 (got {self.kills}): without a kill chaos compares two "
                                 "failure-free runs, which proves nothing about recovery")
        if self.mode not in MODES:
            raise UserInputError(f"--mode must be one of {', '.join(MODES)}")
        if not 0 < self.min_gap <= self.max_gap:
            raise UserInputError("--min-gap must be positive and at most --max-gap")
        if not 0 <= self.point_share <= 1:
            raise UserInputError("--point-share must be between 0 and 1")
        if not self.run_timeout > 0:
            raise UserInputError("--run-timeout must be positive (seconds a run may take before chaos stops it)")
        if self.mode == "stage" and not self.processes:
            raise UserInputError("--mode stage kills one stage process: it needs --processes")
        self._check_upgrade()
        known = POINTS + (UPGRADE_POINTS if self.upgrade_to is not None else ())
        unknown = sorted(set(self.points or ()) - set(known))
        if unknown:
            upgrade = [p for p in unknown if p in UPGRADE_POINTS]
            if upgrade:
                raise UserInputError(f"--points: {', '.join(upgrade)} are points of 'barrierflow upgrade', which only "
                                     "the upgrade mode runs: add --upgrade-to NEW_SPEC, or leave them out")
            raise UserInputError(f"--points: unknown protocol point(s) {', '.join(unknown)}; the points are "
                                 f"{', '.join(known)}")

    def _check_upgrade(self) -> None:
        if self.upgrade_to is None:
            named = [flag for flag, value in (("--canary-checkpoints", self.canary_checkpoints),
                                              ("--kills-per-upgrade", self.kills_per_upgrade)) if value is not None]
            if named:
                raise UserInputError(f"{' and '.join(named)} belong to the upgrade mode: add --upgrade-to NEW_SPEC, "
                                     "or leave them out")
            return
        if self.processes:
            raise UserInputError("--processes and --upgrade-to exclude each other: the upgrade's canary runs the "
                                 "pipeline inside 'barrierflow upgrade', which chaos kills as one process group; "
                                 "drop --processes")
        if self.mode != "group":
            raise UserInputError(f"--mode {self.mode} and --upgrade-to exclude each other: the upgrade mode kills the "
                                 "upgrade's whole process group (and arms crash points); drop --mode or give "
                                 "--mode group")
        if self.canary < 1:
            raise UserInputError(f"--canary-checkpoints must be at least 1 with --upgrade-to (got {self.canary}): "
                                 "an upgrade without a canary has no canary to kill")
        if self.per_upgrade < 1:
            raise UserInputError(f"--kills-per-upgrade must be at least 1 (got {self.per_upgrade})")


@dataclass(frozen=True)
class ChaosEvent:
    """Something that happened, ``at`` seconds after the chaos run started."""

    at: float
    kind: str  # start, kill, point, exit, end
    run: int
    detail: str = ""


@dataclass
class OutputComparison:
    """One output of the pipeline, reference against the chaos copy."""

    stage: str
    sink: str
    kind: str
    reference_target: str
    chaos_target: str
    rows_expected: int = 0
    rows: int = 0
    missing: int = 0
    extra: int = 0
    duplicated: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    #: A table output (Iceberg, Delta): the commits of the copy's sink in the table's own history
    #: (None: not a table, no history to check).
    commits: int | None = None
    #: A table output: checkpoint id -> commits, for the checkpoint ids the history holds more
    #: than one commit of (each must have at most one).
    commits_repeated: dict[int, int] = field(default_factory=dict)

    def check_commits(self, commits: Counter[int]) -> None:
        """Fill in the table-history figures from ``commits`` (checkpoint id -> commits)."""
        self.commits = sum(commits.values())
        self.commits_repeated = {cid: n for cid, n in sorted(commits.items()) if n > 1}

    def compare(self, expected: Rows, got: Rows) -> None:
        """Fill in the counts: missing rows, rows the reference never had, rows seen more often."""
        self.rows_expected, self.rows = sum(expected.values()), sum(got.values())
        missing = expected - got
        extra = Counter({row: n for row, n in got.items() if row not in expected})
        duplicated = Counter({row: n - expected[row] for row, n in got.items()
                              if row in expected and n > expected[row]})
        self.missing, self.extra, self.duplicated = (sum(missing.values()), sum(extra.values()),
                                                     sum(duplicated.values()))
        self.examples = {name: sorted(c)[:5] for name, c in
                         (("missing", missing), ("extra", extra), ("duplicated", duplicated)) if c}


@dataclass
class ChaosResult:
    """Everything one chaos run did and found; :attr:`passed` is the verdict."""

    pipeline: str
    spec_path: str
    seed: int
    mode: str
    kills_asked: int
    scratch: str
    started: datetime
    #: The kills that landed, by kind: group, jvm, stage (a timed kill) and point (a run that
    #: crashed itself at a protocol point).
    kills: Counter[str] = field(default_factory=Counter)
    #: The kills as picked, by kind; a pick whose target was not up landed as another kind (a
    #: JVM kill before the run had a JVM as a group kill).
    picked: Counter[str] = field(default_factory=Counter)
    #: The kinds of kill the options could make (listed in the summary even when 0 landed).
    kill_kinds: list[str] = field(default_factory=list)
    runs: int = 0
    checkpoints: int = 0
    checkpoint_times: list[float] = field(default_factory=list)
    seconds: float = 0.0
    reference_seconds: float = 0.0
    outputs: list[OutputComparison] = field(default_factory=list)
    events: list[ChaosEvent] = field(default_factory=list)
    problem: str | None = None
    #: Malformed records in the dead letters of the reference and of the copy under kills,
    #: each counted once (None: not counted yet).
    dead_letters_expected: int | None = None
    dead_letters: int | None = None
    #: Upgrade mode: the spec the copy was upgraded to (None: plain chaos).
    upgrade_to: str | None = None
    #: Upgrade mode: the kills by the step the upgrade record held when each landed (``start``:
    #: no record of this upgrade yet; ``rewrite``, ``canary``, ``commit``, ``rollback``,
    #: ``rolled-back``) and the armed points that landed, by point.
    steps: Counter[str] = field(default_factory=Counter)
    points: Counter[str] = field(default_factory=Counter)
    #: Upgrade mode: one entry per upgrade (from, to, source savepoint, outcome, kills, runs).
    upgrades: list[dict[str, Any]] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        return max(self.runs - 1, 0)

    @property
    def missing(self) -> int:
        return sum(o.missing for o in self.outputs)

    @property
    def extra(self) -> int:
        return sum(o.extra for o in self.outputs)

    @property
    def duplicated(self) -> int:
        return sum(o.duplicated for o in self.outputs)

    @property
    def commits_repeated(self) -> int:
        """Checkpoint ids that a table's own history holds more than one commit of, over all tables."""
        return sum(len(o.commits_repeated) for o in self.outputs)

    @property
    def passed(self) -> bool:
        """No problem, some output compared, no row missing, extra or duplicated, no table with
        more than one commit of a checkpoint, and as many dead letters as the reference."""
        return (self.problem is None and bool(self.outputs) and not (self.missing or self.extra or self.duplicated)
                and not self.commits_repeated and self.dead_letters == self.dead_letters_expected)

    def by_format(self) -> dict[str, dict[str, int]]:
        """The comparison summed per output kind (``parquet``, ``postgres``, ``kafka``,
        ``iceberg``, ``delta``): outputs, rows expected and committed, missing, extra,
        duplicated; for the table formats also the table commits and the checkpoint ids
        committed more than once."""
        found: dict[str, dict[str, int]] = {}
        for o in self.outputs:
            sums = found.setdefault(o.kind, {"outputs": 0, "rows_expected": 0, "rows": 0, "missing": 0, "extra": 0,
                                             "duplicated": 0})
            for key, value in (("outputs", 1), ("rows_expected", o.rows_expected), ("rows", o.rows),
                               ("missing", o.missing), ("extra", o.extra), ("duplicated", o.duplicated)):
                sums[key] += value
            if o.commits is not None:
                sums["commits"] = sums.get("commits", 0) + o.commits
                sums["commits_repeated"] = sums.get("commits_repeated", 0) + len(o.commits_repeated)
        return found

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "spec": self.spec_path, "seed": self.seed, "mode": self.mode,
                "passed": self.passed, "problem": self.problem, "started": self.started.isoformat(),
                "kills_asked": self.kills_asked, "kills": dict(self.kills), "kills_picked": dict(self.picked),
                "kill_kinds": self.kill_kinds, "kills_total": sum(self.kills.values()),
                "runs": self.runs, "restarts": self.restarts, "checkpoints": self.checkpoints,
                "rows_expected": sum(o.rows_expected for o in self.outputs), "rows": sum(o.rows for o in self.outputs),
                "missing": self.missing, "extra": self.extra, "duplicated": self.duplicated,
                "commits_repeated": self.commits_repeated, "formats": self.by_format(),
                "dead_letters_expected": self.dead_letters_expected, "dead_letters": self.dead_letters,
                "seconds": round(self.seconds, 1), "reference_seconds": round(self.reference_seconds, 1),
                "scratch": self.scratch,
                "outputs": [o.__dict__ for o in self.outputs],
                "checkpoint_times": [round(t, 2) for t in self.checkpoint_times],
                "events": [e.__dict__ for e in self.events],
                **({"upgrade_to": self.upgrade_to, "kills_by_step": dict(self.steps),
                    "kills_by_point": dict(self.points), "upgrades": self.upgrades}
                   if self.upgrade_to is not None else {})}


def _run_command(spec_path: Path, processes: bool) -> list[str]:
    return [sys.executable, "-m", "barrierflow.cli.main", "run", str(spec_path), "--until-exhausted", "--quiet",
            *(["--processes"] if processes else [])]


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc), parents first."""
    from barrierflow.chaos.host_loss import process_tree

    return process_tree(pid)[1:]


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _Copy:
    """One scratch copy of the pipeline: its spec file, outputs and store."""

    def __init__(self, raw: dict[str, Any], name: str, root: Path, stamp: str,
                 original: Any = None, file_name: str = "pipeline.yaml") -> None:
        self.root = root
        data, self.outputs = scratch_copy(raw, copy_name=name, root=root, stamp=stamp)
        root.mkdir(parents=True, exist_ok=True)
        (root / "logs").mkdir(exist_ok=True)
        self.spec_path = root / file_name
        self.spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        self.spec = load_any_spec(self.spec_path)
        self.pipeline = open_pipeline(self.spec_path)
        #: The copy's channel topics -> the spec's (rows naming a topic compare across copies).
        theirs = _channel_topics(original) if original is not None else {}
        self.topic_aliases: dict[str, str] = {topic: theirs[name] for name, topic in _channel_topics(self.spec).items()
                                              if name in theirs}
        #: The copy's stages by the spec's stage names (the outputs name those; one stage: the pipeline's).
        self.parts = dict(zip((p.name for p in raw_parts(raw)), self.spec.stages,
                              strict=True))

    def sink_of(self, output: ScratchOutput) -> Any:
        for sink in self.parts[output.stage].sinks:
            if getattr(sink, "name", sink.type) == output.sink:
                return sink
        raise KeyError(output.sink)

    def prepare(self) -> None:
        for output in self.outputs:
            prepare_output(output, self.sink_of(output))

    def rows(self, output: ScratchOutput) -> Rows:
        return with_aliases(read_output(output, self.sink_of(output), self.spec.name), self.topic_aliases)

    def table_commits(self, output: ScratchOutput) -> Counter[int]:
        """Checkpoint id -> commits of the table output ``output`` in the table's own history."""
        return table_commits(output, self.sink_of(output), self.spec.name)

    def dead_letter_uris(self) -> list[str]:
        """Where the copy's runs write malformed records: each stage's ``dead_letter_path`` (of
        several stages: the ``stages/<stage>`` part of the pipeline's), else the default under
        the stage's work dir."""
        return [stage.layout.dead_letter_uri(stage.spec) for stage in self.pipeline.stages]

    def dead_letters(self) -> int:
        """How many malformed records the copy's runs left in its dead letters, each counted
        once (per stage: de-duplicated on source, partition and offset, as replays rewrite them)."""
        from barrierflow.sources.dead_letter import count_dead_letters

        return sum(count_dead_letters(uri) for uri in self.dead_letter_uris())

    def checkpoint_times(self) -> list[datetime]:
        """Completion times of the copy's completed cuts (its checkpoints; of several stages:
        its global checkpoints)."""
        return sorted(m.completion_time for m in self.pipeline.cuts.completed())


def watch_run(process: subprocess.Popen[bytes], deadline: float, log: Path, waiting_for: str, timeout: float) -> bool:
    """One look at a run chaos waits on: True when it ended (by itself) within
    :data:`READY_POLL` s, False when it still runs.

    Raises:
        ChaosRunError: ``deadline`` (``timeout`` s after the wait began) passed; the run is killed
            and the error says what did not happen (``waiting_for``) and quotes its log.
    """
    if time.monotonic() > deadline:
        _kill_group(process)
        process.wait()
        raise ChaosRunError(f"{waiting_for} within --run-timeout ({timeout:g} s; killed); its log {log}:\n"
                            f"{_log_tail(log)}")
    try:
        process.wait(timeout=READY_POLL)
    except subprocess.TimeoutExpired:
        return False
    return True


def _log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


class ChaosRunner:
    """Runs one chaos experiment; :meth:`run` returns the result (see the module docstring)."""

    def __init__(self, spec_path: str | os.PathLike[str], options: ChaosOptions) -> None:
        self.spec_path = Path(spec_path)
        self.spec = load_any_spec(self.spec_path)
        pipeline = open_pipeline(self.spec_path)
        options.check()
        if options.processes:
            pipeline.refuse_stage_processes("--processes")
        self.options = options
        self.kafka_sources = check_judgeable(self.spec)
        self.rng = random.Random(options.seed)
        self.started = datetime.now(UTC)
        self.stamp = self.started.strftime("%Y%m%d%H%M%S")
        self.scratch = options.scratch or (Path(self.spec.work_dir or f"var/{self.spec.name}").resolve().parent
                                           / f"{self.spec.name}-chaos-{self.stamp}")
        self.points = list(pipeline.layout.protocol_points)
        sinks = [sink for _, part in stages_of(self.spec) for sink in part.sinks]
        if any(sink.type == "kafka" for sink in sinks):
            self.points += list(SINK_POINTS["kafka"])
        if any(sink.type == "iceberg" and sink.catalog.atomic for sink in sinks):
            self.points += list(SINK_POINTS["iceberg"])  # between PREPARE and COMMIT PREPARED of a cut
        if options.points:
            self.points = [p for p in self.points if p in options.points] or list(options.points)
        self._t0 = time.monotonic()

    def kill_kinds(self) -> list[str]:
        """The kinds of kill these options can make, sorted: the timed kinds of the mode
        (group for jvm too: a JVM kill before the run has a JVM lands as a group kill) and
        point when ``point_share`` is above 0."""
        timed = {"group": ["group"], "jvm": ["jvm", "group"], "stage": ["stage"],
                 "mixed": ["group", "jvm", *(["stage"] if self.options.processes else [])]}[self.options.mode]
        return sorted({*(timed if self.options.point_share < 1 else []),
                       *(["point"] if self.options.point_share > 0 else [])})

    # -- the runs ---------------------------------------------------------------------------
    def _start(self, copy: _Copy, number: int, crash_at: str | None, command: list[str] | None = None,
               label: str = "run") -> tuple[subprocess.Popen[bytes], Path]:
        """Start ``command`` (default: ``barrierflow run COPY --until-exhausted``) in a process
        group of its own, armed at ``crash_at``, its output in ``logs/<label>-<number>.log``."""
        log = copy.root / "logs" / f"{label}-{number:03d}.log"
        env = {**os.environ}
        env.pop(CRASH_ENV, None)
        if crash_at:
            env[CRASH_ENV] = crash_at
        with log.open("wb") as out:
            process = subprocess.Popen(command or _run_command(copy.spec_path, self.options.processes), stdout=out,
                                       stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return process, log

    def _wait(self, process: subprocess.Popen[bytes], timeout: float, what: str, log: Path) -> int:
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.wait()
            raise ChaosRunError(f"{what} did not end within {timeout:g} s (killed); its log {log}:\n"
                                f"{_log_tail(log)}") from None

    def _event(self, kind: str, run: int, detail: str = "") -> None:
        self.result.events.append(ChaosEvent(round(time.monotonic() - self._t0, 2), kind, run, detail))

    def _timed_kind(self) -> str:
        """The kind of the next timed kill: the mode, or for ``mixed`` one chosen by the seed:
        group or jvm at even odds; with ``--processes`` half the picks are a stage kill (the kind
        only ``--processes`` has), the other half group or jvm."""
        if self.options.mode == "mixed":
            if self.options.processes and self.rng.random() < 0.5:
                return "stage"
            return self.rng.choice(["group", "jvm"])
        return self.options.mode

    def _ready_stages(self, process: subprocess.Popen[bytes], copy: _Copy) -> dict[str, int]:
        """The stage processes of run ``process`` that reported their query running: stage ->
        pid. A ready file counts only when it names a live process of this run, so the file a
        killed run left behind (or its pid, reused since) never does."""
        from barrierflow.workdir.stage_ready import ready_pid

        ours = set(_descendants(process.pid))
        found: dict[str, int] = {}
        for stage in copy.pipeline.stages:  # one stage: its run has no stage process, its file none of ours
            pid = ready_pid(stage.layout.work_dir)
            if pid in ours:
                found[stage.name] = pid
        return found

    def _kill_stage(self, process: subprocess.Popen[bytes], copy: _Copy, deadline: float, log: Path) -> str | None:
        """SIGKILL one stage process of the run once one is ready (it reported its query
        running, :meth:`_ready_stages`), waiting for that while the run goes on; which one, when
        several are, is chosen by the seed. Returns ``stage:<name>``, or None when the run
        ended by itself before any stage was ready.

        Raises:
            ChaosRunError: no stage process was ready by ``deadline`` (the run is killed).
        """
        order = [stage.name for stage in copy.pipeline.stages]
        self.rng.shuffle(order)
        while True:
            ready = self._ready_stages(process, copy)
            for stage in (name for name in order if name in ready):
                try:
                    os.kill(ready[stage], signal.SIGKILL)
                except ProcessLookupError:  # it ended since: another, or wait for the next
                    continue
                return f"stage:{stage}"
            if watch_run(process, deadline, log, f"no stage process of run {self.result.runs} reported ready",
                         self.options.run_timeout):
                return None

    def _kill(self, process: subprocess.Popen[bytes], kind: str) -> str:
        """A timed kill of ``kind`` group or jvm; returns the kind that landed: a JVM kill
        before the run has a JVM lands as a group kill."""
        if kind == "jvm":
            javas = [p for p in _descendants(process.pid) if _command_name(p) == "java"]
            for java in javas:
                try:
                    os.kill(java, signal.SIGKILL)
                except ProcessLookupError:  # it ended since (spark-submit's launcher JVM): the next
                    continue
                return "jvm"
        _kill_group(process)
        return "group"

    def _chaos_runs(self, copy: _Copy) -> None:
        options, number, kills = self.options, 0, 0
        while True:
            number += 1
            self.result.runs = number
            armed = kills < options.kills and self.rng.random() < options.point_share
            crash_at = f"{self.rng.choice(self.points)}@{self.rng.randint(1, 3)}" if armed else None
            process, log = self._start(copy, number, crash_at)
            started = time.monotonic()
            self._event("start", number, crash_at or "")
            if kills < options.kills and not armed:
                gap = self.rng.uniform(options.min_gap, options.max_gap)
                picked = self._timed_kind()
                try:
                    code: int | None = process.wait(timeout=gap)
                except subprocess.TimeoutExpired:
                    code = None
                landed = None
                if code is None:
                    landed = (self._kill_stage(process, copy, started + options.run_timeout, log)
                              if picked == "stage" else self._kill(process, picked))
                if landed is not None:
                    try:  # after a stage or JVM kill the survivors must notice and stop by themselves
                        process.wait(timeout=AFTER_KILL_TIMEOUT)
                    except subprocess.TimeoutExpired:
                        landed += f" (the run did not stop within {AFTER_KILL_TIMEOUT:g} s: group killed)"
                    _kill_group(process)  # whatever the kill left behind
                    process.wait()
                    kills += 1
                    self.result.picked[picked] += 1
                    self.result.kills[landed.split(":")[0].split(" ")[0]] += 1
                    self._event("kill", number, landed)
                    continue
                code = process.wait()  # the run ended before a stage process was ready
            else:
                code = self._wait(process, options.run_timeout, f"run {number}", log)
            _kill_group(process)
            text = _log_tail(log, 200_000)
            if armed and "injected crash at" in text:
                kills += 1
                self.result.picked["point"] += 1
                self.result.kills["point"] += 1
                self._event("point", number, crash_at or "")
                continue
            self._event("exit", number, f"exit {code}")
            if code != 0:
                raise ChaosRunError(f"run {number} of the chaos copy failed without being killed (exit {code}); "
                                    f"its log {log}:\n{_log_tail(log)}")
            if kills < options.kills:
                self.result.problem = (f"the pipeline reached the end of its sources after {kills} of the "
                                       f"{options.kills} kills asked for; give it more input "
                                       "(records_per_partition) or lower --max-gap")
            return

    def run(self) -> ChaosResult:
        """Reference, chaos runs, comparison.

        Raises:
            ChaosRefusedError: the reference run committed no row (nothing to compare; the
                message says why: no input, an output not found, or a transformation that kept
                nothing); no run under kills is made then.
            ChaosRunError: a run failed by itself or hung.
            UserInputError: a missing table/topic to copy, bad options.
            OutputReadError: an output could not be read.
        """
        # The copies live in scratch dirs: what they keep of the spec (sources, suites, TLS files)
        # must point where the spec's own relative paths do.
        # ``${VAR}`` is expanded as ``run`` expands it (the tables and topics to copy are the real ones).
        raw = load_spec_data(self.spec_path)
        self.result = ChaosResult(self.spec.name, str(self.spec_path), self.options.seed, self.options.mode,
                                  self.options.kills, str(self.scratch), self.started, kill_kinds=self.kill_kinds(),
                                  upgrade_to=None if self.options.upgrade_to is None else str(self.options.upgrade_to))
        ends_before = self._end_offsets()
        reference, chaos = (_Copy(raw, "ref", self.scratch / "reference", self.stamp, self.spec),
                            _Copy(raw, "chaos", self.scratch / "chaos", self.stamp, self.spec))
        reference.prepare()
        chaos.prepare()
        begin = time.monotonic()
        process, log = self._start(reference, 0, None)
        code = self._wait(process, self.options.run_timeout, "the reference run", log)
        if code != 0:
            raise ChaosRunError(f"the failure-free reference run failed (exit {code}); its log {log}:\n"
                                f"{_log_tail(log)}")
        self.result.reference_seconds = time.monotonic() - begin
        expected = [reference.rows(output) for output in reference.outputs]
        self.result.dead_letters_expected = reference.dead_letters()
        if not any(expected):
            unread = {f"{o.stage}/{o.sink}": what for o in reference.outputs if (what := unread_output(o))}
            raise ChaosRefusedError(nothing_to_compare(self._input_counts(ends_before), unread,
                                                       self.result.dead_letters_expected)
                                    + f" (The reference copy and its log: {reference.root}.)")
        self._t0, t0_wall = time.monotonic(), time.time()
        try:
            self._chaos_runs(chaos)
        finally:
            self.result.seconds = time.monotonic() - self._t0
        if self._end_offsets() != ends_before:
            self.result.problem = ("the input Kafka topics grew while chaos ran: the two runs read different "
                                   "input, so their outputs cannot be compared; run chaos on a topic nobody writes")
        self.result.dead_letters = chaos.dead_letters()
        times = chaos.checkpoint_times()
        self.result.checkpoints = len(times)
        self.result.checkpoint_times = [max(t.timestamp() - t0_wall, 0.0) for t in times]
        for ref_out, chaos_out, rows in zip(reference.outputs, chaos.outputs, expected, strict=True):
            comparison = OutputComparison(ref_out.stage, ref_out.sink, ref_out.kind, ref_out.target, chaos_out.target)
            comparison.compare(rows, chaos.rows(chaos_out))
            if chaos_out.kind in TABLE_KINDS:
                comparison.check_commits(chaos.table_commits(chaos_out))
            self.result.outputs.append(comparison)
        self._event("end", self.result.runs)
        return self.result

    def _input_counts(self, ends: dict[str, int]) -> list[InputCount]:
        """The records each external source of the spec holds for a run: a generator's
        partitions x ``records_per_partition``; a Kafka source's records from its starting
        offsets to ``ends`` (the end offsets seen before the reference run)."""
        from barrierflow.kafka_io.admin import beginning_offsets
        from barrierflow.kafka_io.partition_ids import partition_id

        counts: list[InputCount] = []
        for _, part in stages_of(self.spec):
            for source in part.sources:
                if isinstance(source, GeneratorSourceSpec):
                    per = source.records_per_partition or 0
                    counts.append(InputCount(f"generator {source.name}", source.partitions * per,
                                             f"{source.partitions} partitions x {per} records"))
                elif isinstance(source, KafkaSourceSpec):
                    starts = beginning_offsets(source)
                    wanted = source.starting_offsets
                    if isinstance(wanted, dict):
                        for topic, by_partition in wanted.items():
                            for partition, offset in by_partition.items():
                                if int(offset) >= 0:
                                    starts[partition_id(topic, int(partition))] = int(offset)
                    spans = {key: (first, ends.get(key, first)) for key, first in sorted(starts.items())}
                    counts.append(InputCount(f"Kafka {source.name}", sum(max(end - first, 0) for first, end in
                                                                         spans.values()),
                                             ", ".join(f"{key} offsets {first}-{end}"
                                                       for key, (first, end) in spans.items())))
        return counts

    def _end_offsets(self) -> dict[str, int]:
        from barrierflow.kafka_io.admin import end_offsets

        found: dict[str, int] = {}
        for source in self.kafka_sources:
            found.update(end_offsets(source))
        return found


def run_chaos(spec_path: str | os.PathLike[str], options: ChaosOptions) -> ChaosResult:
    """Run chaos on the spec at ``spec_path`` (see :class:`ChaosRunner`)."""
    return ChaosRunner(spec_path, options).run()
