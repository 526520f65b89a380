"""The sink notifier with several sinks: one checkpoint's commits run side by side on a bounded
pool of named threads, each sink's failure is reported naming that sink while the others
commit, the next step waits for every commit of the one before, and stopping leaves no thread.
No timing: sinks that must run at once meet at a barrier, which breaks if they run one after
the other."""

from __future__ import annotations

import threading

import pytest
from barrierflow.checkpointing.errors import SinkCommitFailedError
from barrierflow.checkpointing.sink_notifier import MAX_PARALLEL_SINK_CALLS, POOL_THREAD_PREFIX, SinkNotifier
from barrierflow.errors import SinkError
from barrierflow.transactions.committer import SinkCommitter

#: How long a sink waits at a barrier for the others before the barrier breaks (only reached
#: when the sinks do not run side by side, which the test then reports).
MEET_TIMEOUT = 30.0


class Sink(SinkCommitter):
    """Records which thread ran each call, in one log shared by the sinks of a test; a sink given
    ``meet`` waits there until every sink sharing it arrived; one given ``fail`` raises instead
    of committing."""

    def __init__(self, name: str, log: list[tuple[str, str, int, str]], *, meet: threading.Barrier | None = None,
                 fail: bool = False) -> None:
        self.name = name
        self.log = log
        self.meet = meet
        self.fail = fail

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict]:
        self.log.append((self.name, "pre-commit", checkpoint_id, threading.current_thread().name))
        return [{"sink": self.name}]

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        if self.meet is not None:
            self.meet.wait(MEET_TIMEOUT)
        if self.fail:
            raise SinkError(f"sink {self.name!r}: the table refused checkpoint {checkpoint_id}")
        self.log.append((self.name, "commit", checkpoint_id, threading.current_thread().name))

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.log.append((self.name, "abort", checkpoint_id, threading.current_thread().name))


def pool_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(POOL_THREAD_PREFIX)]


def test_one_checkpoints_sinks_commit_side_by_side_and_the_next_step_waits_for_all() -> None:
    log: list[tuple[str, str, int, str]] = []
    meet = threading.Barrier(2)  # broken (the commits fail) unless both sinks commit at once
    notifier = SinkNotifier([Sink("ice", log, meet=meet), Sink("dl", log, meet=meet)], label="stage s")
    notifier.pre_commit(1, 1)
    notifier.notify_complete(1, 1)
    notifier.pre_commit(2, 2)  # queued behind both commits of checkpoint 1
    notifier.flush()
    steps = [(sink, action, cid) for sink, action, cid, _thread in log]
    assert steps[:2] == [("ice", "pre-commit", 1), ("dl", "pre-commit", 1)]
    assert sorted(steps[2:4]) == [("dl", "commit", 1), ("ice", "commit", 1)]
    assert steps[4:] == [("ice", "pre-commit", 2), ("dl", "pre-commit", 2)]
    commit_threads = {thread for _sink, action, _cid, thread in log if action == "commit"}
    assert len(commit_threads) == 2 and all(t.startswith(POOL_THREAD_PREFIX) for t in commit_threads)
    notifier.shutdown()


def test_one_sinks_failure_names_it_and_the_others_still_commit() -> None:
    log: list[tuple[str, str, int, str]] = []
    meet = threading.Barrier(3)
    sinks = [Sink("a", log, meet=meet), Sink("b", log, meet=meet, fail=True), Sink("c", log, meet=meet)]
    notifier = SinkNotifier(sinks, label="stage s of pipeline p")
    notifier.pre_commit(1, 1)
    notifier.notify_complete(1, 1)
    with pytest.raises(SinkCommitFailedError) as raised:
        notifier.flush()
    assert (raised.value.sink, raised.value.checkpoint_id, raised.value.action) == ("b", 1, "commit")
    assert str(raised.value).startswith("stage s of pipeline p: sink 'b': the commit of epoch 1")
    assert "the table refused checkpoint 1" in str(raised.value)
    assert sorted(sink for sink, action, _cid, _t in log if action == "commit") == ["a", "c"]
    notifier.shutdown()  # reported once: not raised again


def test_the_pool_is_bounded_and_stopping_leaves_no_thread() -> None:
    log: list[tuple[str, str, int, str]] = []
    before = pool_threads()
    count = MAX_PARALLEL_SINK_CALLS + 2
    notifier = SinkNotifier([Sink(f"s{i}", log) for i in range(count)])
    for cid in (1, 2, 3):
        notifier.pre_commit(cid, cid)
        notifier.notify_complete(cid, cid)
    notifier.notify_aborted(4)
    notifier.shutdown()
    assert sorted((s, a) for s, a, cid, _t in log if a == "commit" and cid == 3) == sorted(
        (f"s{i}", "commit") for i in range(count))
    assert sorted(s for s, a, cid, _t in log if a == "abort" and cid == 4) == sorted(f"s{i}" for i in range(count))
    assert len({t for _s, a, _c, t in log if a in ("commit", "abort")}) <= MAX_PARALLEL_SINK_CALLS
    assert pool_threads() == before


def test_a_single_sink_is_called_on_the_ordered_thread_without_a_pool() -> None:
    log: list[tuple[str, str, int, str]] = []
    notifier = SinkNotifier([Sink("only", log)])
    notifier.pre_commit(1, 1)
    notifier.notify_complete(1, 1)
    notifier.flush()
    notifier.shutdown()
    assert {thread for *_rest, thread in log} == {thread for *_rest, thread in log if thread.startswith("chk-sinks")}
