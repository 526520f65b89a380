"""examples/user-sessions runs as its README says, rescaled from 4 to 8 shuffle partitions
through ``upgrade`` part-way through its input, and its sessions are the ones a plain-Python
sessionization of the generator's records gives."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.examples.test_examples import EXAMPLES, _command, _environment, _validate_deep

#: Three `barrierflow` drivers, as the README's commands: a run of two checkpoints at 4
#: partitions, the upgrade's rewrite, the run to the end at 8.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600), pytest.mark.slow(60)]

RECORDS = 720          # per partition: an hour of event time, one record per 5 s
START_S = 1767225600   # the generator's default first event time, 2026-01-01T00:00:00Z
GAP_S = 120
DELAY_S = 10


def expected_sessions() -> list[tuple[int, datetime, datetime, int]]:
    """(user, first click, last click, clicks) of every session the run closes: record i of
    partition p is n = 2 i + p at START + 5 i s, user n % 5, dropped in the user's quiet minutes
    ((minute + user) % 10 >= 7); a session ends at a gap of more than 2 minutes, and is written
    once the last watermark (newest click - 10 s) reaches its last click + 2 minutes."""
    clicks: dict[int, list[int]] = {}
    for p in range(2):
        for i in range(RECORDS):
            user, at = (2 * i + p) % 5, START_S + 5 * i
            if (at // 60 + user) % 10 < 7:
                clicks.setdefault(user, []).append(at)
    final_watermark = max(max(v) for v in clicks.values()) - DELAY_S
    sessions = []
    for user, times in clicks.items():
        times.sort()
        run = [times[0]]
        for at in [*times[1:], None]:
            if at is None or at - run[-1] > GAP_S:
                if run[-1] + GAP_S <= final_watermark:
                    sessions.append((user, datetime.fromtimestamp(run[0], UTC), datetime.fromtimestamp(run[-1], UTC),
                                     len(run)))
                run = []
            if at is not None:
                run.append(at)
    return sorted(sessions)


def test_user_sessions_runs_and_rescales_4_to_8_as_documented(
        spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec import load_spec

    env = _environment(monkeypatch, ["user-sessions"], USER_SESSIONS_HOME=str(tmp_path))
    documented = EXAMPLES / "user-sessions" / "pipeline.yaml"
    assert "transformation of user-sessions (checked)" in _validate_deep(documented, capsys)
    # The README's spec with a checkpoint after every batch of 30 clicks per partition (the
    # sessions depend on neither), so two checkpoints leave input for the rescaled run.
    text = documented.read_text(encoding="utf-8")
    for old, new in (("  interval: 2s\n", "  interval: 1ms\n"),
                     ("max_records_per_batch: 120\n", "max_records_per_batch: 30\n")):
        assert old in text, old
        text = text.replace(old, new)
    four = tmp_path / "pipeline.yaml"
    four.write_text(text, encoding="utf-8")
    cli = ("-m", "barrierflow.cli.main")

    _command(env, *cli, "run", str(four), "--checkpoints", "2", "--quiet")
    _command(env, *cli, "savepoint", str(four))
    manifest = CheckpointStore.for_spec(load_spec(four)).latest()
    assert manifest is not None and manifest.kind.value == "savepoint", manifest
    assert all(o < RECORDS for o in manifest.barrier_offsets["clicks"].values()), \
        f"no input left for the rescaled run: {manifest.barrier_offsets}"
    assert "shuffle_partitions: 4\n" in text
    eight = tmp_path / "pipeline-8.yaml"
    eight.write_text(text.replace("shuffle_partitions: 4\n", "shuffle_partitions: 8\n"), encoding="utf-8")
    upgraded = _command(env, *cli, "upgrade", str(four), "--to", str(eight), "--canary-checkpoints", "0")
    assert "stage user-sessions: state rescaled 4 -> 8 partitions" in upgraded, upgraded
    _command(env, *cli, "run", str(eight), "--until-exhausted", "--quiet")

    table = pq.read_table(str(tmp_path / "output")).to_pylist()
    found = sorted((r["user"], r["session_start"].astimezone(UTC), r["session_end"].astimezone(UTC), r["clicks"])
                   for r in table)
    expected = expected_sessions()
    assert len(expected) > 20
    assert found == expected
