"""The three restart strategies as pure policies (no clock, no sleep), and the ``restart:`` block
of a spec: parsed into the right policy, or refused with the field named (exit 2)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from barrierflow.cli.main import main
from barrierflow.errors import SpecError
from barrierflow.runtime.restart_strategy import ExponentialDelay, FailureRate, FixedDelay, strategy_for
from barrierflow.spec import load_any_spec, load_spec

from tests.pipeline_specs import spec_dict, write_spec

# -- fixed delay ----------------------------------------------------------------------------


def test_fixed_delay_allows_exactly_its_attempts_then_stops() -> None:
    strategy = FixedDelay(attempts=3, delay=2.5)
    assert [strategy.next_delay(t) for t in (0.0, 10.0, 20.0)] == [2.5, 2.5, 2.5]
    assert strategy.restarts == 3 and strategy.limit == "3"
    assert strategy.next_delay(30.0) is None
    assert strategy.next_delay(10_000.0) is None, "fixed-delay counts over the job's life: no reset"


def test_fixed_delay_of_one_attempt_restarts_once() -> None:
    strategy = FixedDelay(attempts=1, delay=0.0)
    assert strategy.next_delay(0.0) == 0.0
    assert strategy.next_delay(1e9) is None


# -- exponential delay ----------------------------------------------------------------------


def _exponential(**overrides: object) -> ExponentialDelay:
    options: dict[str, object] = {"initial_backoff": 1.0, "max_backoff": 10.0, "backoff_multiplier": 2.0,
                                  "jitter_factor": 0.0, "reset_backoff_threshold": 100.0}
    options.update(overrides)
    return ExponentialDelay(**options)  # type: ignore[arg-type]


def test_exponential_delay_grows_by_the_multiplier_up_to_the_maximum() -> None:
    strategy = _exponential()
    delays = [strategy.next_delay(float(t)) for t in range(7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert strategy.restarts == 7 and strategy.limit == "unlimited"


def test_exponential_delay_resets_after_a_healthy_period() -> None:
    strategy = _exponential()
    assert [strategy.next_delay(t) for t in (0.0, 1.0, 3.0)] == [1.0, 2.0, 4.0]
    # healthy for less than threshold + current backoff (100 + 4): no reset
    assert strategy.next_delay(3.0 + 103.9) == 8.0
    # healthy for at least threshold + current backoff (100 + 8): start over, attempts from zero
    assert strategy.next_delay(106.9 + 108.0) == 1.0
    assert strategy.restarts == 1
    assert strategy.next_delay(216.0) == 2.0


def test_exponential_delay_stops_after_its_attempts_before_a_reset() -> None:
    strategy = _exponential(attempts_before_reset_backoff=2)
    assert strategy.next_delay(0.0) == 1.0
    assert strategy.next_delay(1.0) == 2.0
    assert strategy.limit == "2"
    assert strategy.next_delay(2.0) is None


def test_exponential_delay_attempts_count_again_after_a_reset() -> None:
    strategy = _exponential(attempts_before_reset_backoff=2)
    assert [strategy.next_delay(t) for t in (0.0, 1.0)] == [1.0, 2.0]
    assert strategy.next_delay(1.0 + 102.0) == 1.0  # reset: the third failure is restarted
    assert strategy.next_delay(104.0) == 2.0
    assert strategy.next_delay(105.0) is None


def test_exponential_delay_jitter_stays_within_its_factor_and_is_seeded() -> None:
    def delays(seed: int) -> list[float | None]:
        strategy = _exponential(jitter_factor=0.5, max_backoff=1000.0, rng=random.Random(seed))
        return [strategy.next_delay(float(t)) for t in range(8)]

    got = delays(7)
    for n, delay in enumerate(got):
        backoff = 2.0 ** n
        assert delay is not None and backoff * 0.5 <= delay <= backoff * 1.5
    assert got == delays(7), "the same random source gives the same delays"
    assert got != [2.0 ** n for n in range(8)], "jitter varies the delays"


@pytest.mark.parametrize("options", [
    {"initial_backoff": 0.0}, {"max_backoff": 0.5}, {"backoff_multiplier": 0.9}, {"jitter_factor": 1.5},
    {"reset_backoff_threshold": 0.0}, {"attempts_before_reset_backoff": 0},
])
def test_exponential_delay_refuses_impossible_settings(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="exponential-delay needs"):
        _exponential(**options)


# -- failure rate ---------------------------------------------------------------------------


def test_failure_rate_stops_when_the_rate_is_exceeded() -> None:
    strategy = FailureRate(max_failures_per_interval=2, failure_rate_interval=60.0, delay=3.0)
    assert strategy.next_delay(0.0) == 3.0
    assert strategy.next_delay(30.0) == 3.0
    assert strategy.restarts == 2 and strategy.limit == "2 per 60 s"
    assert strategy.next_delay(59.0) is None  # three failures within 60 s


def test_failure_rate_forgets_failures_older_than_the_interval() -> None:
    strategy = FailureRate(max_failures_per_interval=1, failure_rate_interval=10.0, delay=0.5)
    assert [strategy.next_delay(t) for t in (0.0, 10.0, 20.5, 31.0)] == [0.5] * 4
    assert strategy.restarts == 1
    assert strategy.next_delay(40.0) is None  # 9 s after the previous one


def test_failure_rate_of_one_stops_at_the_second_failure_within_the_interval() -> None:
    strategy = FailureRate(max_failures_per_interval=1, failure_rate_interval=600.0, delay=0.0)
    assert strategy.next_delay(5.0) == 0.0
    assert strategy.next_delay(7.0) is None


# -- the restart: block ---------------------------------------------------------------------


def _with_restart(tmp_path: Path, restart: dict[str, object]) -> Path:
    data = spec_dict(tmp_path)
    data["restart"] = restart
    return write_spec(tmp_path, data)


def test_no_restart_block_means_no_restart(tmp_path: Path) -> None:
    assert load_spec(write_spec(tmp_path, spec_dict(tmp_path))).restart is None


def test_each_block_gives_its_strategy_with_flink_defaults(tmp_path: Path) -> None:
    fixed = strategy_for(load_spec(_with_restart(tmp_path, {"type": "fixed-delay", "attempts": 4,
                                                            "delay": "500ms"})).restart)  # type: ignore[arg-type]
    assert isinstance(fixed, FixedDelay) and (fixed.attempts, fixed.delay) == (4, 0.5)
    spec = load_spec(_with_restart(tmp_path, {"type": "exponential-delay", "max_backoff": "2 minutes",
                                              "attempts_before_reset_backoff": 5}))
    exponential = strategy_for(spec.restart)  # type: ignore[arg-type]
    assert isinstance(exponential, ExponentialDelay)
    assert (exponential.initial_backoff, exponential.max_backoff, exponential.backoff_multiplier,
            exponential.jitter_factor, exponential.reset_backoff_threshold,
            exponential.attempts_before_reset_backoff) == (1.0, 120.0, 1.5, 0.1, 3600.0, 5)
    rate = strategy_for(load_spec(_with_restart(tmp_path, {"type": "failure-rate"})).restart)  # type: ignore[arg-type]
    assert isinstance(rate, FailureRate)
    assert (rate.max_failures_per_interval, rate.failure_rate_interval, rate.delay) == (1, 60.0, 1.0)


@pytest.mark.parametrize(("restart", "field", "says"), [
    ({"type": "fixed-delay", "attempts": 0}, "restart.fixed-delay.attempts", "greater than or equal to 1"),
    ({"type": "fixed-delay", "delay": "soon"}, "restart.fixed-delay.delay", "'5s'"),
    ({"type": "fixed-delay", "atempts": 3}, "restart.fixed-delay.atempts", "unknown field"),
    ({"type": "exponential-delay", "initial_backoff": "10s", "max_backoff": "1s"}, "restart.exponential-delay",
     "max_backoff (1 s) must not be below initial_backoff (10 s)"),
    ({"type": "exponential-delay", "jitter_factor": 2}, "restart.exponential-delay.jitter_factor",
     "less than or equal to 1"),
    ({"type": "failure-rate", "failure_rate_interval": 0}, "restart.failure-rate",
     "failure_rate_interval must be greater than 0"),
    ({"type": "sometimes"}, "restart", "fixed-delay"),
])
def test_a_bad_restart_block_names_the_field(tmp_path: Path, restart: dict[str, object], field: str,
                                             says: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_with_restart(tmp_path, restart))
    assert any(f == field and says in m for f, m in info.value.problems), info.value.problems


def test_a_bad_restart_block_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _with_restart(tmp_path, {"type": "failure-rate", "max_failures_per_interval": 0})
    assert main(["run", str(path)]) == 2
    assert "restart.failure-rate.max_failures_per_interval" in capsys.readouterr().err


def test_a_staged_spec_takes_the_restart_block(tmp_path: Path) -> None:
    columns = {"options": {"columns": {"key": "key"}}, "function": "barrierflow.transforms.projection:project"}
    data = {"name": "staged", "work_dir": str(tmp_path / "work"),
            "channels": [{"name": "ab", "bootstrap": "127.0.0.1:9"}],
            "stages": [{"name": "a", "sources": [{"name": "events", "type": "generator", "partitions": 1}],
                        "transformation": columns, "sinks": [{"type": "channel", "channel": "ab"}]},
                       {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}],
                        "transformation": columns, "sinks": [{"type": "discard"}]}],
            "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
            "restart": {"type": "fixed-delay", "attempts": 2, "delay": "1s"}}
    spec = load_any_spec(write_spec(tmp_path, data))
    assert spec.restart is not None and spec.restart.type == "fixed-delay"
