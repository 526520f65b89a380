"""Operations on a pipeline, one function each, returning a typed result.

Every front door calls these and only renders what they return: the CLI
(:mod:`barrierflow.cli.main`), the Airflow helpers (:mod:`barrierflow.airflow.support`), the
recovery runbook (:mod:`barrierflow.airflow.runbook`) and the Checkpoints page
(:mod:`barrierflow.ui`). So a rule, such as how a checkpoint is chosen for a restore, is
written once.

============================  =====================================================
:mod:`.run`                   run the streaming job (``barrierflow run``; several stages: ``run_stages``)
:mod:`.checkpoints`           list or show checkpoints (several stages: the global checkpoints)
:mod:`.restore`               choose a checkpoint (verified first) and restore it
:mod:`.reconcile`             finish in-doubt sink transactions
:mod:`.verify`                verify checkpoints (structural, optionally deep)
:mod:`.retain`                apply the retention policy
:mod:`.savepoint`             promote a checkpoint to a savepoint
:mod:`.skew`                  the watermark-skew report
:mod:`.validate`              validate a spec (single- or multi-stage) and describe its graph
:mod:`.global_history`        the recent global checkpoints with every stage's part (the Checkpoints page)
:mod:`.discovery`             find the specs of a pipelines folder (the DAG file, the Checkpoints page)
============================  =====================================================

Each takes the spec file's path (and loads the spec itself: a bad spec raises
:class:`~barrierflow.errors.SpecError`), raises :class:`~barrierflow.errors.BarrierflowError`
subclasses on purpose, prints nothing and imports nothing of Airflow.
"""
