"""The coordinator's WriteTxnMarkers (API 27, v0) to the masters of other broker groups: the
markers of a transaction's partitions they lead (``TxnMetadata.remote``), Kafka's way, so the
partition leader's code path is Kafka's (``handlers.write_txn_markers`` there).

Where: each partition's group (its brokerName) is looked up afresh in the topic's layout
(``KafkaEnv.layout``: the NameServers' routes), its master's advertised Kafka address, the
partition numbered as there; the pseudo-partition ``OFFSETS_TOPIC`` (a group's offsets
pending at its coordinator) goes to that group's master as the NameServers list it. How: one connection per peer address, kept; one request at a time
on it, ``CALL_TIMEOUT_S`` each; any failure closes it and the partitions not acknowledged are
returned unsent (the coordinator retries every second until all are). With ACL on the
connection authenticates with SASL PLAIN as the cluster's link account (namesrvAccessKey /
namesrvSecretKey, an admin account as every inter-broker link's): WriteTxnMarkers needs it.

Plaintext only: a peer whose Kafka listener is TLS-only is not reachable (its markers stay
pending, logged).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

from wharf.broker.frontends.kafka.apis import APIS
from wharf.broker.frontends.kafka.cluster import NO_LEADER
from wharf.broker.frontends.kafka.codec import decode_response, encode_request
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.txn.state import OFFSETS_TOPIC

__all__ = ["MarkerSender"]

log = logging.getLogger("broker.kafka")

CALL_TIMEOUT_S = 5.0
MAX_RESPONSE = 1 << 20  # a markers answer is a few bytes a partition
WRITE_TXN_MARKERS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 27, 17, 36
_SIZE = struct.Struct(">i")


class _Peer:
    """One connection to a peer's Kafka listener, authenticated once."""

    def __init__(self, host: str, port: int, account: tuple[str, str] | None) -> None:
        self.host, self.port, self.account = host, port, account
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
            self._streams = await asyncio.open_connection(self.host, self.port)
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


class MarkerSender:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env
        broker = env.ctx.config
        keys = broker.namesrv_access_key, broker.namesrv_secret_key
        self.account = keys if env.acl is not None and all(keys) else None
        self._peers: dict[tuple[str, int], _Peer] = {}

    async def send(
        self, broker_name: str, pid: int, epoch: int, commit: bool,
        partitions: list[tuple[str, int]],
    ) -> set[tuple[str, int]]:  # fmt: skip
        """The markers of ``partitions`` (topic, queue id of group ``broker_name``) written
        there: the partitions acknowledged (the others failed, to be retried)."""
        cluster = self.env.cluster
        if cluster is None:
            return set()
        numbered: dict[tuple[str, int], tuple[str, int]] = {}  # (topic, partition) -> part
        address: tuple[str, int] | None = None
        for topic, queue in partitions:
            if topic == OFFSETS_TOPIC:  # the group's pending offsets at its coordinator
                master = await cluster.master(broker_name)
                if master is not None:
                    address = (master.host, master.port)
                    numbered[(topic, queue)] = (topic, queue)
                continue
            spans = [s for s in (await self.env.layout(topic, fresh=True)).spans
                     if s.broker_name == broker_name]  # fmt: skip
            peer = cluster.peers.get(spans[0].leader) if spans else None
            if not spans or spans[0].leader == NO_LEADER or peer is None or queue >= spans[0].count:
                continue  # its master is gone: later
            address = (peer.host, peer.port)
            numbered[(topic, spans[0].first + queue)] = (topic, queue)
        if address is None or not numbered:
            return set()
        topics: dict[str, list[int]] = {}
        for topic, index in numbered:
            topics.setdefault(topic, []).append(index)
        body = {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
            "coordinator_epoch": 0,
            "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
        }]}  # fmt: skip
        peer_conn = self._peers.get(address)
        if peer_conn is None:
            peer_conn = self._peers[address] = _Peer(*address, self.account)
        try:
            reply = await peer_conn.call(WRITE_TXN_MARKERS, 0, body)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            log.warning("kafka: transaction markers to %s (%s:%d): %r",
                        broker_name, *address, exc)  # fmt: skip
            return set()
        done: set[tuple[str, int]] = set()
        for marker in reply["markers"]:
            for t in marker["topics"]:
                for p in t["partitions"]:
                    part = numbered.get((t["name"], p["partition_index"]))
                    if part is not None and p["error_code"] == 0:
                        done.add(part)
                    elif part is not None:
                        log.info("kafka: transaction marker of %s partition %d at %s: error %d",
                                 t["name"], p["partition_index"], broker_name,
                                 p["error_code"])  # fmt: skip
        return done

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()
