"""Request signing for brokers with ``aclEnable``: RocketMQ 5's scheme, as the official
clients compute it (the broker side is wharf.broker.kit.acl.signature).

Every call carries ``x-mq-date-time: <UTC now, YYYYMMDDTHHMMSSZ>`` and
``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1(secret, date)>``. The date is taken per call (a long-lived client
never sends a stale one; the signature of the current second is reused).

Credentials: explicit ``access_key`` / ``secret_key`` arguments, else the environment
``WHARF_ACCESS_KEY`` / ``WHARF_SECRET_KEY``; neither = unsigned calls (a broker without ACL).
One without the other is an InvalidArgumentError. The secret is never in a repr.

Channels: ``grpc.metadata_call_credentials`` needs a secure channel, so signing is done by
wrapping the channel, which works on plaintext and TLS channels alike: ``SignedChannel`` for
grpc.aio channels (the SDK: each multi-callable adds the two entries to its call's metadata),
``SyncSigningInterceptor`` for blocking channels (Spark, via ``grpc.intercept_channel``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from wharf.client.errors import InvalidArgumentError

ACCESS_KEY_ENV = "WHARF_ACCESS_KEY"
SECRET_KEY_ENV = "WHARF_SECRET_KEY"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)


def resolve_credentials(
    access_key: str | None = None,
    secret_key: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Credentials | None:
    env = os.environ if env is None else env
    ak = access_key if access_key is not None else env.get(ACCESS_KEY_ENV, "")
    sk = secret_key if secret_key is not None else env.get(SECRET_KEY_ENV, "")
    if not ak and not sk:
        return None
    if not ak or not sk:
        raise InvalidArgumentError(
            f"an access key needs its secret key and the other way round "
            f"(arguments access_key/secret_key or {ACCESS_KEY_ENV}/{SECRET_KEY_ENV})"
        )
    return Credentials(ak, sk)


class Signer:
    """The two metadata entries of a signed call, recomputed when the second changes."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self._second = -1
        self._metadata: tuple[tuple[str, str], ...] = ()

    def metadata(self) -> tuple[tuple[str, str], ...]:
        now = int(time.time())
        if now != self._second:
            date = time.strftime(DATE_FORMAT, time.gmtime(now))
            mac = hmac.new(self._credentials.secret_key.encode(), date.encode(), hashlib.sha1)
            auth = (
                f"MQv2-HMAC-SHA1 Credential={self._credentials.access_key}, "
                f"SignedHeaders=x-mq-date-time, Signature={mac.hexdigest()}"
            )
            self._metadata = (("x-mq-date-time", date), ("authorization", auth))
            self._second = now
        return self._metadata

    def add_to(self, metadata: Any) -> Any:
        """``metadata`` (None, a sequence of pairs or grpc.aio.Metadata) plus the signature."""
        signed = self.metadata()
        if metadata is None:
            return grpc.aio.Metadata(*signed)
        if isinstance(metadata, grpc.aio.Metadata):
            out = grpc.aio.Metadata(*metadata)
            for key, value in signed:
                out.add(key, value)
            return out
        return (*tuple(metadata), *signed)


class _SignedCallable:
    """A multi-callable whose every call carries the signature (merged into its metadata)."""

    __slots__ = ("_inner", "_signer")

    def __init__(self, inner: Any, signer: Signer) -> None:
        self._inner = inner
        self._signer = signer

    def __call__(self, *args: Any, metadata: Any = None, **kwargs: Any) -> Any:
        return self._inner(*args, metadata=self._signer.add_to(metadata), **kwargs)


class SignedChannel(grpc.aio.Channel):
    """A grpc.aio channel whose calls are all signed. A wrapper instead of a client
    interceptor: grpc.aio runs intercepted calls through an extra task each, which cost up to
    a third of the rate of small unary calls measured here (tests/bench/acl.py)."""

    def __init__(self, channel: grpc.aio.Channel, credentials: Credentials) -> None:
        self._channel = channel
        self._signer = Signer(credentials)

    async def __aenter__(self) -> SignedChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._channel.close(None)

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._channel.channel_ready()

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _SignedCallable(self._channel.unary_unary(*args, **kwargs), self._signer)

    def unary_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _SignedCallable(self._channel.unary_stream(*args, **kwargs), self._signer)

    def stream_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _SignedCallable(self._channel.stream_unary(*args, **kwargs), self._signer)

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _SignedCallable(self._channel.stream_stream(*args, **kwargs), self._signer)


class _SyncDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, base: Any, metadata: Any) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class SyncSigningInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Signs every call of a blocking channel (``grpc.intercept_channel``)."""

    def __init__(self, credentials: Credentials) -> None:
        self._signer = Signer(credentials)

    def _details(self, details: Any) -> Any:
        return _SyncDetails(details, (*(details.metadata or ()), *self._signer.metadata()))

    def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request_iterator)


def sign_sync_channel(channel: grpc.Channel, credentials: Credentials | None) -> grpc.Channel:
    return (
        channel
        if credentials is None
        else grpc.intercept_channel(channel, SyncSigningInterceptor(credentials))
    )
