"""Keeps the broker registered with every NameServer of ``namesrvAddr`` (RocketMQ's
BrokerOuterAPI.registerBrokerAll, over one ``BrokerSession`` stream per NameServer).

Per NameServer, a task holds a session: a full registration (cluster, broker name, id,
address, remoting and Kafka addresses, data version, every topic's queue numbers and permission) first,
then a heartbeat every ``brokerHeartbeatInterval`` ms, and a full registration again within
~50 ms of a topic change (``wake()``) or when the NameServer answers ``need_register`` (it
restarted, or dropped this broker for silence). A broken session is retried every second;
the registration lives exactly as long as the session, so a killed broker leaves every route
at once. ``stop`` sends ``unregister`` on every open session (SIGTERM: clients stop routing
here before the port closes). ``open_channel`` dials a NameServer (the controller's signs and
TLS-wraps the calls when namesrvAccessKey / namesrvTlsEnable are set; plaintext by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger("wharf.broker.cluster.registration")

RETRY_S = 1.0
UNREGISTER_WAIT_S = 1.0  # how long stop() waits for each NameServer to take the unregister

# The topic table now: (data version, topics).
TopicSnapshot = Callable[[], tuple[int, list[namesrv_pb2.TopicQueues]]]


@dataclass(frozen=True, slots=True)
class Identity:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    epoch: int = 0  # controller mode: the master term (a higher one wins a disputed key)
    remoting_address: str = ""  # the RocketMQ 4.x remoting port clients dial ("": off)
    kafka_address: str = ""  # the Kafka address clients are told (advertised; "": off)


def parse_namesrv_addr(text: str) -> list[str]:
    """``"h:p;h2:p2"`` -> ["h:p", "h2:p2"] (RocketMQ's separator; commas accepted too)."""
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]


class _Session:
    """One NameServer's session: the request stream and what it should send next."""

    def __init__(self, registrar: NamesrvRegistrar, address: str) -> None:
        self.address = address
        self._snapshot = registrar.snapshot
        self._identity = registrar.identity
        self._heartbeat_s = registrar.heartbeat_s
        self.wake = asyncio.Event()
        self.need_register = True
        self.stopping = False
        self.sent_version = -1

    def _message(self, full: bool) -> namesrv_pb2.BrokerRegistration:
        me = self._identity
        version, topics = self._snapshot()
        reg = namesrv_pb2.BrokerRegistration(
            cluster=me.cluster,
            broker_name=me.broker_name,
            broker_id=me.broker_id,
            address=me.address,
            data_version=version,
            heartbeat=not full,
            epoch=me.epoch,
            remoting_address=me.remoting_address,
            kafka_address=me.kafka_address,
        )
        if full:
            reg.topics.extend(topics)
            self.sent_version = version
        return reg

    async def requests(self) -> AsyncIterator[namesrv_pb2.BrokerRegistration]:
        self.need_register = False
        yield self._message(full=True)
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._heartbeat_s):
                    await self.wake.wait()
            self.wake.clear()
            if self.stopping:
                me = self._identity
                yield namesrv_pb2.BrokerRegistration(
                    cluster=me.cluster,
                    broker_name=me.broker_name,
                    broker_id=me.broker_id,
                    address=me.address,
                    unregister=True,
                )
                return
            full = self.need_register or self._snapshot()[0] != self.sent_version
            self.need_register = False
            yield self._message(full)


class NamesrvRegistrar:
    def __init__(
        self,
        namesrv_addresses: list[str],
        identity: Identity,
        snapshot: TopicSnapshot,
        heartbeat_interval_ms: int,
        open_channel: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
    ) -> None:
        self._open_channel = open_channel
        self.identity = identity
        self.snapshot = snapshot
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self._sessions = [_Session(self, a) for a in namesrv_addresses]
        self._tasks: list[asyncio.Task[None]] = []
        self.registered: dict[str, bool] = {a: False for a in namesrv_addresses}

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._keep(s), name=f"namesrv-session-{s.address}")
            for s in self._sessions
        ]

    async def change_identity(self, identity: Identity) -> None:
        """Register under another identity (controller mode: a replica elected master
        registers as id 0). A NameServer session carries one broker: the sessions are
        restarted, and each NameServer drops the old key as its session ends."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.identity = identity
        self._sessions = [_Session(self, s.address) for s in self._sessions]
        self.start()

    def wake(self) -> None:
        """The topic table changed: register the new one now."""
        for session in self._sessions:
            session.wake.set()

    async def _keep(self, session: _Session) -> None:
        failing = False
        while not session.stopping:
            try:
                async with self._open_channel(session.address) as channel:
                    stub = namesrv_pb2_grpc.NameServiceStub(channel)
                    call = stub.BrokerSession(session.requests())
                    self.registered[session.address] = True
                    if failing:
                        log.info("registered with NameServer %s again", session.address)
                        failing = False
                    async for event in call:
                        if event.need_register:
                            session.need_register = True
                            session.wake.set()
            except asyncio.CancelledError:
                raise
            except grpc.RpcError as exc:
                if not failing and not session.stopping:
                    log.warning(
                        "NameServer %s: session lost (%s); retrying every %.0f s",
                        session.address, exc.code().name if hasattr(exc, "code") else exc,
                        RETRY_S,
                    )  # fmt: skip
                failing = True
            self.registered[session.address] = False
            if not session.stopping:
                await asyncio.sleep(RETRY_S)

    async def stop(self) -> None:
        """Unregister from every NameServer (bounded wait), then end the sessions."""
        for session in self._sessions:
            session.stopping = True
            session.wake.set()
        if self._tasks:
            _done, pending = await asyncio.wait(self._tasks, timeout=UNREGISTER_WAIT_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
