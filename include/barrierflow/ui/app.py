"""The Checkpoints app: a read-only FastAPI app that Airflow mounts under :data:`URL_PREFIX`.

Routes (relative to the mount prefix; every one requires an Airflow session, see
:mod:`barrierflow.ui.auth`: 401 without one, 403 for a user who may not read DAGs)::

    GET /                                             the page (?pipeline=NAME, ?limit=N)
    GET /api/pipelines                                the pipeline specs found
    GET /api/pipelines/{name}                         recent checkpoints, savepoints, upgrades, reports (?limit=N)
    GET /api/pipelines/{name}/checkpoints/{id}/verification   the stored verification result
    GET /pipelines/{name}/verification                HTML of every stored verification result shown
    GET /pipelines/{name}/checkpoints/{id}/verification       HTML of one verification result
    GET /pipelines/{name}/reports/{path}              a stored report (``reports/<path>`` of the store)

Only GET exists (read-only). Data come from the pipelines folder (``pipelines_dir``) and each
pipeline's checkpoint store, read per request.

The page and ``/api/pipelines/{name}`` show a pipeline's cuts (its checkpoints; of several
stages: its global checkpoints), one row per stage under each, and its savepoints and recorded
upgrades (every one, newest first), whatever its shape (see :mod:`barrierflow.ui.history`); a cut's verification routes
serve the stored result of every stage of that cut (the API: an object
``{"checkpoint_id", "stages": {stage: result or null}}``, 404 if no stage was verified).
"""

from __future__ import annotations

import html
import json
import logging
import mimetypes
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from barrierflow.ui import store_reader
from barrierflow.ui.auth import Authenticator, airflow_session
from barrierflow.ui.exceptions import (
    NotAuthenticatedError,
    NotAuthorizedError,
    ReportNotFoundError,
    UnknownPipelineError,
)
from barrierflow.ui.history import DEFAULT_LIMIT, PipelineEntry, find_entry, history_of, list_pipelines
from barrierflow.ui.page import render_page

log = logging.getLogger(__name__)

#: Where Airflow mounts the app (``fastapi_apps`` ``url_prefix``).
URL_PREFIX = "/barrierflow"
#: The route of the page inside Airflow's UI (``external_views`` ``url_route``: ``/plugin/checkpoints``).
VIEW_ROUTE = "checkpoints"
#: The largest ``limit`` a request may ask for.
MAX_LIMIT = 1000
_SKEW_KEY = "reports/skew-latest.json"
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="how many of the newest checkpoints")]


def _wants_html(request: Request) -> bool:
    return not request.url.path.startswith(f"{request.scope.get('root_path', '')}/api/")


def _error(request: Request, status: int, message: str, login_url: str | None = None) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if not _wants_html(request):
        return JSONResponse({"detail": message}, status_code=status, headers=headers)
    login = f" <a href='{html.escape(login_url, quote=True)}' target='_top'>Sign in to Airflow</a>" if login_url else ""
    return HTMLResponse(f"<!doctype html><html><head><meta charset='utf-8'><title>barrierflow checkpoints</title>"
                        f"</head><body><p>{html.escape(message)}.{login}</p></body></html>",
                        status_code=status, headers=headers)


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _report_key(path: str) -> str:
    """``reports/<path>``; refuses anything that would leave ``reports/``."""
    parts = PurePosixPath(path).parts
    if not parts or any(p in ("..", ".", "") for p in parts) or path.startswith("/"):
        raise ReportNotFoundError(f"no report {path!r}: report paths are relative to reports/ of the store")
    return "reports/" + "/".join(parts)


def _store(entry: PipelineEntry) -> store_reader.CheckpointStore:
    """The store at the root of the spec's ``checkpoint.storage`` (reports live there)."""
    return store_reader.open_checkpoint_store(entry.spec)  # type: ignore[arg-type]


def create_app(pipelines_dir: str, authenticate: Authenticator = airflow_session) -> FastAPI:
    """The Checkpoints app for the specs in ``pipelines_dir``.

    Args:
        pipelines_dir: folder of pipeline specs (``$BARRIERFLOW_PIPELINES_DIR`` of the DAGs).
        authenticate: who is asking (default: the Airflow session check); every route depends on it.
    """

    async def signed_in(request: Request) -> str:
        return await authenticate(request)

    app = FastAPI(title="barrierflow checkpoints", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(signed_in)])

    @app.exception_handler(NotAuthenticatedError)
    async def _unauthenticated(request: Request, exc: NotAuthenticatedError) -> Response:
        return _error(request, 401, str(exc), exc.login_url)

    @app.exception_handler(NotAuthorizedError)
    async def _forbidden(request: Request, exc: NotAuthorizedError) -> Response:
        return _error(request, 403, str(exc))

    @app.exception_handler(UnknownPipelineError)
    async def _unknown(request: Request, exc: UnknownPipelineError) -> Response:
        return _error(request, 404, str(exc))

    @app.exception_handler(ReportNotFoundError)
    async def _no_report(request: Request, exc: ReportNotFoundError) -> Response:
        return _error(request, 404, str(exc))

    def _skew_report(store: store_reader.CheckpointStore) -> dict[str, Any] | None:
        raw = store_reader.read_report_object(store, _SKEW_KEY)
        if raw is None:
            return None
        try:
            return dict(json.loads(raw))
        except ValueError as exc:
            log.warning("ignoring unreadable %s in %s: %s", _SKEW_KEY, store.uri, exc)
            return None

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, pipeline: str | None = None,
             limit: Limit = DEFAULT_LIMIT) -> HTMLResponse:
        pipelines = list_pipelines(pipelines_dir)
        loadable = [p for p in pipelines if p.spec is not None]
        if not loadable:
            return HTMLResponse(render_page(pipelines, None, _base(request),
                                            message=f"no pipeline specs in {pipelines_dir}"))
        entry = find_entry(pipelines_dir, pipeline or loadable[0].name)
        store = _store(entry)
        history = history_of(entry, store, limit=limit)
        return HTMLResponse(render_page(pipelines, history, _base(request), _skew_report(store)))

    @app.get("/api/pipelines")
    def api_pipelines() -> dict[str, Any]:
        return {"pipelines_dir": pipelines_dir, "pipelines": [p.as_dict() for p in list_pipelines(pipelines_dir)]}

    @app.get("/api/pipelines/{name}")
    def api_pipeline(name: str, limit: Limit = DEFAULT_LIMIT) -> dict[str, Any]:
        return history_of(find_entry(pipelines_dir, name), limit=limit).as_dict()

    def _not_verified(name: str, checkpoint_id: int) -> ReportNotFoundError:
        return ReportNotFoundError(f"checkpoint {checkpoint_id} of pipeline {name!r} has no stored verification "
                                   f"result; run 'barrierflow verify SPEC --checkpoint {checkpoint_id}'")

    def _verifications(entry: PipelineEntry, checkpoint_id: int) -> dict[str, store_reader.VerificationReport]:
        """The stored results of cut ``checkpoint_id``: each verified stage's."""
        stages = store_reader.read_stage_verifications(entry.path, checkpoint_id)
        return {stage: report for stage, report in stages.items() if report is not None}

    @app.get("/api/pipelines/{name}/checkpoints/{checkpoint_id}/verification")
    def api_verification(name: str, checkpoint_id: int) -> dict[str, Any]:
        entry = find_entry(pipelines_dir, name)
        reports = _verifications(entry, checkpoint_id)
        if not reports:
            raise _not_verified(name, checkpoint_id)
        stages = store_reader.read_stage_verifications(entry.path, checkpoint_id)
        return {"checkpoint_id": checkpoint_id,
                "stages": {s: r.model_dump(mode="json") if r else None for s, r in stages.items()}}

    @app.get("/pipelines/{name}/checkpoints/{checkpoint_id}/verification", response_class=HTMLResponse)
    def verification_page(name: str, checkpoint_id: int) -> HTMLResponse:
        reports = _verifications(find_entry(pipelines_dir, name), checkpoint_id)
        if not reports:
            raise _not_verified(name, checkpoint_id)
        return HTMLResponse(store_reader.render_verification_html(name, list(reports.values())))

    @app.get("/pipelines/{name}/verification", response_class=HTMLResponse)
    def verification_summary(name: str, limit: Limit = DEFAULT_LIMIT) -> HTMLResponse:
        entry = find_entry(pipelines_dir, name)
        checkpoints = store_reader.read_global_history(entry.path, limit).checkpoints
        reports = [p.verification for c in reversed(checkpoints) for p in c.stages if p.verification is not None]
        return HTMLResponse(store_reader.render_verification_html(name, reports))

    @app.get("/pipelines/{name}/reports/{path:path}")
    def report_file(name: str, path: str) -> Response:
        key = _report_key(path)
        raw = store_reader.read_report_object(_store(find_entry(pipelines_dir, name)), key)
        if raw is None:
            raise ReportNotFoundError(f"pipeline {name!r} has no {key} in its checkpoint store")
        media = mimetypes.guess_type(key)[0] or "application/octet-stream"
        return Response(raw, media_type=media, headers={"X-Content-Type-Options": "nosniff"})

    return app
