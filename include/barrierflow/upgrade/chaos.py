"""``barrierflow chaos SPEC --upgrade-to NEW_SPEC``: ``barrierflow upgrade`` killed at random steps.

The reference is what :class:`~barrierflow.chaos.runner.ChaosRunner` makes for plain chaos: a
failure-free, **never upgraded** copy of SPEC run to the end of its bounded input. Not a copy
upgraded without kills: an upgrade that keeps state (a rescale, a change the report calls
compatible) must leave the output exactly what the pipeline would have written without it, and
a defect of the upgrade itself (a key lost by the rescale, an epoch committed twice by the
canary's commit) would be in an upgraded reference too and cancel out. A canary that fails
rolls back to SPEC, so the never-upgraded run is the expected output then as well. Hence the
new spec must keep the rows the old one writes (same sinks, a change that keeps the output,
such as a rescale of the shuffle partitions); chaos checks that both write the same outputs.

The copy under kills (the same scratch copy as plain chaos, ``chaos/``; NEW_SPEC copied beside
it as ``chaos/upgrade.yaml`` into the same stores, as an upgrade keeps the pipeline's) goes
through *upgrades*, each:

1. ``barrierflow run CURRENT --checkpoints 2`` (no kill), then a savepoint of its newest
   checkpoint (:func:`barrierflow.retention.savepoint.promote_cut`, what ``barrierflow stop
   --savepoint`` leaves);
2. ``barrierflow upgrade CURRENT --to TARGET --canary-checkpoints C`` in a process group of its
   own, killed up to ``--kills-per-upgrade`` times (while kills of ``--kills`` are left), then
   run unkilled until it ends: each run is either *timed* (SIGKILL of the group; in a run whose
   upgrade has still to rewrite, aimed at the rewrite: once the run holds the pipeline's lease
   with the record at ``report``, up to :data:`REWRITE_AIM` s later, as the rewrite is short
   beside the JVM start and would rarely be hit otherwise; in any other run after a gap in
   ``[min-gap, max-gap]`` s, landing in whatever the upgrade is doing: the JVM start and
   compatibility report, the restore, the canary, the commit or the rollback) or
   *armed* (``--point-share`` of them: ``BARRIERFLOW_CRASH_AT=POINT@HIT`` at a point the
   upgrade's recorded step can still reach: ``upgrade_mid_rewrite`` (a rewrite's parts stored, its
   savepoint not yet recorded), ``upgrade_after_rewrite``, a protocol point of the
   canary's checkpoints (``mid_epoch``, ``during_upload``, ``after_precommit``,
   ``after_manifest``, ``after_global_manifest`` of several stages), ``upgrade_before_commit``,
   ``upgrade_mid_rollback``; ``--points`` restricts them). After each kill the same command
   runs again, so it continues from the recorded step;
3. a passed upgrade (exit 0) makes TARGET the current spec, and the next upgrade goes back
   (NEW_SPEC -> SPEC: a rescale back); a rolled-back one (exit 1, the canary failed) leaves SPEC
   current, and the next upgrade tries NEW_SPEC again from a new savepoint.

When ``--kills`` kills landed, the current spec runs to the end of its input
(``barrierflow run --until-exhausted``) and the outputs are compared with the reference. Each
kill is counted by kind (``group``: timed, ``point``: armed), by the step the upgrade record
held when it landed (``start``: no record of this upgrade yet, or ``report`` recorded but the
process not yet rewriting: it was starting or reporting; ``rewrite``; ``canary``: restore and
canary; ``commit``; ``rollback``; ``rolled-back``), and armed ones by point. Any other end
of an upgrade run (a refusal, exit 2; a crash not injected) stops chaos with the run's log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from barrierflow.chaos.runner import (
    ChaosOptions,
    ChaosResult,
    ChaosRunError,
    ChaosRunner,
    _Copy,
    _kill_group,
    _log_tail,
    watch_run,
)
from barrierflow.chaos.scratch import check_judgeable, scratch_copy
from barrierflow.errors import UserInputError
from barrierflow.faults import SINK_POINTS, UPGRADE_POINTS
from barrierflow.lease import lease_holder
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spec.loader import load_any_spec, load_spec_data
from barrierflow.upgrade.record import UpgradeStep, read_record

__all__ = ["UPGRADE_AFTER", "UpgradeChaosRunner", "run_upgrade_chaos"]

#: Completed checkpoints the current spec makes before each upgrade's savepoint.
UPGRADE_AFTER = 2
#: Longest delay (s) of a timed kill aimed at the rewrite after the rewrite began.
REWRITE_AIM = 2.0
#: Upgrades in a row that complete without a kill before chaos gives up (the gaps are too long).
IDLE_UPGRADES = 3
#: The step names kills are counted under, by the recorded step.
STEP_NAMES = {UpgradeStep.REPORT: "rewrite", UpgradeStep.REWRITTEN: "rewrite",
              UpgradeStep.CANARY_RUNNING: "canary", UpgradeStep.CANARY_PASSED: "commit",
              UpgradeStep.ROLLING_BACK: "rollback", UpgradeStep.ROLLED_BACK: "rolled-back"}
#: Protocol points the canary never reaches: its final sinks hold their commits.
_NOT_IN_CANARY = frozenset({"mid_sink_commit", *(p for points in SINK_POINTS.values() for p in points)})


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "barrierflow.cli.main", *args]


class UpgradeChaosRunner(ChaosRunner):
    """Plain chaos's reference, copies and comparison, with the runs under kills replaced by
    upgrades under kills (module docstring)."""

    def __init__(self, spec_path: str | os.PathLike[str], options: ChaosOptions) -> None:
        super().__init__(spec_path, options)
        assert options.upgrade_to is not None
        self.new_spec_path = Path(options.upgrade_to)
        new_spec = load_any_spec(self.new_spec_path)
        if new_spec.name != self.spec.name:
            raise UserInputError(f"--upgrade-to {self.new_spec_path} names pipeline {new_spec.name!r}, {spec_path} "
                                 f"pipeline {self.spec.name!r}: an upgrade keeps the pipeline's name; give a changed "
                                 "spec of the same pipeline")
        check_judgeable(new_spec)
        self.new_raw = load_spec_data(self.new_spec_path)
        old_raw = load_spec_data(self.spec_path)
        root = self.scratch / "chaos"
        _, old_outputs = scratch_copy(old_raw, copy_name="chaos", root=root, stamp=self.stamp)
        _, new_outputs = scratch_copy(self.new_raw, copy_name="chaos", root=root, stamp=self.stamp)
        if [(o.stage, o.sink, o.kind, o.target) for o in old_outputs] != [
                (o.stage, o.sink, o.kind, o.target) for o in new_outputs]:
            raise UserInputError(f"--upgrade-to {self.new_spec_path} writes other outputs than {spec_path} (stages, "
                                 "sinks or their kinds differ): chaos compares the upgraded copy's output with a "
                                 "never-upgraded reference, which needs the same outputs; keep the sinks")
        protocol = open_pipeline(self.spec_path).layout.protocol_points
        wanted = set(options.points or (*protocol, *UPGRADE_POINTS))
        self.canary_points = [p for p in protocol if p not in _NOT_IN_CANARY and p in wanted]
        self.upgrade_points = [p for p in UPGRADE_POINTS if p in wanted]
        #: What the upgrades ended in so far (``passed``, ``rolled back``): once known, the final
        #: point of the other outcome is not armed (it would not be reached).
        self.outcomes: set[str] = set()
        self.result: ChaosResult

    # -- picks ------------------------------------------------------------------------------
    def _recorded(self, copy: _Copy, target: _Copy, source: int) -> UpgradeStep | None:
        """The step the record of the upgrade from savepoint ``source`` to ``target`` holds
        (None: no record of this upgrade yet)."""
        record = read_record(copy.pipeline.objects)
        if (record is None or record.source_savepoint != source
                or Path(record.new_spec).resolve() != target.spec_path.resolve()):
            return None
        return record.step

    def _step(self, copy: _Copy, target: _Copy, source: int, process: subprocess.Popen[bytes] | None = None) -> str:
        """What a kill of ``process`` now lands in, by the recorded step (:data:`STEP_NAMES`;
        ``start``: no record yet, or ``report`` recorded while the process does not hold the
        pipeline's lease, which the rewrite takes: a rerun still starting)."""
        step = self._recorded(copy, target, source)
        if step is UpgradeStep.REPORT and process is not None and not self._rewriting(copy, process):
            return "start"
        return "start" if step is None else STEP_NAMES[step]

    @staticmethod
    def _rewriting(copy: _Copy, process: subprocess.Popen[bytes]) -> bool:
        """Whether ``process`` holds the pipeline's lease (the rewrite holds it while it writes
        the new savepoint; with the record at ``report`` that is the rewrite under way)."""
        holder = lease_holder(Path(copy.pipeline.work_dir), copy.pipeline.objects)
        return holder is not None and holder.get("pid") == process.pid

    def _aim_at_rewrite(self, copy: _Copy, target: _Copy, source: int, process: subprocess.Popen[bytes],
                        log: Path) -> bool:
        """Wait (watching the run) until ``process`` is rewriting, or its upgrade got past the
        rewrite (one that needs none records ``rewritten`` at once), then up to
        :data:`REWRITE_AIM` s more: True when the kill is due, False when the run ended first.

        Raises:
            ChaosRunError: neither happened within ``--run-timeout`` (the run is killed).
        """
        deadline = time.monotonic() + self.options.run_timeout
        while not self._rewriting(copy, process) and self._recorded(copy, target, source) in (
                None, UpgradeStep.REPORT):
            if watch_run(process, deadline, log, f"upgrade run {log.stem} did not begin its rewrite",
                         self.options.run_timeout):
                return False
        try:
            process.wait(timeout=self.rng.uniform(0, REWRITE_AIM))
        except subprocess.TimeoutExpired:
            return True
        return False

    def _armed_point(self, step: UpgradeStep | None) -> str | None:
        """A point the upgrade can still reach from the recorded ``step`` (None: not begun),
        with its hit (None: none of the points it may be armed at can be reached)."""
        finals = [p for p, outcome in (("upgrade_before_commit", "passed"), ("upgrade_mid_rollback", "rolled back"))
                  if p in self.upgrade_points and (not self.outcomes or outcome in self.outcomes)]
        canary = [f"{p}@{self.rng.randint(1, self.options.canary)}" for p in self.canary_points]
        rewrite = [p for p in self.upgrade_points if p in ("upgrade_mid_rewrite", "upgrade_after_rewrite")]
        reachable: list[str] = {
            None: [*rewrite, *canary, *finals], UpgradeStep.REPORT: [*rewrite, *canary, *finals],
            UpgradeStep.REWRITTEN: [*canary, *finals], UpgradeStep.CANARY_RUNNING: [*canary, *finals],
            UpgradeStep.CANARY_PASSED: [p for p in finals if p == "upgrade_before_commit"],
            UpgradeStep.ROLLING_BACK: [p for p in finals if p == "upgrade_mid_rollback"]}.get(step, [])
        if not reachable:
            return None
        point = self.rng.choice(reachable)
        return point if "@" in point else f"{point}@1"

    # -- runs -------------------------------------------------------------------------------
    def _plain(self, copy: _Copy, number: int, *args: str) -> None:
        """``barrierflow run COPY ARGS --quiet``, no kill; ChaosRunError unless it exits 0."""
        process, log = self._start(copy, number, None, _cli("run", str(copy.spec_path), *args, "--quiet"))
        self._event("start", number, f"run {copy.spec_path.name} {' '.join(args)}")
        code = self._wait(process, self.options.run_timeout, f"run {number}", log)
        _kill_group(process)
        self._event("exit", number, f"exit {code}")
        if code != 0:
            raise ChaosRunError(f"run {number} of the chaos copy ({copy.spec_path.name} {' '.join(args)}) failed "
                                f"without being killed (exit {code}); its log {log}:\n{_log_tail(log)}")

    def _chaos_runs(self, copy: _Copy) -> None:
        from barrierflow.retention.savepoint import promote_cut

        options = self.options
        new = _Copy(self.new_raw, "chaos", copy.root, self.stamp, self.spec, file_name="upgrade.yaml")
        current, target = copy, new
        number = kills = idle = 0
        while True:
            number += 1
            self._plain(current, number, "--checkpoints", str(UPGRADE_AFTER))
            source = promote_cut(open_pipeline(current.spec_path))
            upgrade: dict[str, Any] = {"from": current.spec_path.name, "to": target.spec_path.name,
                                       "source_savepoint": source, "kills": 0, "runs": 0}
            command = _cli("upgrade", str(current.spec_path), "--to", str(target.spec_path),
                           "--canary-checkpoints", str(options.canary))
            while True:
                number += 1
                upgrade["runs"] += 1
                kill = kills < options.kills and upgrade["kills"] < options.per_upgrade
                recorded = self._recorded(copy, target, source)
                step = "start" if recorded is None else STEP_NAMES[recorded]
                crash_at = (self._armed_point(recorded) if kill and self.rng.random() < options.point_share
                            else None)
                process, log = self._start(copy, number, crash_at, command, label="upgrade")
                self._event("start", number, f"upgrade {upgrade['from']} -> {upgrade['to']} at {step}"
                            + (f", armed {crash_at}" if crash_at else ""))
                if kill and crash_at is None:
                    code: int | None = None
                    if recorded in (None, UpgradeStep.REPORT):  # only such a run can rewrite: aim at it
                        how = "in the rewrite"
                        if not self._aim_at_rewrite(copy, target, source, process, log):
                            code = process.wait()
                    else:
                        gap = self.rng.uniform(options.min_gap, options.max_gap)
                        how = f"after {gap:.1f} s"
                        try:
                            code = process.wait(timeout=gap)
                        except subprocess.TimeoutExpired:
                            code = None
                    if code is None:
                        landed = self._step(copy, target, source, process)
                        _kill_group(process)
                        process.wait()
                        kills += 1
                        upgrade["kills"] += 1
                        self.result.picked["group"] += 1
                        self.result.kills["group"] += 1
                        self.result.steps[landed] += 1
                        self._event("kill", number, f"group at {landed}, aimed {how}")
                        continue
                else:
                    code = self._wait(process, options.run_timeout, f"upgrade run {number}", log)
                _kill_group(process)
                if crash_at and "injected crash at" in _log_tail(log, 200_000):
                    landed = self._step(copy, target, source)
                    kills += 1
                    upgrade["kills"] += 1
                    self.result.picked["point"] += 1
                    self.result.kills["point"] += 1
                    self.result.steps[landed] += 1
                    self.result.points[crash_at.split("@")[0]] += 1
                    self._event("point", number, f"{crash_at} at {landed}")
                    continue
                text = _log_tail(log, 200_000)
                self._event("exit", number, f"exit {code}")
                if code == 0:
                    upgrade["outcome"] = "passed"
                elif code == 1 and "rolled back" in text:
                    upgrade["outcome"] = "rolled back"
                else:
                    raise ChaosRunError(f"upgrade run {number} of the chaos copy ({upgrade['from']} -> "
                                        f"{upgrade['to']}) failed without being killed (exit {code}); its log "
                                        f"{log}:\n{_log_tail(log)}")
                break
            self.outcomes.add(upgrade["outcome"])
            self.result.upgrades.append(upgrade)
            if upgrade["outcome"] == "passed":
                current, target = target, current
            if kills >= options.kills:
                break
            idle = 0 if upgrade["kills"] else idle + 1
            if idle >= IDLE_UPGRADES:
                self.result.problem = (f"{IDLE_UPGRADES} upgrades in a row completed before any kill landed "
                                       f"({kills} of the {options.kills} kills asked for made): lower --max-gap "
                                       "below the time an upgrade takes, or raise --point-share")
                break
        number += 1
        self.result.runs = number
        self._plain(current, number, "--until-exhausted")


def run_upgrade_chaos(spec_path: str | os.PathLike[str], options: ChaosOptions) -> ChaosResult:
    """Chaos of ``barrierflow upgrade SPEC --to options.upgrade_to`` (module docstring)."""
    return UpgradeChaosRunner(spec_path, options).run()
