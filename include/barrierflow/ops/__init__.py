"""Operations on a pipeline, one function each, returning a typed result.

Every front door calls these and only renders what they return: the CLI
(:mod:`barrierflow.cli.main`), the Airflow tasks (:mod:`barrierflow.airflow`), the
recovery runbook (:mod:`barrierflow.airflow.runbook`) and the Checkpoints page
(:mod:`barrierflow.ui`). So a rule, such as how a checkpoint is chosen for a restore, is
written once.

============================  =====================================================
:mod:`.run`                   run a pipeline of any shape (``barrierflow run``; ``run_stage``: a stage process)
:mod:`.checkpoints`           list or show cuts (one stage: its checkpoints; several: the global checkpoints)
:mod:`.restore`               choose a cut (verified first) and restore every stage to it
:mod:`.reconcile`             finish every stage's in-doubt sink transactions against the latest cut
:mod:`.verify`                verify cuts (one stage: structural, optionally deep; several: also the cut)
:mod:`.retain`                apply the retention policy, by cuts
:mod:`.savepoint`             promote a cut to a savepoint in every stage
:mod:`.stop`                  stop the running pipeline (``--savepoint``: after one more cut, kept as a savepoint)
:mod:`.skew`                  the watermark-skew report of every stage
:mod:`.progress`              the newest cut / committed epoch (polled by the asset watchers)
:mod:`.validate`              validate a spec (single- or multi-stage) and describe its graph
:mod:`.cut_history`           the recent global checkpoints with every stage's part, the savepoints (the page)
:mod:`.discovery`             find the specs of a pipelines folder (the DAG file, the Checkpoints page)
:mod:`.batch`                 rollups and the stream-vs-batch comparison of a single-stage Parquet output
:mod:`.quality`               data quality of that output
:mod:`.state`                 read a completed cut's state: operators and schemas, a table, a diff, sizes
:mod:`.upgrade`               a spec change's compatibility report, and the change (steps: :mod:`barrierflow.upgrade`)
============================  =====================================================

Each takes the spec file's path and opens the pipeline once with
:func:`barrierflow.pipeline.model.open_pipeline` (a bad spec raises
:class:`~barrierflow.errors.SpecError`): a single-stage spec is one stage whose cuts are its
checkpoints, so there is one function per operation for both shapes, returning one typed
result with ``.stages`` (one entry for one stage); where the shapes must differ inside (the
runtime ``run`` starts, how ``restore`` restores the stages) the operation decides once. Each
raises :class:`~barrierflow.errors.BarrierflowError` subclasses on purpose, prints nothing and
imports nothing of Airflow. No operation imports another: what two share lives in a lower
layer (the upgrade's steps in :mod:`barrierflow.upgrade`).
"""
