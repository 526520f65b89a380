"""The sinks' side of a checkpoint: every call to the sinks in order, on one ordered thread.

A sink's committer (:class:`~barrierflow.transactions.committer.SinkCommitter`) is called for
pre-commit (in the asynchronous phase of checkpoint n), commit (after manifest n is stored)
and abort (checkpoint n failed). Each of these steps runs on the single ordered thread
:class:`SinkNotifier` owns, in the order they were asked for, so a commit of epoch n never
races the pre-commit of epoch n+1 or the abort of a failed one.

Within one commit or abort step, the sinks of a stage are independent (each commits its own
table or folder under the same checkpoint id, idempotently, with its own ledger entry and
in-doubt rule), so with several sinks the ordered thread hands each sink's call to a small
pool (at most :data:`MAX_PARALLEL_SINK_CALLS` threads named ``chk-sink-commit_<i>``, one
pool per stage) and waits until every one of them finished before the next step: a
checkpoint's commits take about as long as its slowest sink's, not their sum. A sink whose
call fails does not stop the others: each sink's outcome is its own, and its failure is
reported naming that sink (below); the ones that committed stay committed, and the restore
(or ``reconcile``) commits the failed one's pre-committed epoch, as for any partial set of
commits. A stage with one sink calls it on the ordered thread itself. Pre-commits stay one
after the other (in the asynchronous phase, off the commit's path).

Commits and aborts are queued (the tick does not wait). A pre-commit is waited for by the
asynchronous phase; its error fails only that checkpoint. Every failed commit or abort is
reported exactly once, as :class:`SinkCommitFailedError` naming the sink, the epoch and the fix
(a :class:`~barrierflow.lease.FencedOffError` as itself), by whichever comes first:

* :meth:`SinkNotifier.check`, on the next tick (the job then stops);
* :meth:`SinkNotifier.flush`, which waits for everything queued;
* :meth:`SinkNotifier.shutdown`, at the end of the run: the commit of the run's last
  checkpoint is queued by the very tick that ends the run loop, so no tick can report it.

Each commit that succeeded is remembered with the time it returned (:attr:`SinkNotifier.commits`,
the newest :data:`KEEP_COMMITS`): when that epoch's output became visible to the sink's readers,
which the freshness of committed output is measured to.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from barrierflow.checkpointing.errors import SinkCommitFailedError, SinkPreCommitError
from barrierflow.lease import FencedOffError
from barrierflow.transactions.committer import SinkCommitter

log = logging.getLogger(__name__)
#: The most sink calls (commits, aborts) of one stage that run at once; more sinks wait for a thread.
MAX_PARALLEL_SINK_CALLS = 4
#: The name prefix of the threads that call several sinks side by side.
POOL_THREAD_PREFIX = "chk-sink-commit"


#: Successful commits a notifier remembers (:attr:`SinkNotifier.commits`).
KEEP_COMMITS = 1000


@dataclass(frozen=True)
class SinkCommit:
    """Sink ``sink``'s commit of checkpoint ``checkpoint_id`` returned at ``at`` (UTC): the
    epoch's output was visible to the sink's readers from then on (at the latest)."""

    sink: str
    checkpoint_id: int
    at: datetime


@dataclass
class _SinkCall:
    """One queued commit or abort of one sink."""

    sink: str
    action: Literal["commit", "abort"]
    checkpoint_id: int
    future: Future[object]
    #: Whether :meth:`SinkNotifier.check`, ``flush`` or ``shutdown`` raised (or logged) its error.
    reported: bool = False

    @property
    def failed(self) -> bool:
        return self.future.done() and self.future.exception() is not None


class SinkNotifier:
    """Owns the ordered sink thread; see the module docstring. ``label`` names the pipeline
    (or stage) in error messages."""

    def __init__(self, sinks: Sequence[SinkCommitter], *, label: str = "pipeline") -> None:
        self.sinks = list(sinks)
        self.label = label
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chk-sinks")
        workers = min(len(self.sinks), MAX_PARALLEL_SINK_CALLS)
        #: The threads that call several sinks side by side (None with one sink: the ordered thread calls it).
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=POOL_THREAD_PREFIX) \
            if workers > 1 else None
        self._queued: list[_SinkCall] = []
        #: The newest :data:`KEEP_COMMITS` successful commits, in the order they returned
        #: (appended on the sink thread; a reader copies it with ``list()``).
        self.commits: deque[SinkCommit] = deque(maxlen=KEEP_COMMITS)

    def pre_commit(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]:
        """Pre-commit epoch ``checkpoint_id`` in every sink, in order; wait for it. Returns the
        handles for the manifest. Raises :class:`SinkPreCommitError` naming the first failure."""
        if not self.sinks:
            return []
        future = self._thread.submit(
            lambda: [h for sink in self.sinks for h in sink.pre_commit_epoch(checkpoint_id, barrier_batch)])
        try:
            return future.result()
        except FencedOffError:
            raise  # the job stops: its lease was taken over
        except Exception as exc:
            raise SinkPreCommitError(f"{type(exc).__name__}: {exc}") from exc

    def notify_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        """Queue the commit of every pre-committed epoch <= ``checkpoint_id`` in every sink (the
        sinks side by side, module docstring)."""
        args = (checkpoint_id, barrier_batch)
        self._queue("commit", checkpoint_id, [(s.name, s.notify_checkpoint_complete, args) for s in self.sinks])

    def notify_aborted(self, checkpoint_id: int) -> None:
        """Queue the abort of epoch ``checkpoint_id`` in every sink (side by side)."""
        self._queue("abort", checkpoint_id,
                    [(sink.name, sink.notify_checkpoint_aborted, (checkpoint_id,)) for sink in self.sinks])

    def _queue(self, action: Literal["commit", "abort"], checkpoint_id: int,
               calls: list[tuple[str, Callable[..., object], tuple[object, ...]]]) -> None:
        """Queue one step on the ordered thread: each of ``calls`` (sink, function, arguments)
        gets a future of its own, finished by the step when that sink's call returns or raises."""
        if not calls:
            return
        self._queued = [c for c in self._queued if not c.future.done() or c.failed]  # failed ones stay
        commits = self.commits

        def recorded(sink: str, fn: Callable[..., object]) -> Callable[..., object]:
            """``fn``, noting when a commit of ``sink`` returned (the freshness of its output)."""
            if action != "commit":
                return fn

            def call(*args: object) -> object:
                result = fn(*args)
                commits.append(SinkCommit(sink, checkpoint_id, datetime.now(UTC)))
                return result
            return call

        step = [(_SinkCall(sink, action, checkpoint_id, Future()), recorded(sink, fn), args)
                for sink, fn, args in calls]
        self._queued += [call for call, _fn, _args in step]
        self._thread.submit(self._run_step, step)

    def _run_step(self, step: list[tuple[_SinkCall, Callable[..., object], tuple[object, ...]]]) -> None:
        """On the ordered thread: call every sink of one step (on the pool when there are
        several) and return once each call finished; each outcome goes to its call's future."""
        if self._pool is None or len(step) == 1:
            for call, fn, args in step:
                _run_into(call.future, fn, args)
            return
        submitted: list[Future[None]] = []
        try:
            for call, fn, args in step:
                submitted.append(self._pool.submit(_run_into, call.future, fn, args))
        except BaseException as exc:  # the pool refused a call (it was stopped): no call may wait for ever
            wait(submitted)
            for call, _fn, _args in step:
                if not call.future.done():
                    call.future.set_exception(exc)
            raise
        wait(submitted)

    def _error(self, call: _SinkCall) -> BaseException:
        """The error that reports ``call``'s failure (marking it reported)."""
        call.reported = True
        cause = call.future.exception()
        assert cause is not None
        if isinstance(cause, FencedOffError):
            return cause  # the lease was taken over: its own message says so
        error = SinkCommitFailedError(self.label, call.sink, call.checkpoint_id, call.action, cause)
        error.__cause__ = cause
        return error

    def check(self) -> None:
        """Raise the error of the first finished commit/abort that failed (module docstring).

        Raises:
            SinkCommitFailedError: a sink's commit or abort failed.
            FencedOffError: the lease was taken over before a sink call.
        """
        for call in self._queued:
            if call.failed:
                raise self._error(call)

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every queued commit/abort finished (``timeout`` s for each); raise the
        error of the first that failed, as :meth:`check`."""
        for call in list(self._queued):
            call.future.exception(timeout=timeout)
        self.check()

    def shutdown(self) -> None:
        """Run what is queued, stop the thread, then raise the error of the first failed
        commit/abort not reported yet (others are logged); see the module docstring.

        Raises:
            SinkCommitFailedError: a sink's commit or abort failed and no tick reported it.
            FencedOffError: the lease was taken over before a sink call.
        """
        self._thread.shutdown(wait=True)
        if self._pool is not None:  # idle: each step waited for its calls
            self._pool.shutdown(wait=True)
        errors = [self._error(call) for call in self._queued if call.failed and not call.reported]
        for later in errors[1:]:
            log.error("%s", later)
        if errors:
            raise errors[0]


def _run_into(future: Future[object], fn: Callable[..., object], args: tuple[object, ...]) -> None:
    """Call ``fn(*args)`` and put its result or its error into ``future``."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except BaseException as exc:  # reported through the future, as ThreadPoolExecutor does
        future.set_exception(exc)
    else:
        future.set_result(result)
