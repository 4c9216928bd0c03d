"""Who may reach the console and which POSTs it accepts.

Binding: the console listens on loopback (127.0.0.1:8082) by default. ``check_bind`` refuses a
non-loopback ``--listen`` unless ``--auth-token`` or ``--basic-auth`` is given: the console can
delete topics and move offsets, so it is never open to a network without credentials.

Authentication (when configured), checked on every request except ``/static/``:
- ``--basic-auth USER:PASSWORD``: HTTP Basic (the browser asks once per session);
- ``--auth-token TOKEN``: ``Authorization: Bearer TOKEN``, or the ``wharf_console_token`` cookie,
  which ``GET /login?token=TOKEN`` sets (HttpOnly, SameSite=Strict) for browsers.
Either accepted credential lets a request through; comparisons are constant-time. A refused
request gets 401 (with ``WWW-Authenticate: Basic`` when basic auth is configured).

CSRF: every mutating action is a POST, and a POST is accepted only when
1. its ``Origin`` header (or, without one, its ``Referer``) names this console's host (the
   request's ``Host`` header; the scheme is not compared, so a TLS-terminating proxy that keeps
   ``Host`` works), and
2. its form carries ``csrf_token`` equal to this process's random token (32 bytes, made at start,
   written into every form): a cross-site page can neither read it nor forge it.
Anything else is refused with 403 before the action runs.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

TOKEN_COOKIE = "wharf_console_token"
CSRF_FIELD = "csrf_token"
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class BindRefused(ValueError):
    """A public ``--listen`` without credentials."""


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:8082``) -> (host, port); ValueError when malformed."""
    host, sep, port = listen.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen must look like HOST:PORT, got {listen!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve to anything


def check_bind(host: str, *, auth_token: str | None, basic_auth: str | None) -> None:
    """BindRefused when ``host`` is not loopback and no credentials are configured."""
    if not is_loopback(host) and not auth_token and not basic_auth:
        raise BindRefused(
            f"refusing to listen on {host} (not loopback) without credentials: give "
            "--auth-token TOKEN or --basic-auth USER:PASSWORD, or listen on 127.0.0.1"
        )


@dataclass
class Guard:
    """The configured credentials and this process's CSRF token."""

    auth_token: str | None = None
    basic_auth: str | None = None  # "user:password"
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def __post_init__(self) -> None:
        if self.basic_auth is not None and ":" not in self.basic_auth:
            raise ValueError("--basic-auth must look like USER:PASSWORD")

    @property
    def enabled(self) -> bool:
        return bool(self.auth_token or self.basic_auth)

    def authenticated(self, request: Request) -> bool:
        if not self.enabled:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.auth_token:
            if scheme.lower() == "bearer" and same_secret(value.strip(), self.auth_token):
                return True
            if same_secret(request.cookies.get(TOKEN_COOKIE, ""), self.auth_token):
                return True
        if self.basic_auth and scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return False
            return same_secret(decoded, self.basic_auth)
        return False

    def same_origin(self, request: Request) -> bool:
        """Origin (or Referer) names this console; a request with neither passes this check
        and is left to the token."""
        origin = request.headers.get("origin")
        if origin is None:
            referer = request.headers.get("referer")
            if referer is None:
                return True
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        if origin == "null":
            return False
        # Host only, not the scheme: behind a TLS-terminating proxy the browser's origin is
        # https while the console sees http; another site always has another host.
        return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()

    async def checked_form(self, request: Request) -> dict[str, str]:
        """The POST's url-encoded form (first value per field), or CsrfRefused."""
        if not self.same_origin(request):
            raise CsrfRefused("cross-site request refused (Origin does not match)")
        body = await request.body()
        try:
            text = body.decode()
        except UnicodeDecodeError as exc:
            raise CsrfRefused("form is not UTF-8") from exc
        form = {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}
        if not same_secret(form.get(CSRF_FIELD, ""), self.csrf_token):
            raise CsrfRefused("missing or wrong CSRF token: reload the page and try again")
        return form


class CsrfRefused(Exception):
    """A POST that failed the Origin or token check (answered 403)."""


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())
