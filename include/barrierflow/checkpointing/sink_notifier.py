"""The sinks' side of a checkpoint: every call to a sink on one ordered thread.

A sink's committer (:class:`~barrierflow.transactions.committer.SinkCommitter`) is called for
pre-commit (in the asynchronous phase of checkpoint n), commit (after manifest n is stored)
and abort (checkpoint n failed). All three run on the single thread :class:`SinkNotifier`
owns, in the order they were asked for, so a commit of epoch n never races the pre-commit of
epoch n+1 or the abort of a failed one.

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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from barrierflow.checkpointing.errors import SinkCommitFailedError, SinkPreCommitError
from barrierflow.lease import FencedOffError
from barrierflow.transactions.committer import SinkCommitter

log = logging.getLogger(__name__)


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
        """Queue the commit of every pre-committed epoch <= ``checkpoint_id`` in every sink."""
        for sink in self.sinks:
            self._queue(sink.name, "commit", checkpoint_id, sink.notify_checkpoint_complete, checkpoint_id,
                        barrier_batch)

    def notify_aborted(self, checkpoint_id: int) -> None:
        """Queue the abort of epoch ``checkpoint_id`` in every sink."""
        for sink in self.sinks:
            self._queue(sink.name, "abort", checkpoint_id, sink.notify_checkpoint_aborted, checkpoint_id)

    def _queue(self, sink: str, action: Literal["commit", "abort"], checkpoint_id: int,
               fn: Callable[..., object], *args: object) -> None:
        self._queued = [c for c in self._queued if not c.future.done() or c.failed]  # failed ones stay
        commits = self.commits

        def call() -> object:
            result = fn(*args)
            if action == "commit":
                commits.append(SinkCommit(sink, checkpoint_id, datetime.now(UTC)))
            return result

        self._queued.append(_SinkCall(sink, action, checkpoint_id, self._thread.submit(call)))

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
        errors = [self._error(call) for call in self._queued if call.failed and not call.reported]
        for later in errors[1:]:
            log.error("%s", later)
        if errors:
            raise errors[0]
