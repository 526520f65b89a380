"""bench.idle_broker: its options and its table (the measurement itself is a benchmark, not a test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.errors import UserInputError

from bench.idle_broker import AS_SHIPPED, main, parse_settings, render


def test_settings_are_key_value_pairs() -> None:
    assert parse_settings(["metadata.max.idle.interval.ms=500", " a = b "]) == {
        "metadata.max.idle.interval.ms": "500", "a": "b"}
    with pytest.raises(UserInputError, match="KEY=VALUE"):
        parse_settings(["metadata.max.idle.interval.ms"])
    with pytest.raises(UserInputError, match="KEY=VALUE"):
        parse_settings(["=1"])


def test_a_run_without_a_changed_setting_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "at least one --with KEY=VALUE" in capsys.readouterr().err
    assert main(["--with", "x=1", "--rounds", "0"]) == 2
    assert main(["--with", "x=1", "--settle", "-1"]) == 2
    assert "--settle >= 0" in capsys.readouterr().err


def test_a_process_cpu_is_read_from_proc_and_an_ended_one_is_an_error(tmp_path: Path) -> None:
    import os

    from bench.proc_stat import process_ticks

    own = os.times()
    ticks = process_ticks(os.getpid())
    assert abs(ticks / os.sysconf("SC_CLK_TCK") - (own.user + own.system)) < 1.0
    fake = tmp_path / "4242"
    fake.mkdir()
    (fake / "stat").write_text("4242 (a (tricky) name) S 1 " + " ".join(["0"] * 9) + " 7 5 0 0", encoding="utf-8")
    assert process_ticks(4242, proc=tmp_path) == 12
    with pytest.raises(OSError):
        process_ticks(4243, proc=tmp_path)


def test_the_table_names_the_shipped_value_and_gives_medians_with_every_round() -> None:
    lines = render({AS_SHIPPED: [1.0, 0.98, 1.02], "metadata.max.idle.interval.ms=500": [1.5, 1.79, 1.55]},
                   {"metadata.max.idle.interval.ms": "500"})
    assert lines[0] == "Idle broker, core-seconds per minute. as shipped: `metadata.max.idle.interval.ms=0`"
    assert "| as shipped | 1.00 (0.98-1.02) | 1.00, 0.98, 1.02 |" in lines
    assert "| metadata.max.idle.interval.ms=500 | 1.55 (1.50-1.79) | 1.50, 1.79, 1.55 |" in lines
