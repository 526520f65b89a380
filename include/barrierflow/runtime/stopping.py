"""Stop-with-savepoint on the running side: a stop request the run took up, as a small state machine.

``barrierflow stop`` writes a request into the store (:mod:`barrierflow.runtime.stop_request`);
the run loop (:meth:`~barrierflow.runtime.pipeline_runner.PipelineRunner.run`, step 4) follows
it every tick through :class:`StopFollower`. As in Flink's ``StopWithSavepointTerminationHandler``
the order is fixed: the savepoint completes, then the stages stop. A stop the run took up is
in one state at a time, each a small class (as Flink's ``BarrierHandlerState``):

1. :class:`Requested`: the run took the request up. Its cut coordinator (the keeper's
   :attr:`~barrierflow.runtime.pipeline_runner.CutKeeper.cutter`) triggers no other cut
   (``trigger_limit`` 0) and a ``stopping`` outcome is written. Without a savepoint the stop
   is done once no cut is pending (the latest completed one is where a next run starts). With
   ``--savepoint`` one more cut is triggered right away
   (:meth:`~barrierflow.checkpointing.trigger_step.TriggerStep.trigger_now`), its barrier in a
   batch that reads no more input (the runner's ``barriers_only``, handed in).
2. :class:`SavepointTriggered`: the coordinator gave that cut its id (a second ``stopping``
   outcome names it).
3. :class:`Done`: the savepoint's cut completed (or, without a savepoint, no cut is pending):
   the run loop ends; its sinks commit the cut as the stages stop, whose failure fails the run.
4. :class:`Failed`: the savepoint's cut failed. A ``failed`` outcome says so, the run admits
   input again, its trigger limit is what it was, and the pipeline keeps running (a next
   ``barrierflow stop`` is taken up afresh).

Writing an outcome is best effort: a store outage loses the report, not the stop.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from barrierflow.pipeline.words import words
from barrierflow.runtime.stop_request import Status, StopOutcome, StopRequest, StopWatch

if TYPE_CHECKING:
    from barrierflow.checkpointing.trigger_rule import TriggerRule
    from barrierflow.pipeline.layout import CutLayout

log = logging.getLogger(__name__)

__all__ = ["Cutter", "Done", "Failed", "Requested", "SavepointTriggered", "StopFollower", "StopState", "Stopping"]


class Cutter(Protocol):
    """What the run loop needs of a cut coordinator to stop (a stage's
    :class:`~barrierflow.checkpointing.coordinator.CheckpointCoordinator` or the
    :class:`~barrierflow.checkpointing.pipeline_coordinator.PipelineCoordinator`, both a
    :class:`~barrierflow.checkpointing.trigger_step.TriggerStep`)."""

    trigger_limit: int | None
    forced_id: int | None
    trigger_rule: TriggerRule

    def monotonic(self) -> float: ...

    @property
    def pending(self) -> dict[int, Any]: ...

    def trigger_now(self) -> None: ...


class RunCuts(Protocol):
    """What a stop needs of the run's cut keeper
    (:class:`~barrierflow.runtime.pipeline_runner.CutKeeper`): the pipeline's name, what a cut
    is called, the coordinator that cuts (None: none in this process) and the cuts of the run."""

    name: str

    @property
    def layout(self) -> CutLayout: ...

    @property
    def cutter(self) -> Cutter | None: ...

    @property
    def completed(self) -> Sequence[Any]: ...

    @property
    def failed(self) -> Sequence[Any]: ...


class StopState(ABC):
    """One state of a stop the run took up (module docstring)."""

    #: The stop is done: the run loop ends.
    done: bool = False
    #: The stop failed: the run goes on as before.
    failed: bool = False

    @abstractmethod
    def next(self, stop: Stopping) -> StopState:
        """The state after this tick (``self`` while nothing changed)."""


class Requested(StopState):
    """Taken up; with a savepoint, its cut not yet triggered."""

    def next(self, stop: Stopping) -> StopState:
        if not stop.request.savepoint:
            return Done() if not stop.cutter.pending else self
        if stop.cutter.forced_id is None:
            return self
        stop.savepoint = stop.cutter.forced_id
        noun = stop.noun
        stop.report("stopping", f"{noun} {stop.savepoint} (the savepoint) triggered")
        return SavepointTriggered().next(stop)


class SavepointTriggered(StopState):
    """The savepoint's cut is triggered: done once it completed, failed once it failed."""

    def next(self, stop: Stopping) -> StopState:
        keeper, noun = stop.keeper, stop.noun
        failure = next((f for f in keeper.failed if f.checkpoint_id == stop.savepoint), None)
        if failure is not None:
            reason = getattr(failure.reason, "value", failure.reason)
            message = (f"{noun} {stop.savepoint}, the savepoint of the stop, failed ({reason}: "
                       f"{failure.message}); the pipeline keeps running. Run 'barrierflow stop' again")
            log.error("pipeline %s: %s", keeper.name, message)
            stop.report("failed", message)
            stop.cutter.trigger_limit = stop.limit
            stop.barriers_only(False)
            return Failed()
        if any(c.checkpoint_id == stop.savepoint for c in keeper.completed):
            return Done()
        return self


class Done(StopState):
    """The stop is done: the run loop ends."""

    done = True

    def next(self, stop: Stopping) -> StopState:
        return self


class Failed(StopState):
    """The savepoint's cut failed: the run goes on as before."""

    failed = True

    def next(self, stop: Stopping) -> StopState:
        return self


class Stopping:
    """A stop request the run took up (module docstring): ``savepoint`` is the id of the cut it
    triggered for it (once triggered); ``limit`` the trigger limit the run had before.

    Taking it up (the constructor) stops ``cutter`` from triggering other cuts and, with a
    savepoint, triggers one more with ``barriers_only`` on."""

    def __init__(self, request: StopRequest, keeper: RunCuts, cutter: Cutter, *,
                 barriers_only: Callable[[bool], None], report: Callable[[StopOutcome], None]) -> None:
        self.request = request
        self.keeper = keeper
        self.cutter = cutter
        self.barriers_only = barriers_only
        self._report = report
        self.limit = cutter.trigger_limit
        self.savepoint: int | None = None
        self.state: StopState = Requested()
        #: What messages call a cut (:mod:`barrierflow.pipeline.words`).
        self.noun = noun = words(keeper).cut_noun
        if request.savepoint:
            barriers_only(True)  # the savepoint's barrier batch reads nothing: no more input to wait for
            cutter.trigger_now()
        cutter.trigger_limit = 0  # no other cut is triggered
        what = f"after one more {noun} (a savepoint)" if request.savepoint else \
            f"once the pending {noun}s ended, taking no new one"
        log.warning("pipeline %s: stop requested by %s at %s: stopping %s", keeper.name, request.by,
                    request.requested_at, what)
        self.report("stopping", f"stopping {what}")

    def report(self, status: Status, message: str) -> None:
        """Write outcome ``status`` with ``message`` (and the savepoint's id, once known)."""
        self._report(StopOutcome(self.request.id, self.request.fence, status, self.savepoint,
                                 noun=self.noun, message=message))

    def follow(self) -> StopState:
        """One tick: the next state."""
        self.state = self.state.next(self)
        return self.state


class StopFollower:
    """A run's stop request (module docstring), followed every tick (:meth:`tick`): read from
    ``watch`` (None: the run holds no lease and takes no stop request), taken up for
    ``keeper``'s cut coordinator (a keeper without one, a stage following its supervisor's
    cuts, takes none up), with the run's ``barriers_only``."""

    def __init__(self, watch: StopWatch | None, keeper: RunCuts, barriers_only: Callable[[bool], None]) -> None:
        self.watch = watch
        self.keeper = keeper
        self.barriers_only = barriers_only
        #: The stop taken up (None: none, or the last one failed).
        self.stopping: Stopping | None = None

    def tick(self) -> bool:
        """Take a new request up, or follow the one taken up; whether it is done."""
        cutter = self.keeper.cutter
        if self.watch is None or cutter is None:
            return False
        if self.stopping is None:
            request = self.watch.poll()
            if request is None:
                return False
            self.stopping = Stopping(request, self.keeper, cutter, barriers_only=self.barriers_only,
                                     report=self._report)
        state = self.stopping.follow()
        if state.failed:
            self.stopping = None
        return state.done

    def _report(self, outcome: StopOutcome) -> None:
        """Write a ``stopping`` or ``failed`` outcome; a store outage only loses the report."""
        assert self.watch is not None
        try:
            self.watch.report(outcome)
        except Exception as exc:
            log.warning("pipeline %s: could not record the stop's progress: %s", self.keeper.name, exc)
