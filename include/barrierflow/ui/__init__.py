"""The Checkpoints page of the Airflow UI (Flink's checkpoint tab, for barrierflow).

A read-only FastAPI app (:func:`create_app`) that the Airflow plugin in ``plugins/`` mounts
under :data:`URL_PREFIX` and shows under Browse -> Checkpoints (``/plugin/checkpoints``). Per
pipeline (whatever its shape): recent cuts (checkpoints; of several stages: global
checkpoints) with one row per stage under each, the manifests' values, failure reasons and verification
verdicts, a duration/size history plot, the latest skew plot, links to the stored reports,
and a JSON API. Every request needs an Airflow session (:mod:`barrierflow.ui.auth`).

Modules: :mod:`~barrierflow.ui.history` (the data layer), :mod:`~barrierflow.ui.plots`,
:mod:`~barrierflow.ui.page` (HTML), :mod:`~barrierflow.ui.auth`, :mod:`~barrierflow.ui.app`,
:mod:`~barrierflow.ui.store_reader` (the only module reading library internals).
"""

from barrierflow.ui.app import URL_PREFIX, VIEW_ROUTE, create_app
from barrierflow.ui.history import CutRow, PipelineHistory, cut_history

__all__ = ["URL_PREFIX", "VIEW_ROUTE", "CutRow", "PipelineHistory", "create_app", "cut_history"]
