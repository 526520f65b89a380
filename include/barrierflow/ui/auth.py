"""Who may see the Checkpoints page: a signed-in Airflow user who may read DAGs.

Airflow mounts plugin apps without authentication, so the page checks every request itself,
as Airflow's own API does (``airflow.api_fastapi.core_api.security.get_user``):

1. Step 1. The credential is the ``Authorization: Bearer <JWT>`` header if present, else the
   UI session cookie (``_token``, set by Airflow's login). None -> 401.
2. Step 2. Airflow's auth manager (``get_auth_manager().get_user_from_token``) validates it:
   signature, expiry, revocation. Invalid or expired -> 401 (the page then links to login).
3. Step 3. The user must be allowed the website and reading DAGs (``is_authorized_view``
   ``WEBSITE`` and ``is_authorized_dag`` ``GET``): the checkpoints belong to the DAGs'
   pipelines. Otherwise -> 403.

The token's value is never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import Request

from barrierflow.ui.exceptions import NotAuthenticatedError, NotAuthorizedError

log = logging.getLogger(__name__)

#: An authenticator returns the signed-in user's name or raises NotAuthenticatedError /
#: NotAuthorizedError. The app takes one, so tests can run the app without Airflow.
Authenticator = Callable[[Request], Awaitable[str]]


def request_token(request: Request) -> str | None:
    """The credential of ``request``: the Bearer token, else the ``_token`` session cookie."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.cookies.get(COOKIE_NAME_JWT_TOKEN) or None


def _login_url() -> str | None:
    from airflow.api_fastapi.app import get_auth_manager

    try:
        return str(get_auth_manager().get_url_login())
    except Exception:  # the login URL is a convenience in the 401 page; never fail on it
        return None


async def airflow_session(request: Request) -> str:
    """The Airflow user behind ``request`` (see the module docstring for the steps).

    Raises:
        NotAuthenticatedError: no credential, or Airflow rejects it (answered 401).
        NotAuthorizedError: the user may not read DAGs (answered 403).
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from jwt import InvalidTokenError

    # Step 1.
    token = request_token(request)
    if token is None:
        raise NotAuthenticatedError("not signed in to Airflow: no session cookie and no Bearer token",
                                    _login_url())
    # Step 2.
    manager = get_auth_manager()
    try:
        user = await manager.get_user_from_token(token)
    except InvalidTokenError as exc:  # ExpiredSignatureError is one too
        raise NotAuthenticatedError(f"the Airflow session is not valid ({type(exc).__name__}); sign in again",
                                    _login_url()) from None
    # Step 3.
    if not (manager.is_authorized_view(access_view=AccessView.WEBSITE, user=user)
            and manager.is_authorized_dag(method="GET", user=user)):
        log.info("Airflow user %s may not read DAGs; Checkpoints page refused", user.get_name())
        raise NotAuthorizedError(f"Airflow user {user.get_name()!r} may not read DAGs, so not their checkpoints")
    return str(user.get_name())
