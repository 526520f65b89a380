"""``barrierflow chaos SPEC --upgrade-to NEW_SPEC``: ``barrierflow upgrade`` killed at its steps, short.

A keyed running-totals pipeline (generator, 2 partitions, 5 keys -> count and sum per key,
update mode, RocksDB state -> Parquet through 2PC) is upgraded in chaos's scratch copy while the
upgrade is killed; the output is compared with a never-upgraded failure-free reference of the
same input. The kills are armed points (``--point-share 1``), so where they land does not
depend on the machine's speed. The new spec rescales 2 -> 4 shuffle partitions and counts key 0
a thousand times (the pipeline's expectation suite bounds every count, so the canary's deep
verification fails). The upgrade is killed right after its rewrite (``upgrade_after_rewrite``),
continued, and killed again in the middle of its rollback (``upgrade_mid_rollback``): it ends
rolled back to the old shape, and the old spec then runs to the end with the reference's rows,
0 missing, 0 extra, 0 duplicated.

A rescale that passes its canary after kills after the rewrite and in the canary is
tests/state/test_upgrade_canary.py (the same kill points, through ``barrierflow upgrade``).
The option refusals (exit 2) are in tests/chaos/test_chaos_refusals.py; the recorded run of
20 kills and more is in docs/chaos.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.cli.main import main

from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import FAST_JVM
from tests.support.running_totals import HEALTHY, POISONED, totals_spec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

PARTITIONS, RECORDS, KEYS = 2, 400, 5


def upgrade_spec(tmp_path: Path, file: str, *, shuffle: int, function: str = HEALTHY) -> Path:
    """The running-totals pipeline at ``shuffle`` partitions computing with ``function``; every
    spec of one test names the same pipeline and stores (an upgrade keeps them)."""
    return totals_spec(tmp_path, file, name="upchaos", partitions=PARTITIONS, records=RECORDS, keys=KEYS,
                       shuffle=shuffle, function=function, state_store="rocksdb", checkpoint_interval="300ms",
                       spark_conf=FAST_JVM)


@pytest.fixture
def driver_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in short_lived_driver_env().items():
        monkeypatch.setenv(name, value)


def chaos(spec: Path, scratch: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["chaos", str(spec), "--scratch", str(scratch), "--json", *args])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.slow(150)
@pytest.mark.usefixtures("driver_env")
def test_an_upgrade_killed_after_its_rewrite_and_mid_rollback_rolls_back_and_the_old_spec_runs_exactly_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], figures: dict[str, Any]) -> None:
    old = upgrade_spec(tmp_path, "old.yaml", shuffle=2)
    broken = upgrade_spec(tmp_path, "broken.yaml", shuffle=4, function=POISONED)
    code, report = chaos(old, tmp_path / "scratch", capsys, "--upgrade-to", str(broken), "--kills", "2",
                         "--kills-per-upgrade", "2", "--point-share", "1", "--seed", "2",
                         "--points", "upgrade_after_rewrite,upgrade_mid_rollback")
    figures.update({key: report[key] for key in ("kills_by_step", "kills_by_point", "upgrades", "rows_expected",
                                                 "rows", "missing", "extra", "duplicated", "seconds")})
    assert report["problem"] is None, report["problem"]
    assert report["kills"] == {"point": 2}
    # the first run of the upgrade is killed once its rewrite is recorded, the second once its
    # failed canary is (its record says rolling-back)
    assert report["kills_by_point"] == {"upgrade_after_rewrite": 1, "upgrade_mid_rollback": 1}, \
        report["kills_by_point"]
    assert report["kills_by_step"] == {"rewrite": 1, "rollback": 1}, report["kills_by_step"]
    assert [(u["outcome"], u["kills"]) for u in report["upgrades"]] == [("rolled back", 2)], report["upgrades"]
    assert report["rows_expected"] > 0
    assert (report["missing"], report["extra"], report["duplicated"]) == (0, 0, 0)
    assert code == 0 and report["passed"]
