"""The console's ASGI application: routes, templates, authentication and error pages.

Server-rendered pages (Starlette + Jinja2 templates, autoescaped) with a few lines of vanilla
JavaScript for the live chart; every asset is served from the package (``/static/``), nothing
from a CDN. Each page is useful without JavaScript: forms are plain POSTs answered with a 303
redirect to the page showing the result (``?done=`` carries the confirmation line).

Errors never show a trace: an SDK error (unknown topic, malformed id, broker down) renders the
error page with the broker's message and a status of 404 (not found), 400 (bad input), 503
(broker unavailable), 409 (already exists) or 502 (any other broker error); a CSRF failure is
403; anything unexpected is logged and shown as a 500 page naming no internals. The Host check,
authentication, login and the security headers are ``gate.py``'s.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from wharf.client import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
    WharfError,
)
from wharf.client.console import groups, messages, overview, topics
from wharf.client.console.context import BROKER_COOKIE, HERE, Console, UserError, console_of
from wharf.client.console.gate import GateMiddleware, login, login_page, logout
from wharf.client.console.security import CsrfRefused

log = logging.getLogger("wharf.console")


# ---------------------------------------------------------------------- errors
_STATUS = [
    (NotFoundError, 404),
    (InvalidArgumentError, 400),
    (AlreadyExistsError, 409),
    (UnavailableError, 503),
    (UnauthenticatedError, 502),
    (PermissionDeniedError, 502),
]


def _error_page(request: Request, status: int, title: str, message: str) -> Response:
    console = console_of(request)
    return console.page(request, "error.html", status=status, title=title, message=message)


async def _wharf_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, WharfError)
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 502)
    broker = console_of(request).broker(request)
    if isinstance(exc, UnavailableError):
        title = f"Broker {broker.endpoint} is unavailable"
    elif isinstance(exc, NotFoundError):
        title = "Not found"
    else:
        title = f"The broker refused the request ({exc.code})"
    return _error_page(request, status, title, str(exc))


async def _user_error(request: Request, exc: Exception) -> Response:
    return _error_page(request, 400, "Bad input", str(exc))


async def _csrf_error(request: Request, exc: Exception) -> Response:
    return _error_page(request, 403, "Forbidden", str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    title = "Not found" if exc.status_code == 404 else "Error"
    return _error_page(request, exc.status_code, title, str(exc.detail))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("console page %s failed", request.url.path)
    return _error_page(
        request, 500, "Internal error", "the console failed to render this page (see its log)"
    )


async def select_broker(request: Request) -> Response:
    console = console_of(request)
    broker = console.pool.pick(request.query_params.get("broker", "0"))
    target = request.query_params.get("next", "/topics")
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        target = "/topics"  # only paths of this console: no open redirect
    response = RedirectResponse(target, 303)
    response.set_cookie(BROKER_COOKIE, str(broker.index), samesite="strict")
    return response


def build_app(console: Console) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await console.pool.start()
        console.sampler.start()
        try:
            yield
        finally:
            await console.sampler.stop()
            await console.pool.close()

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        WharfError: _wharf_error,
        UserError: _user_error,
        ValueError: _user_error,
        CsrfRefused: _csrf_error,
        HTTPException: _http_error,
        Exception: _unexpected,
    }
    routes = [
        Route("/", overview.page),
        Route("/api/rates", overview.rates_json),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/select", select_broker),
        *topics.routes(),
        *groups.routes(),
        *messages.routes(),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers=handlers,
        middleware=[Middleware(GateMiddleware, console=console)],
        lifespan=lifespan,
    )
    app.state.console = console
    return app
