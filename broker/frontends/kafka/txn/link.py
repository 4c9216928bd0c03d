"""A connection to another broker group's Kafka listener, for the coordinator's
WriteTxnMarkers (``markers.py``) and the partition leader's verification of a transaction
(``verify.py``).

One connection per peer address, kept; one request at a time on it, ``CALL_TIMEOUT_S``
each; any failure closes it (the caller retries). With ACL on, it authenticates once with
SASL PLAIN as the cluster's link account (namesrvAccessKey / namesrvSecretKey, an admin
account as every inter-broker link's): WriteTxnMarkers and DescribeTransactions need it.
Over TLS when this broker's Kafka listener is TLS-only (``KafkaEnv.link_tls``: the peers'
are then too), verifying the peer's certificate and its address against namesrvTlsCaFile
(the CA the brokers' other links trust; the system's roots when unset).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Any

from wharf.broker.frontends.kafka.apis import APIS
from wharf.broker.frontends.kafka.codec import decode_response, encode_request
from wharf.broker.frontends.kafka.env import KafkaEnv

__all__ = ["CALL_TIMEOUT_S", "KafkaLink", "LinkPool", "link_pool", "link_tls_context"]

CALL_TIMEOUT_S = 5.0
MAX_RESPONSE = 1 << 20  # markers and a transaction's description: a few bytes a partition
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_SIZE = struct.Struct(">i")


class KafkaLink:
    """One connection to a peer's Kafka listener, authenticated once."""

    def __init__(
        self,
        host: str,
        port: int,
        account: tuple[str, str] | None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host, self.port, self.account, self.tls = host, port, account, tls
        self.lock = asyncio.Lock()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._correlation = 0

    async def call(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        async with self.lock:
            try:
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    return await self._call(key, version, body)
            except BaseException:
                self.close()
                raise

    async def _call(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls,
                server_hostname=self.host if self.tls is not None else None,
            )  # fmt: skip
            if self.account is not None:
                await self._authenticate(*self.account)
        return await self._roundtrip(key, version, body)

    async def _roundtrip(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert self._streams is not None
        reader, writer = self._streams
        self._correlation += 1
        api = APIS[key]
        writer.write(encode_request(api, version, self._correlation, body))
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 0 < size <= MAX_RESPONSE:
            raise ConnectionError(f"a response of {size} bytes")
        correlation, reply = decode_response(api, version, await reader.readexactly(size))
        if correlation != self._correlation:
            raise ConnectionError(f"correlation {correlation}, expected {self._correlation}")
        return reply

    async def _authenticate(self, user: str, secret: str) -> None:
        shake = await self._roundtrip(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        if shake["error_code"]:
            raise ConnectionError(f"SaslHandshake PLAIN: error {shake['error_code']}")
        token = b"\x00" + user.encode() + b"\x00" + secret.encode()
        done = await self._roundtrip(SASL_AUTHENTICATE, 0, {"auth_bytes": token})
        if done["error_code"]:
            raise ConnectionError(f"SaslAuthenticate as {user!r}: error {done['error_code']}")

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


class LinkPool:
    """The links of one user (markers, verification), by peer address: each its own pool, so
    a slow marker write never delays a produce's verification behind the same lock."""

    def __init__(self, account: tuple[str, str] | None, tls: ssl.SSLContext | None = None) -> None:
        self.account, self.tls = account, tls
        self._links: dict[tuple[str, int], KafkaLink] = {}

    def get(self, host: str, port: int) -> KafkaLink:
        link = self._links.get((host, port))
        if link is None:
            link = self._links[(host, port)] = KafkaLink(host, port, self.account, self.tls)
        return link

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()


def link_pool(env: KafkaEnv) -> LinkPool:
    """A pool whose links authenticate as the cluster's link account when ACL is on."""
    broker = env.ctx.config
    keys = broker.namesrv_access_key, broker.namesrv_secret_key
    return LinkPool(keys if env.acl is not None and all(keys) else None, env.link_tls)


def link_tls_context(ca_file: str) -> ssl.SSLContext:
    """The links' client context: the peer verified against ``ca_file`` (PEM; "" = the
    system's roots), its address checked against the certificate. Read once at start."""
    return ssl.create_default_context(cafile=ca_file or None)
