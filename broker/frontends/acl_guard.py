"""AclGuard: the one check in front of every authenticated RPC, and the file's reloader.

``controller`` passes ``guard.wrap`` to ``handlers.add_servicer`` for wharf.v1
MessagingService/AdminService and apache.rocketmq.v2 MessagingService (never for gRPC health
and reflection), so every method handler of those services runs this first:

1. authentication (signature.py): the request's ``authorization`` + ``x-mq-date-time``
   metadata, signed with a known account's secret, within the clock-skew window;
2. addresses: the peer must match ``globalWhiteRemoteAddresses`` and the account's
   ``whiteRemoteAddress`` when those are set;
3. authorization: every ``Need`` of the method's entry in table.py (admins pass all).

Refusals are the front end's (``Refusals``, passed to ``wrap``; the guard knows no protocol):
wharf.v1 aborts with UNAUTHENTICATED (1) or PERMISSION_DENIED (2,3); apache.rocketmq.v2
(``broker.v2.codes.V2_REFUSALS``) answers the method's response with Status UNAUTHORIZED
(40100) or FORBIDDEN (40300) (a server stream: one such reply; Telemetry: one
TelemetryCommand, then the stream ends). A client stream (wharf.v1 SendMessageStream) is authenticated once when it
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

The file, signature, address and permission checks live in ``accounts.py`` (the NameServer
uses them too). Reload: ``watch()`` stats the file every second (mtime, size, inode); a changed file is parsed
and swapped in whole; a file that does not parse keeps the previous rules and logs an ERROR
(once per change). Good signatures are memoised per (authorization, date) value for the
current rules only (cleared on reload; at most 4096 entries); the clock window is checked on
every request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor
from wharf.broker.frontends.grpc.handlers import MalformedRequest, RefusedRequest
from wharf.broker.kit.acl.accounts import (
    AccountChecker,
    Denied,
    Unauthenticated,
    peer_address,
)
from wharf.broker.kit.acl.caller import set_caller
from wharf.broker.kit.acl.refusals import Refusals
from wharf.broker.kit.acl.rules import Account
from wharf.broker.kit.acl.table import ACCESS, ADMIN, V1_ADMIN

__all__ = ["V1_REFUSALS", "AclGuard", "Denied", "Refusals", "Unauthenticated", "peer_address"]


V1_REFUSALS = Refusals(
    ("UNAUTHENTICATED", grpc.StatusCode.UNAUTHENTICATED),
    ("PERMISSION_DENIED", grpc.StatusCode.PERMISSION_DENIED),
)


Observe = Callable[[str, str, float], None]
# verdict(request, context): None when allowed, else (status code, message)
Verdict = Callable[[Any, Any], tuple[Any, str] | None]
ReplyOf = Callable[[Any, str], Any]  # reply_of(code, message): the method's refusal reply


class AclGuard(AccountChecker):
    """The checks of ``accounts.AccountChecker`` in front of every method handler."""

    def __init__(self, path: Path, max_skew_s: float, observe: Observe | None = None) -> None:
        super().__init__(path, max_skew_s)
        self._observe = observe or (lambda method, code, seconds: None)

    # --- wrapping handlers ----------------------------------------------------------------------
    def wrap(
        self,
        service: str,
        method: MethodDescriptor,
        behavior: Any,
        response_cls: Any,
        refusals: Refusals = V1_REFUSALS,
    ) -> Any:
        """``behavior`` guarded by the ACL, refused the front end's way (``refusals``)."""
        path = f"{service}/{method.name}"
        needs_of = ACCESS[path]  # KeyError: a method missing from the table (a test checks)
        verdict = self._verdict(path, needs_of, refusals, method.name, service == V1_ADMIN)
        in_reply = refusals.reply
        reply_of: ReplyOf | None = None
        if in_reply is not None:

            def reply_of(code: Any, message: str) -> Any:
                return in_reply(response_cls, code, message)

        if not method.client_streaming and not method.server_streaming:
            return _guard_unary(behavior, verdict, reply_of)
        if not method.client_streaming:
            return _guard_server_stream(behavior, verdict, reply_of)
        return self._guard_client_stream(path, needs_of, method, behavior, verdict, reply_of)

    def _verdict(
        self, path: str, needs_of: Any, refusals: Refusals, method_name: str, admin_only: bool
    ) -> Verdict:
        """``verdict(request, context)``: None when allowed, else (status code, message) after
        counting and logging the refusal; ``request`` None checks the caller only."""
        metric = f"{refusals.metric_prefix}{method_name}"
        codes = (*refusals.unauthenticated, *refusals.denied)

        def verdict(request: Any, context: Any) -> tuple[Any, str] | None:
            """None when allowed, else (status code, message) after counting it."""
            started = time.perf_counter()
            try:
                account = self.authenticate(context.invocation_metadata(), context.peer)
                set_caller(account.access_key, account.admin)  # this call's task only
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
            self.log_refusal(f"{path} {name}", f"{path}: {message}")
            return code, message

        return verdict

    def _per_request(
        self, path: str, needs_of: Any
    ) -> Callable[[AsyncIterator[Any], Account], AsyncIterator[Any]]:
        """``per_request(requests, account)``: a client stream's requests, each authorized on its
        own under the rules in force when it arrives (a refused one as a ``RefusedRequest``)."""

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
                    self.log_refusal(f"{path} DENIED", f"{path}: {message}")
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

        return per_request

    def _guard_client_stream(
        self,
        path: str,
        needs_of: Any,
        method: MethodDescriptor,
        behavior: Any,
        verdict: Verdict,
        reply_of: ReplyOf | None,
    ) -> Any:
        """A client stream (bidi or stream-unary): authenticated when it opens, then each
        request authorized on its own (``_per_request``)."""
        per_request = self._per_request(path, needs_of)

        async def refuse_stream(
            requests: AsyncIterator[Any], context: Any, code: Any, message: str
        ) -> AsyncIterator[Any]:
            """A bidi stream refused at open: the client's first request gets the refusal in
            its reply, then the call ends with the status. Aborting at once raced the client's
            first write, which then saw gRPC core's INTERNAL "Internal error from Core"."""
            unauthenticated = code is grpc.StatusCode.UNAUTHENTICATED
            async for reply in behavior(_refuse_first(requests, message, unauthenticated), context):
                yield reply
            await context.abort(code, message)

        async def client_stream(requests: AsyncIterator[Any], context: Any) -> Any:
            refused = verdict(None, context)
            if refused is not None:
                if reply_of is not None:
                    if method.server_streaming:
                        return _one(reply_of(*refused))
                    return reply_of(*refused)
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


def _guard_unary(behavior: Any, verdict: Verdict, reply_of: ReplyOf | None) -> Any:
    """A unary method: the request checked, then ``behavior`` or the refusal."""

    async def unary(request: Any, context: Any) -> Any:
        refused = verdict(request, context)
        if refused is None:
            return await behavior(request, context)
        if reply_of is not None:
            return reply_of(*refused)
        await context.abort(*refused)

    return unary


def _guard_server_stream(behavior: Any, verdict: Verdict, reply_of: ReplyOf | None) -> Any:
    """A server stream: the request checked, then ``behavior``'s replies or the refusal."""

    async def server_stream(request: Any, context: Any) -> AsyncIterator[Any]:
        refused = verdict(request, context)
        if refused is None:
            async for reply in behavior(request, context):
                yield reply
        elif reply_of is not None:
            yield reply_of(*refused)
        else:
            await context.abort(*refused)

    return server_stream


async def _refuse_first(
    requests: AsyncIterator[Any], message: str, unauthenticated: bool
) -> AsyncIterator[Any]:
    """The refusal in place of the stream's first request, and no further request."""
    async for request in requests:
        yield RefusedRequest(message, getattr(request, "request_id", 0), unauthenticated)
        return


async def _one(reply: Any) -> AsyncIterator[Any]:
    yield reply
