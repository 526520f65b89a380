"""The tasks of the upgrade DAG (``barrierflow_upgrade__<name>``): the compatibility report, a
person's approval, then the upgrade.

:func:`upgrade_tasks`, called inside the DAG, wires them in order::

    report -> needs_approval (short-circuit: stops here for ``dry_run``) -> approve
    (ApprovalOperator: Airflow's human-in-the-loop, the report as its body) -> upgrade

* ``report`` runs ``barrierflow upgrade SPEC --to NEW_SPEC --dry-run`` on the cut ``checkpoint``
  (default: the newest) and returns its JSON document with ``markdown`` (what the approval page
  shows). An *incompatible* verdict fails the task (it names the state that would be dropped):
  nothing is asked and nothing changes. A spec that does not load, or a missing cut, fails it
  at once (no retry).
* ``approve`` waits in Airflow's "awaiting input" state until a person approves or rejects it
  (UI: the task's Required Actions; REST: ``PATCH .../taskInstances/approve/-1/hitlDetails``).
  Rejected: ``upgrade`` is skipped, and nothing has been read for writing, rewritten or dropped.
* ``upgrade`` runs the upgrade for real (``barrierflow upgrade SPEC --to NEW_SPEC``, with its
  canary of ``canary_checkpoints``), after the approval only; it fails naming what it cannot do
  when a change has no rewrite yet, and naming the failed check when the canary failed and the upgrade rolled back.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import task

from barrierflow.airflow.params import UPGRADE_CANARY_CHECKPOINTS
from barrierflow.airflow.task_body import task_body
from barrierflow.airflow.tasks import current_context
from barrierflow.errors import BarrierflowError

log = logging.getLogger(__name__)

#: The approval page's body: the report task's Markdown (rendered when ``approve`` runs).
APPROVAL_BODY = "{{ ti.xcom_pull(task_ids='report')['markdown'] }}"


def report_markdown(report: dict[str, Any]) -> str:
    """The compatibility report (``upgrade --dry-run --json``'s document) as Markdown, for a person
    deciding whether to approve: the verdict, then every finding of the graph and of each stage."""
    lines = [f"**{report['verdict']}**: upgrade of `{report['spec']}` to `{report['new_spec']}` over "
             f"checkpoint {report['checkpoint_id']}", ""]
    for finding in report.get("graph", []):
        lines.append(f"- graph, {finding['subject']}: **{finding['verdict']}**: {finding['reason']}")
    for stage in report.get("stages", []):
        lines.append(f"- stage `{stage['stage']}`: **{stage['verdict']}**")
        lines.extend(f"  - {f['subject']}: {f['verdict']}: {f['reason']}" for f in stage.get("findings", []))
    return "\n".join(lines)


def _params() -> tuple[str, int | None]:
    params = current_context()["params"]
    checkpoint = params.get("checkpoint")
    return str(params["new_spec"]), (int(checkpoint) if checkpoint not in (None, "") else None)


@task(task_id="report", retries=0)
@task_body(BarrierflowError)  # a spec that does not load, a missing cut: a retry cannot fix it
def report(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """The compatibility report of the run's ``new_spec`` over ``checkpoint``; fails (no retry)
    for an incompatible verdict, naming what would be dropped, and for an unknown one unless
    ``assume_compatible``, naming the param."""
    from airflow.sdk.exceptions import AirflowFailException

    from barrierflow.ops.upgrade import upgrade

    new_spec, checkpoint = _params()
    document = upgrade(spec_path, new_spec, dry_run=True, checkpoint_id=checkpoint).as_dict()
    document["markdown"] = report_markdown(document)
    log.info("compatibility report:\n%s", document["markdown"])
    log.info("report: %s", json.dumps(document))
    if document["verdict"] == "incompatible":
        raise AirflowFailException(f"{new_spec} is incompatible with the state of {spec_path}: nothing was changed; "
                                   f"{document['markdown']}")
    if document["verdict"] == "unknown" and not current_context()["params"].get("assume_compatible"):
        raise AirflowFailException(
            f"the compatibility of {new_spec} with the state of {spec_path} is unknown, and unknown is not compatible: "
            "nothing was changed; if you know the new spec keeps the meaning of that state, trigger again with the "
            f"param assume_compatible true (barrierflow upgrade's --assume-compatible); {document['markdown']}")
    return document


@task.short_circuit(task_id="needs_approval")
def needs_approval() -> bool:
    """False for a dry run (the report was all that was asked): approval and upgrade are skipped."""
    dry_run = bool(current_context()["params"]["dry_run"])
    log.info("dry run: the report is the result" if dry_run else "asking for approval")
    return not dry_run


@task(task_id="upgrade", retries=0)
@task_body(BarrierflowError, report_as="canary")
def apply_upgrade(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """The upgrade itself, once approved, with its canary; returns its JSON document (``canary``:
    the checkpoints verified, then committed, and ``comparison``, the stream-vs-batch comparison
    of the canary's output: its verdict, range and rows compared). A failed canary fails the task once the old spec
    is restored, naming the failed check; the upgrade record is logged as ``canary: {...}``."""
    from barrierflow.ops.upgrade import upgrade

    new_spec, checkpoint = _params()
    params = current_context()["params"]
    document = upgrade(spec_path, new_spec, dry_run=False, checkpoint_id=checkpoint,
                       canary_checkpoints=int(params.get("canary_checkpoints", UPGRADE_CANARY_CHECKPOINTS)),
                       assume_compatible=bool(params.get("assume_compatible", False))).as_dict()
    log.info("canary of %s passed: checkpoints %s verified and committed; stream-vs-batch comparison: %s", new_spec,
             document["canary"].get("verified"), (document["canary"].get("comparison") or {}).get("verdict", "none"))
    log.info("upgrade: %s", json.dumps(document))
    return document


def upgrade_tasks(spec_path: str, barrierflow_home: str, pipeline: str) -> None:
    """Wire the upgrade DAG's tasks (module docstring); call inside the DAG."""
    approve = ApprovalOperator(
        task_id="approve",
        subject=f"Upgrade pipeline {pipeline} to {{{{ params.new_spec }}}}?",
        body=APPROVAL_BODY,
        defaults="Reject",
    )
    (report(spec_path, barrierflow_home) >> needs_approval() >> approve
     >> apply_upgrade(spec_path, barrierflow_home))
