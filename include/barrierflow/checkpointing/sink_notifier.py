"""The sinks' side of a checkpoint: every call to a sink on one ordered thread.

A sink's committer (:class:`~barrierflow.transactions.committer.SinkCommitter`) is called for
pre-commit (in the asynchronous phase of checkpoint n), commit (after manifest n is stored)
and abort (checkpoint n failed). All three run on the single thread :class:`SinkNotifier`
owns, in the order they were asked for, so a commit of epoch n never races the pre-commit of
epoch n+1 or the abort of a failed one.

Commits and aborts are queued (the tick does not wait); their errors are raised by
:meth:`SinkNotifier.check` on the next tick, which stops the job. A pre-commit is waited for
by the asynchronous phase; its error fails only that checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from barrierflow.checkpointing.errors import SinkCommitFailedError, SinkPreCommitError
from barrierflow.lease import FencedOffError
from barrierflow.transactions.committer import SinkCommitter


class SinkNotifier:
    """Owns the ordered sink thread; see the module docstring."""

    def __init__(self, sinks: Sequence[SinkCommitter]) -> None:
        self.sinks = list(sinks)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chk-sinks")
        self._queued: list[Future[object]] = []

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
            self._queue(sink.notify_checkpoint_complete, checkpoint_id, barrier_batch)

    def notify_aborted(self, checkpoint_id: int) -> None:
        """Queue the abort of epoch ``checkpoint_id`` in every sink."""
        for sink in self.sinks:
            self._queue(sink.notify_checkpoint_aborted, checkpoint_id)

    def _queue(self, fn: Callable[..., object], *args: object) -> None:
        self._queued = [f for f in self._queued if not f.done() or f.exception() is not None]
        self._queued.append(self._thread.submit(fn, *args))

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every queued commit/abort finished; re-raise its error."""
        for future in list(self._queued):
            future.result(timeout=timeout)

    def check(self) -> None:
        """Raise :class:`SinkCommitFailedError` for the first finished commit/abort that failed."""
        for future in self._queued:
            if future.done() and isinstance(future.exception(), FencedOffError):
                raise future.exception()  # type: ignore[misc]
            if future.done() and future.exception() is not None:
                raise SinkCommitFailedError(f"a sink failed to finish a transaction: {future.exception()}") \
                    from future.exception()

    def shutdown(self) -> None:
        """Run what is queued, then stop the thread."""
        self._thread.shutdown(wait=True)
