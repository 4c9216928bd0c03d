"""AclGuard: the one check in front of every authenticated RPC, and the file's reloader.

``controller`` passes ``guard.wrap`` to ``handlers.add_servicer`` for wharf.v1
MessagingService/AdminService and apache.rocketmq.v2 MessagingService (never for gRPC health
and reflection), so every method handler of those services runs this first:

1. authentication (signature.py): the request's ``authorization`` + ``x-mq-date-time``
   metadata, signed with a known account's secret, within the clock-skew window;
2. addresses: the peer must match ``globalWhiteRemoteAddresses`` and the account's
   ``whiteRemoteAddress`` when those are set;
3. authorization: every ``Need`` of the method's entry in table.py (admins pass all).

Refusals: wharf.v1 aborts with UNAUTHENTICATED (1) or PERMISSION_DENIED (2,3);
apache.rocketmq.v2 answers the method's response with Status UNAUTHORIZED (40100) or
FORBIDDEN (40300) (a server stream: one such reply; Telemetry: one TelemetryCommand, then the
stream ends). A client stream (wharf.v1 SendMessageStream) is authenticated once when it
opens (refused: the first request gets an UNAUTHENTICATED / PERMISSION_DENIED error reply,
then the call ends with that status; an abort at once raced the client's first write, which
then saw an INTERNAL error);
each request is then authorized on its own under the rules in force when it arrives (each of
a PullMessageStream ``batch`` too), and a refused one gets its own PERMISSION_DENIED error
reply (the stream goes on). A request that does not parse is
authenticated, then left to the handler (INVALID_ARGUMENT / BAD_REQUEST), except on
AdminService where a non-admin is refused first.

Messages name the user, the resource and the action, never which part of a signature was
wrong: an unknown access key and a wrong signature get the same message. Refusals are counted
in the RPC metrics under their status (UNAUTHENTICATED, PERMISSION_DENIED, UNAUTHORIZED,
FORBIDDEN) and logged at most once a minute per method and kind of refusal. Secrets are
never logged.

Reload: ``watch()`` stats the file every second (mtime, size, inode); a changed file is parsed
and swapped in whole; a file that does not parse keeps the previous rules and logs an ERROR
(once per change). Good signatures are memoised per (authorization, date) value for the
current rules only (cleared on reload; at most 4096 entries); the clock window is checked on
every request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor
from wharf.broker.acl import signature
from wharf.broker.acl.rules import (
    Account,
    AclFileError,
    AclRules,
    Perm,
    allowed_from,
    group_of_system_topic,
    parse_rules,
)
from wharf.broker.acl.table import ACCESS, ADMIN, V1_ADMIN, Need
from wharf.broker.handlers import MalformedRequest, RefusedRequest
from wharf.broker.v2.codes import status as v2_status

log = logging.getLogger("wharf.broker.acl")
RELOAD_POLL_S = 1.0
_CACHE_MAX = 4096
_LOG_INTERVAL_S = 60.0
V2_UNAUTHORIZED = 40100  # apache.rocketmq.v2.Code.UNAUTHORIZED
V2_FORBIDDEN = 40300  # apache.rocketmq.v2.Code.FORBIDDEN


class Unauthenticated(Exception):
    pass


class Denied(Exception):
    pass


Observe = Callable[[str, str, float], None]


def peer_address(peer: str) -> str:
    """'ipv4:1.2.3.4:5' -> '1.2.3.4'; 'ipv6:[::1]:5' -> '::1'; anything else -> ''."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return ""


class AclGuard:
    def __init__(self, path: Path, max_skew_s: float, observe: Observe | None = None) -> None:
        self.path = path
        self.max_skew_s = max_skew_s
        self.rules = AclRules()
        self._observe = observe or (lambda method, code, seconds: None)
        self._stat: tuple[int, int, int] | None = None
        # (authorization, date) -> (account, date as epoch): good signatures of these rules
        self._verified: dict[tuple[Any, Any], tuple[Account, float]] = {}
        self._perms: dict[tuple[str, str, str], int] = {}  # (user, kind, name) -> perm bits
        self._logged: dict[str, float] = {}

    # --- the file -------------------------------------------------------------------------------
    def _file_stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def load_blocking(self) -> None:
        """First load at start: raises AclFileError (the broker does not start) on a broken
        file; a missing file = no accounts (every request refused), with a WARNING."""
        self._stat = self._file_stat()
        if self._stat is None:
            log.warning(
                "aclEnable is on but %s does not exist: every request is refused until "
                "accounts are added (wharf acl user create --store ...)", self.path
            )  # fmt: skip
            self._swap(AclRules())
            return
        self._swap(parse_rules(self.path.read_text(encoding="utf-8")))
        log.info("ACL enabled: %d account(s) from %s", len(self.rules.accounts), self.path)

    def _swap(self, rules: AclRules) -> None:
        self.rules = rules
        self._verified = {}
        self._perms = {}

    def reload_if_changed_blocking(self) -> bool:
        stat = self._file_stat()
        if stat == self._stat:
            return False
        self._stat = stat
        if stat is None:
            log.error("ACL file %s was removed: keeping the previous rules", self.path)
            return False
        try:
            rules = parse_rules(self.path.read_text(encoding="utf-8"))
        except (AclFileError, OSError, UnicodeDecodeError) as exc:
            log.error("ACL file %s not reloaded, keeping the previous rules: %s", self.path, exc)
            return False
        self._swap(rules)
        log.info("ACL reloaded: %d account(s) from %s", len(rules.accounts), self.path)
        return True

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_POLL_S)
            try:
                await asyncio.to_thread(self.reload_if_changed_blocking)
            except Exception:  # never let the watcher die: the rules in force stay
                log.exception("ACL reload failed")

    # --- checks ---------------------------------------------------------------------------------
    def authenticate(self, metadata: Any, peer: str | Callable[[], str]) -> Account:
        """The account a request is signed by; Unauthenticated / Denied (addresses).
        ``peer`` may be a function (``context.peer``): called only when an allow-list is set."""
        auth = date = None
        for key, value in metadata or ():
            if key == signature.AUTH_HEADER:
                auth = value
            elif key == signature.DATE_HEADER:
                date = value
        hit = self._verified.get((auth, date))
        if hit is not None:  # a good signature seen before under these rules: only the clock
            account, stamp = hit
            try:
                signature.check_stamp(date or "", stamp, self.max_skew_s)
            except signature.AuthError as exc:
                raise Unauthenticated(str(exc)) from None
        else:
            account = self._authenticate_slow(metadata, auth, date)
        if not self.rules.global_white_remote_addresses and not account.white_remote_address:
            return account
        if callable(peer):
            peer = peer()
        address = peer_address(peer)
        if not allowed_from(self.rules.global_white_remote_addresses, address):
            raise Denied(
                f"user {account.access_key!r} may not connect from {address or peer!r} "
                "(globalWhiteRemoteAddresses)"
            )
        if not allowed_from(account.white_remote_address, address):
            raise Denied(
                f"user {account.access_key!r} may not connect from {address or peer!r} "
                "(its whiteRemoteAddress)"
            )
        return account

    def _authenticate_slow(self, metadata: Any, auth: Any, date: Any) -> Account:
        try:
            signed = signature.parse(metadata)
            stamp = signature.check_date(signed.date, self.max_skew_s)
        except signature.AuthError as exc:
            raise Unauthenticated(str(exc)) from None
        account = self.rules.accounts.get(signed.access_key)
        if account is None or not signature.verify(signed, account.secret_key):
            raise Unauthenticated(
                f"access key {signed.access_key!r} is unknown or its signature does not match"
            )
        if len(self._verified) >= _CACHE_MAX:
            self._verified.clear()
        self._verified[(auth, date)] = (account, stamp)
        return account

    def _perm(self, account: Account, kind: str, name: str) -> int:
        """The account's permission on a resource, memoised for the current rules (pattern
        matching costs a few microseconds per request otherwise)."""
        key = (account.access_key, kind, name)
        perm = self._perms.get(key)
        if perm is None:
            owned = account.topic_perm(name) if kind == "topic" else account.group_perm(name)
            perm = owned.value
            if len(self._perms) >= _CACHE_MAX:
                self._perms.clear()
            self._perms[key] = perm
        return perm

    def authorize(self, account: Account, needs: list[Need], method: str) -> None:
        if account.admin:
            return
        for need in needs:
            if need.kind == "admin":
                raise Denied(f"user {account.access_key!r} is not an admin: {method} needs admin")
            kind, name = need.kind, need.name
            if kind == "topic" and (group := group_of_system_topic(name)) is not None:
                kind, name = "group", group
            owned = self._perm(account, kind, name)
            wanted = need.perm.value if kind == "topic" else Perm.SUB.value
            if not owned & wanted:
                action = "PUB or SUB" if wanted == Perm.ANY.value else Perm(wanted).label
                raise Denied(
                    f"user {account.access_key!r} may not {action} on {kind} {name!r} "
                    f"({method}; granted: {Perm(owned).label})"
                )

    def _log_refusal(self, key: str, message: str) -> None:
        """At most one line a minute per (method, kind of refusal): a flood of forged
        requests (each with its own date or key) cannot flood the log."""
        now = time.monotonic()
        if now - self._logged.get(key, -_LOG_INTERVAL_S) >= _LOG_INTERVAL_S:
            if len(self._logged) > 1000:
                self._logged.clear()
            self._logged[key] = now
            log.warning("refused: %s", message)

    # --- wrapping handlers ----------------------------------------------------------------------
    def wrap(self, service: str, method: MethodDescriptor, behavior: Any, response_cls: Any) -> Any:
        """``behavior`` guarded by the ACL (see the module doc for the refusal forms)."""
        path = f"{service}/{method.name}"
        needs_of = ACCESS[path]  # KeyError: a method missing from the table (a test checks)
        v2 = not service.startswith("wharf.v1.")
        metric = f"v2.{method.name}" if v2 else method.name
        admin_only = service == V1_ADMIN
        codes = (
            ("UNAUTHORIZED", V2_UNAUTHORIZED, "FORBIDDEN", V2_FORBIDDEN)
            if v2
            else (
                "UNAUTHENTICATED",
                grpc.StatusCode.UNAUTHENTICATED,
                "PERMISSION_DENIED",
                grpc.StatusCode.PERMISSION_DENIED,
            )
        )

        def verdict(request: Any, context: Any) -> tuple[Any, str] | None:
            """None when allowed, else (status code, message) after counting it."""
            started = time.perf_counter()
            try:
                account = self.authenticate(context.invocation_metadata(), context.peer)
                if request is not None:
                    if type(request) is MalformedRequest:
                        needs = [ADMIN] if admin_only else []
                    else:
                        needs = needs_of(request)
                    self.authorize(account, needs, path)
                return None
            except Unauthenticated as exc:
                name, code, message = codes[0], codes[1], f"unauthenticated: {exc}"
            except Denied as exc:
                name, code, message = codes[2], codes[3], f"permission denied: {exc}"
            self._observe(metric, name, time.perf_counter() - started)
            self._log_refusal(f"{path} {name}", f"{path}: {message}")
            return code, message

        def v2_reply(code: int, message: str) -> Any:
            return response_cls(status=v2_status(code, message))

        if not method.client_streaming and not method.server_streaming:

            async def unary(request: Any, context: Any) -> Any:
                refused = verdict(request, context)
                if refused is None:
                    return await behavior(request, context)
                if v2:
                    return v2_reply(*refused)
                await context.abort(*refused)

            return unary

        if not method.client_streaming:

            async def server_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                refused = verdict(request, context)
                if refused is None:
                    async for reply in behavior(request, context):
                        yield reply
                elif v2:
                    yield v2_reply(*refused)
                else:
                    await context.abort(*refused)

            return server_stream

        def per_request(requests: AsyncIterator[Any], account: Account) -> AsyncIterator[Any]:
            def check(request: Any, current: Account | None) -> Any:
                if type(request) is MalformedRequest or (current and current.admin):
                    return request
                try:
                    if current is None:
                        raise Denied(f"user {account.access_key!r} was removed")
                    self.authorize(current, needs_of(request), path)
                except Denied as exc:
                    message = f"permission denied: {exc}"
                    self._log_refusal(f"{path} DENIED", f"{path}: {message}")
                    return RefusedRequest(message, getattr(request, "request_id", 0))
                return request

            async def checked() -> AsyncIterator[Any]:
                async for request in requests:
                    # the rules in force now (a reload may have changed or removed the user)
                    current = self.rules.accounts.get(account.access_key)
                    batch = getattr(request, "batch", None)
                    if batch:  # PullMessageStream: each request of a batch on its own
                        for item in batch:
                            yield check(item, current)
                    else:
                        yield check(request, current)

            return checked()

        async def refuse_first(
            requests: AsyncIterator[Any], message: str, unauthenticated: bool
        ) -> AsyncIterator[Any]:
            async for request in requests:
                yield RefusedRequest(message, getattr(request, "request_id", 0), unauthenticated)
                return

        async def refuse_stream(
            requests: AsyncIterator[Any], context: Any, code: Any, message: str
        ) -> AsyncIterator[Any]:
            """A bidi stream refused at open: the client's first request gets the refusal in
            its reply, then the call ends with the status. Aborting at once raced the client's
            first write, which then saw gRPC core's INTERNAL "Internal error from Core"."""
            unauthenticated = code is grpc.StatusCode.UNAUTHENTICATED
            async for reply in behavior(refuse_first(requests, message, unauthenticated), context):
                yield reply
            await context.abort(code, message)

        async def client_stream(requests: AsyncIterator[Any], context: Any) -> Any:
            refused = verdict(None, context)
            if refused is not None:
                if v2:
                    if method.server_streaming:
                        return _one(v2_reply(*refused))
                    return v2_reply(*refused)
                if method.server_streaming:
                    return refuse_stream(requests, context, *refused)
                await context.abort(*refused)
            account = self.authenticate(context.invocation_metadata(), context.peer)
            return behavior(per_request(requests, account), context)

        if method.server_streaming:

            async def bidi(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
                replies = await client_stream(requests, context)
                async for reply in replies:
                    yield reply

            return bidi

        async def stream_unary(requests: AsyncIterator[Any], context: Any) -> Any:
            result = await client_stream(requests, context)
            return await result if asyncio.iscoroutine(result) else result

        return stream_unary


async def _one(reply: Any) -> AsyncIterator[Any]:
    yield reply
