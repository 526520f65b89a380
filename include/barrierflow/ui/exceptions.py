"""Errors of the Checkpoints page (all derive from :class:`barrierflow.errors.BarrierflowError`)."""

from __future__ import annotations

from barrierflow.errors import BarrierflowError, UserInputError


class UnknownPipelineError(UserInputError):
    """No loadable pipeline spec of that name in the pipelines folder.

    Attributes:
        pipeline: the name asked for.
        known: the names that exist.
    """

    def __init__(self, pipeline: str, known: list[str], folder: str) -> None:
        self.pipeline = pipeline
        self.known = known
        super().__init__(
            f"no pipeline named {pipeline!r} in {folder} (known: {', '.join(known) or 'none'}); "
            "the page lists the specs of $BARRIERFLOW_PIPELINES_DIR")


class ReportNotFoundError(UserInputError):
    """The report or verification result asked for is not in the pipeline's checkpoint store."""


class NotAuthenticatedError(BarrierflowError):
    """The request carries no valid Airflow session (no, an expired or an invalid token).

    Attributes:
        login_url: where to log in to Airflow, if known.
    """

    def __init__(self, detail: str, login_url: str | None = None) -> None:
        self.login_url = login_url
        super().__init__(detail)


class NotAuthorizedError(BarrierflowError):
    """The Airflow user may not read DAGs, so may not see the pipelines' checkpoints."""
