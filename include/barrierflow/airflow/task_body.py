"""The one wrapper every barrierflow task body runs in: :func:`task_body`.

A task body is the function an Airflow task calls (a TaskFlow function, or what a sensor's
``poke`` calls). Wrapped with :func:`task_body`, it

* runs with ``BARRIERFLOW_HOME`` set to its ``barrierflow_home`` argument unless the
  environment already sets it (where relative paths in specs resolve, identically for the job
  and the checks); a body without that argument leaves the environment alone;
* fails at once, not retried, on the errors it names: each becomes an
  ``AirflowFailException`` with the error's own message, which names the thing that is wrong
  and the fix (a bad param, a running job, a checkpoint that does not verify, a failed
  expectation). Before failing, the JSON document such an error carries (``summary``, or a
  ``report`` with ``as_dict()``) is logged as ``"<report_as>: <json>"`` when ``report_as`` is
  given, so the task log shows it also when the task fails; a ``hint`` may add to the message
  how to go on with this DAG (``"<message>. <hint>"``). Every other error propagates unchanged,
  and Airflow retries the task as its ``retries`` say.

Put it under Airflow's ``@task`` decorator::

    @task(task_id="verify")
    @task_body(CheckpointVerificationError, report_as="verification summary")
    def verify(spec_path: str, barrierflow_home: str) -> dict[str, Any]: ...

The wrapper keeps the body's name, docstring, annotations and signature (``functools.wraps``),
so Airflow sees the same task: the same arguments (``op_args``), the docstring as the task's
doc, ``multiple_outputs`` inferred from the same return annotation (resolved in the body's
module), and ``**context`` passed when the body asks for it. ``dag.get_task(id).python_callable`` is the wrapped body.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
#: Given a ``fail_on`` error and the body's arguments by name: what to add to its message, or None.
Hint = Callable[[BaseException, Mapping[str, Any]], "str | None"]

#: The argument of a task body that names where relative paths in specs resolve.
HOME_ARGUMENT = "barrierflow_home"


def carried_document(exc: BaseException) -> Any:
    """The JSON document an error carries for the task log (``summary``, or ``report.as_dict()``),
    or None."""
    summary = getattr(exc, "summary", None)
    if summary is not None:
        return summary
    report = getattr(exc, "report", None)
    return report.as_dict() if report is not None and hasattr(report, "as_dict") else None


def task_body(*fail_on: type[BaseException], report_as: str | None = None, hint: Hint | None = None
              ) -> Callable[[F], F]:
    """Wrap a task body: environment set-up and error mapping (see the module's docstring).

    Args:
        fail_on: the errors that fail the task at once (``AirflowFailException``, no retry):
            errors a retry cannot fix. None given: every error propagates as raised.
        report_as: the label under which the document a ``fail_on`` error carries is logged
            (ERROR) before the task fails; None: nothing is logged.
        hint: what to add to a ``fail_on`` error's message (see :data:`Hint`); the
            ``AirflowFailException`` is still raised from the error itself.
    """
    def wrap(body: F) -> F:
        signature = inspect.signature(body)
        takes_home = HOME_ARGUMENT in signature.parameters

        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind_partial(*args, **kwargs).arguments
            if takes_home:
                home = arguments.get(HOME_ARGUMENT)
                if home:
                    os.environ.setdefault("BARRIERFLOW_HOME", str(home))
            if not fail_on:
                return body(*args, **kwargs)
            from airflow.sdk.exceptions import AirflowFailException

            try:
                return body(*args, **kwargs)
            except fail_on as exc:
                document = carried_document(exc) if report_as else None
                if document is not None:
                    log.error("%s: %s", report_as, json.dumps(document, default=str))
                extra = hint(exc, arguments) if hint is not None else None
                raise AirflowFailException(f"{exc}. {extra}" if extra else str(exc)) from exc

        try:  # resolved in the body's module: Airflow evaluates a return annotation in the wrapper's
            run.__annotations__ = typing.get_type_hints(body)
        except (NameError, TypeError):  # a name only imported for type checking: left as written
            pass
        return run  # type: ignore[return-value]

    return wrap
