"""The errors of reading a checkpoint's state (exit code 2 at the command line: the input chosen is wrong)."""

from __future__ import annotations

from barrierflow.errors import UserInputError

__all__ = ["AmbiguousStateError", "StatelessStageError"]


class StatelessStageError(UserInputError):
    """The stage chosen keeps no state (its query has no stateful operator), so there is
    nothing to read. Attributes: ``stage``, ``checkpoint_id``."""

    def __init__(self, *, pipeline: str, stage: str, checkpoint_id: int, stateful: list[str]) -> None:
        self.stage = stage
        self.checkpoint_id = checkpoint_id
        others = (f"; the stages with state: {', '.join(stateful)} (choose one with --stage)" if stateful
                  else "; no stage of this pipeline keeps state")
        super().__init__(f"stage {stage} of pipeline {pipeline} keeps no state (checkpoint {checkpoint_id} holds no "
                         f"state/ directory: its query has no stateful operator such as an aggregation, "
                         f"deduplication or stream-stream join){others}")


class AmbiguousStateError(UserInputError):
    """The command needs one stage (or one stateful operator) and the pipeline has several;
    the message names them and the option that chooses."""
