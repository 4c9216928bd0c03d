"""Who may reach the console and which POSTs it accepts.

Binding: the console listens on loopback (127.0.0.1:8082) by default. ``check_bind`` refuses a
non-loopback ``--listen`` unless ``--auth-token`` or ``--basic-auth`` is given: the console can
delete topics and move offsets, so it is never open to a network without credentials.

Host (DNS rebinding): a page on another site can point its own name at 127.0.0.1 and then
drive a loopback console as same-origin, so every request's ``Host`` must be one of the
console's names (``Guard.host_allowed``): the ``--listen`` host, the loopback names and
addresses when it listens on loopback or on every interface, any IP literal and this machine's
host name when it listens on every interface (a rebinding needs a name the attacker controls;
an IP literal is never one), and each ``--allowed-host`` (the names a proxy or DNS gives it).
Ports are not compared (docker publishes 8082 as 8083). Anything else is refused with 421
before any other check.

Authentication (when configured), checked on every request except ``/static/`` and ``/login``:
- ``--basic-auth USER:PASSWORD``: HTTP Basic (the browser asks once per session);
- ``--auth-token TOKEN``: ``Authorization: Bearer TOKEN`` (scripts, health checks), or the
  login page's form (``POST /login``), which opens a session: a random id (32 bytes, never the
  token) in the ``wharf_console_session`` cookie (HttpOnly, SameSite=Strict, Secure over
  https), looked up in a table held in memory (``Sessions``: at most 1,000 sessions, each
  valid 12 hours; a restart logs everyone out). The token never travels in a URL: the old
  ``GET /login?token=`` is answered 400 with the way to log in now.
Either accepted credential lets a request through; comparisons are constant-time. A refused
request gets 401 (with ``WWW-Authenticate: Basic`` when basic auth is configured; a browser's
page request gets the login form).

CSRF: every mutating action is a POST, and a POST is accepted only when
1. its ``Origin`` header (or, without one, its ``Referer``) names this console's host (the
   request's ``Host`` header; the scheme is not compared, so a TLS-terminating proxy that keeps
   ``Host`` works), and
2. its form carries ``csrf_token`` equal to this process's random token (32 bytes, made at start,
   written into every form): a cross-site page can neither read it nor forge it.
Anything else is refused with 403 before the action runs. The login form is checked for 1.
only (it is served before authentication, so it carries no CSRF token).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

SESSION_COOKIE = "wharf_console_session"
CSRF_FIELD = "csrf_token"
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
WILDCARD_HOSTS = {"", "0.0.0.0", "::"}
# A working day: a session opened in the morning lasts until the evening, then the form again.
SESSION_TTL_S = 12 * 3600.0
# Sessions open at once: a few per operator is plenty; only a holder of the token can open
# one, and past the bound the oldest is dropped, so the table stays under ~200 KB.
MAX_SESSIONS = 1000
# A login form is one token (43 characters from make deploy-secrets) and a path: 8 KiB is ample
# and bounds what an unauthenticated POST may make the console read.
MAX_LOGIN_FORM_BYTES = 8192


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


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header (port, brackets and a final dot dropped, lower case);
    None when malformed."""
    header = header.strip().lower()
    if header.startswith("["):
        name, sep, rest = header[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
    else:
        name, sep, port = header.partition(":")
        if sep and not port.isdigit():
            return None  # an unbracketed IPv6 address or junk
    name = name.rstrip(".")
    return name or None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def machine_names() -> set[str]:
    """This machine's host name and fully qualified name (what a wildcard listen answers to
    besides its addresses); empty where they cannot be read."""
    names = set()
    for read in (socket.gethostname, socket.getfqdn):
        try:
            names.add(read().lower().rstrip("."))
        except OSError:
            continue
    return {n for n in names if n}


class Sessions:
    """Logged-in browsers: random session id -> expiry (monotonic). At most ``limit`` at once
    (the oldest dropped past it); each valid ``ttl_s`` from its login."""

    def __init__(
        self,
        ttl_s: float = SESSION_TTL_S,
        limit: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self._clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()  # in login (so expiry) order

    def __len__(self) -> int:
        return len(self._expiry)

    def open(self) -> str:
        self._expire()
        while len(self._expiry) >= self.limit:
            self._expiry.popitem(last=False)
        session = secrets.token_urlsafe(32)
        self._expiry[session] = self._clock() + self.ttl_s
        return session

    def valid(self, session: str) -> bool:
        expiry = self._expiry.get(session) if session else None
        if expiry is None:
            return False
        if expiry <= self._clock():
            del self._expiry[session]
            return False
        return True

    def close(self, session: str) -> None:
        self._expiry.pop(session, None)

    def _expire(self) -> None:
        now = self._clock()
        while self._expiry and next(iter(self._expiry.values())) <= now:
            self._expiry.popitem(last=False)


@dataclass
class Guard:
    """The configured credentials, the names this console answers to, its sessions and this
    process's CSRF token."""

    auth_token: str | None = None
    basic_auth: str | None = None  # "user:password"
    listen_host: str = "127.0.0.1"  # the --listen host: which Host names are this console's
    allowed_hosts: Iterable[str] = ()  # --allowed-host: names beyond those
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    sessions: Sessions = field(default_factory=Sessions)

    def __post_init__(self) -> None:
        if self.basic_auth is not None and ":" not in self.basic_auth:
            raise ValueError("--basic-auth must look like USER:PASSWORD")
        listen = self.listen_host.strip("[]").lower()
        self._wildcard = listen in WILDCARD_HOSTS
        self._loopback = self._wildcard or is_loopback(listen)
        names = {listen} if not self._wildcard else machine_names()
        for extra in self.allowed_hosts:
            name = host_name(extra)
            if name is None:
                raise ValueError(f"--allowed-host must be a host name or address, got {extra!r}")
            names.add(name)
        self._names = frozenset(names)

    def host_allowed(self, header: str | None) -> bool:
        """``header`` (the request's Host) names this console (see the module docstring)."""
        name = host_name(header or "")
        if name is None:
            return False
        if name in self._names or (self._loopback and is_loopback(name)):
            return True
        return self._wildcard and _is_ip(name)

    def session_of(self, request: Request) -> str:
        """The request's session id when it is a live one, else the empty string."""
        session = request.cookies.get(SESSION_COOKIE, "")
        return session if self.sessions.valid(session) else ""

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
            if self.session_of(request):
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

    async def checked_form(self, request: Request, *, csrf: bool = True) -> dict[str, str]:
        """The POST's url-encoded form (first value per field), or CsrfRefused. ``csrf``
        False: the Origin check only (the login form)."""
        if not self.same_origin(request):
            raise CsrfRefused("cross-site request refused (Origin does not match)")
        if csrf:
            body = await request.body()
        else:  # unauthenticated: read a bounded body, not whatever was sent
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_LOGIN_FORM_BYTES:
                    raise CsrfRefused(f"login form over {MAX_LOGIN_FORM_BYTES} bytes")
        try:
            text = body.decode()
        except UnicodeDecodeError as exc:
            raise CsrfRefused("form is not UTF-8") from exc
        form = {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}
        if csrf and not same_secret(form.get(CSRF_FIELD, ""), self.csrf_token):
            raise CsrfRefused("missing or wrong CSRF token: reload the page and try again")
        return form


class CsrfRefused(Exception):
    """A POST that failed the Origin or token check (answered 403)."""


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())
