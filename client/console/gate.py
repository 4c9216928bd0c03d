"""The console's front door: security headers on every answer, the Host check (DNS
rebinding), authentication, and the login and logout pages (``security.py`` has the rules).

Headers on every response, errors and assets included:
- ``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'``: no page may frame the console
  (clickjacking a delete button);
- ``Content-Security-Policy``: scripts, styles, images and fetches from the console itself only,
  forms posting only to it, no plugins, no ``<base>``; the templates hold no inline script or
  style and ``static/console.js`` builds its chart with DOM calls, so nothing needs
  ``'unsafe-inline'``;
- ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin`` (a Referer still
  reaches the console's own CSRF check; no URL of it leaves for another site).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from wharf.client.console.context import Console, console_of
from wharf.client.console.security import SESSION_COOKIE, Guard, same_secret

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
TOKEN_IN_URL = (
    "The token no longer goes in the URL (/login?token=...): a URL stays in the browser's "
    "history, in proxy logs and in Referer headers. Paste it in this form instead, or send the "
    "header 'Authorization: Bearer TOKEN'."
)


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers", [])}
            extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


class GateMiddleware:
    """Every HTTP request: the security headers, then 421 for a Host that is not this
    console's, then 401 without the configured credentials (``/static/`` and ``/login`` are
    open: they reveal nothing)."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        request = Request(scope)
        guard = self.console.guard
        host = request.headers.get("host")
        if not guard.host_allowed(host):
            body = (
                f"421 Misdirected Request: Host {host!r} is not a name of this console "
                "(its --listen host, or loopback); add it with --allowed-host NAME"
            )
            await Response(body, 421, media_type="text/plain")(scope, receive, send)
            return
        path = scope.get("path", "")
        open_path = path.startswith("/static/") or path == "/login"
        if not guard.enabled or open_path or guard.authenticated(request):
            await self.app(scope, receive, send)
            return
        await self._refused(request, guard)(scope, receive, send)

    def _refused(self, request: Request, guard: Guard) -> Response:
        headers = {}
        if guard.basic_auth:
            headers["WWW-Authenticate"] = 'Basic realm="wharf console"'
        browser = request.method == "GET" and "text/html" in request.headers.get("accept", "")
        if guard.auth_token and browser:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return login_form(self.console, 401, "", target, headers)
        body = (
            "authentication required: basic auth, 'Authorization: Bearer TOKEN', "
            "or log in with the console's token at /login"
        )
        return Response(body, 401, headers=headers, media_type="text/plain")


def local_path(target: str | None) -> str:
    """``target`` when it is a path of this console, else ``/`` (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def login_form(
    console: Console,
    status: int,
    message: str,
    target: str = "/",
    headers: dict[str, str] | None = None,
) -> Response:
    html = console.templates.get_template("login.html").render(message=message, next=target)
    return HTMLResponse(html, status_code=status, headers=headers)


async def login_page(request: Request) -> Response:
    """GET /login: the form; the old ``?token=`` URL is refused with the way to log in now."""
    console = console_of(request)
    target = local_path(request.query_params.get("next"))
    if "token" in request.query_params:
        return login_form(console, 400, TOKEN_IN_URL, target)
    if not console.guard.auth_token or console.guard.session_of(request):
        return RedirectResponse(target, 303)
    return login_form(console, 200, "", target)


async def login(request: Request) -> Response:
    """POST /login (``token``, ``next``): a session cookie and 303 to ``next``, or the form
    again with 401. Same-origin POSTs only."""
    console = console_of(request)
    guard = console.guard
    if not guard.auth_token:
        return RedirectResponse("/", 303)
    form = await guard.checked_form(request, csrf=False)
    target = local_path(form.get("next"))
    if not same_secret(form.get("token", "").strip(), guard.auth_token):
        return login_form(console, 401, "Wrong token.", target)
    response = RedirectResponse(target, 303)
    response.set_cookie(
        SESSION_COOKIE,
        guard.sessions.open(),
        max_age=int(guard.sessions.ttl_s),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    """POST /logout: the session closed, its cookie removed, 303 to the login form."""
    guard = console_of(request).guard
    await guard.checked_form(request)
    guard.sessions.close(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse("/login", 303)
    response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict")
    return response
