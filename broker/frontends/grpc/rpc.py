"""The one place where exceptions become gRPC statuses (via broker.errors.status_for) and
where every RPC is timed for metrics.

``born_host_of``: a gRPC peer as the born host of what it sends (wharf.v1 and v2).

``@rpc("SendMessage")`` wraps a servicer method ``async def m(self, request, context)`` whose
``self.ctx`` is a FrontEndKit.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import Any, TypeVar

import grpc
from wharf.broker.errors import InvalidArgumentError, status_for
from wharf.broker.frontends.grpc.handlers import MalformedRequest

log = logging.getLogger("wharf.broker.frontends.grpc.rpc")
_T = TypeVar("_T")
_LOGGED_CODES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS)  # less ``log_once`` errors
# An operating-system limit (open files) refuses every request that hits it: one WARNING per
# minute per method says so instead of a line per request.
_LIMIT_LOG_INTERVAL_S = 60.0
_limit_logged: dict[str, float] = {}


def _log_limit(method: str, message: str) -> None:
    now = time.monotonic()
    if now - _limit_logged.get(method, -_LIMIT_LOG_INTERVAL_S) >= _LIMIT_LOG_INTERVAL_S:
        _limit_logged[method] = now
        log.warning("%s refused: %s", method, message)


Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_T]]


def rpc(method: str) -> Callable[[Handler[_T]], Handler[_T]]:
    def decorate(fn: Handler[_T]) -> Handler[_T]:
        @functools.wraps(fn)
        async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> _T:
            started = time.perf_counter()
            status = "OK"
            try:
                if type(request) is MalformedRequest:
                    raise InvalidArgumentError(request.message)
                return await fn(self, request, context)
            except asyncio.CancelledError:
                status = "CANCELLED"  # client deadline or disconnect: nothing to answer
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                code, message = status_for(exc)
                status = code.name
                if code in _LOGGED_CODES and not getattr(exc, "log_once", False):
                    log.exception("%s failed: %s", method, message)
                elif isinstance(exc, OSError):
                    _log_limit(method, message)
                await context.abort(code, message)
                raise  # abort() raises; this line only satisfies the type checker
            finally:
                self.ctx.metrics.observe_rpc(method, status, time.perf_counter() - started)

        return handler

    return decorate


@lru_cache(maxsize=4096)  # a connection's peer string, asked once per request
def born_host_of(peer: str) -> str:
    """grpc peer 'ipv4:127.0.0.1:5555' -> '127.0.0.1:5555' (ipv6 peers keep the port only)."""
    kind, _, address = peer.partition(":")
    if kind == "ipv4":
        return address
    _, _, port = address.rpartition(":")
    return f"0.0.0.0:{port if port.isdigit() else 0}"
