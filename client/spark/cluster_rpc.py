"""The source's broker calls over every group of a cluster (option ``namesrv``).

A topic that spans broker groups is read as one Spark partition per (group, queue): its queues
are keyed ``"<topic>@<broker name>"`` (``@`` is not a topic character, so the key is never a
topic), in the planning, in Spark's checkpoint (``{"orders@broker-a": {"0": 12}}``) and in the
partitions; each call on such a key goes to that group's master, as the NameServers route it.
A group that appears later is read from its earliest offset, as a new queue is.

The cached broker name -> master address map follows the NameServers' pushed route changes
(``_RouteWatch``: a daemon thread on a WatchRoutes stream of the routed topics): when a topic's
route moves (a group's master restarted elsewhere, left, came back) the map is forgotten and
looked up again on the next call; the sink's placement (``write_groups``) stays as a task
first saw it. The watch reopens on the next NameServer every second while it is broken.

The sink (``topic_writers.py``) asks ``write_groups`` where a topic takes writes (groups with a
master, write permission and write queues, in broker name order) and sends each chunk through
``group_rpc`` to its group's master; the driver ends each group's halves there.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from wharf.client.auth import Credentials
from wharf.client.channel import TlsConfig, open_sync_channel
from wharf.client.connection import Connection
from wharf.client.spark.rpc import BrokerCallError, BrokerRpc, PendingPull, QueueBounds
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

SEPARATOR = "@"
PERM_WRITE = 2


def split_key(key: str) -> tuple[str, str]:
    """``"orders@broker-a"`` -> ("orders", "broker-a"); a plain topic -> (topic, "")."""
    topic, _, broker = key.partition(SEPARATOR)
    return topic, broker


def _plain_channel(address: str) -> grpc.Channel:
    """A plaintext, unsigned channel to a NameServer, keepalive as it accepts."""
    return open_sync_channel(address)


class _RouteWatch:
    """WatchRoutes for a growing set of topics on a daemon thread; ``on_change(topic,
    version)`` for each pushed change (and once per topic when a stream opens)."""

    RETRY_S = 1.0

    def __init__(
        self,
        addresses: list[str],
        on_change: Callable[[str, int], None],
        dial: Callable[[str], grpc.Channel] = _plain_channel,
    ) -> None:
        self._dial = dial
        self._addresses = addresses
        self._on_change = on_change
        self._topics: set[str] = set()
        self._lock = threading.Lock()
        self._call: Any = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, topic: str) -> None:
        with self._lock:
            if topic in self._topics or self._stopped:
                return
            self._topics.add(topic)
            call = self._call
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wharf-route-watch",
                                                daemon=True)  # fmt: skip
                self._thread.start()
        if call is not None:
            call.cancel()  # reopen with the new topic

    def _run(self) -> None:
        index = 0
        while not self._stopped:
            address = self._addresses[index % len(self._addresses)]
            channel = self._dial(address)
            try:
                stub = namesrv_pb2_grpc.NameServiceStub(channel)
                with self._lock:
                    if self._stopped:
                        return
                    request = namesrv_pb2.WatchRoutesRequest(topics=sorted(self._topics))
                    self._call = call = stub.WatchRoutes(request)
                try:
                    for change in call:
                        self._on_change(change.topic, change.version)
                    broken = True  # the NameServer ended the stream
                except grpc.RpcError as exc:
                    broken = exc.code() != grpc.StatusCode.CANCELLED  # else: a new topic
                finally:
                    with self._lock:
                        self._call = None
            finally:
                channel.close()
            if broken and not self._stopped:
                index += 1
                time.sleep(self.RETRY_S)

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            call = self._call
        if call is not None:
            with contextlib.suppress(Exception):
                call.cancel()


class ClusterRpc:
    """BrokerRpc's calls of the source over a cluster (``BrokerRpc`` per master, lazily)."""

    def __init__(
        self,
        namesrv: str,
        timeout_s: float = 30.0,
        credentials: Credentials | None = None,
        tls: TlsConfig | None = None,
        namesrv_tls: bool = False,
        *,
        connection: Connection | None = None,
    ) -> None:
        """``connection`` (the options' ``ReadOptions.connection``): its keys sign the calls
        to the brokers and the NameServers, its TLS is the brokers', and the NameServers' too
        with ``namesrv_tls``; or ``credentials``, ``tls`` and ``namesrv_tls`` as arguments."""
        if connection is None:
            connection = Connection(
                namesrv=namesrv,
                access_key=credentials.access_key if credentials is not None else "",
                secret_key=credentials.secret_key if credentials is not None else "",
                tls=tls,
                namesrv_tls=namesrv_tls,
            )
        elif credentials is not None or tls is not None or namesrv_tls:
            raise ValueError("give connection= or credentials / tls / namesrv_tls, not both")
        self.connection = connection
        self._namesrv = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
        random.shuffle(self._namesrv)  # spread executors over the NameServers
        self._timeout = timeout_s
        self._brokers: dict[str, BrokerRpc] = {}  # master address -> its client
        self._masters: dict[str, str] = {}  # broker name -> master address
        # topic -> [(broker name, write queue nums)] of the groups that take its writes
        self._writable: dict[str, list[tuple[str, int]]] = {}
        self._versions: dict[str, int] = {}  # topic -> route version _masters has seen
        self._watch = _RouteWatch(list(self._namesrv), self._route_changed, self._dial)

    def _dial(self, address: str) -> grpc.Channel:
        """A channel to a NameServer: signed as the brokers' calls (accessKey / secretKey),
        over TLS with option namesrvTls (the tls / caFile options)."""
        return self.connection.open_sync_channel(address, namesrv=True)

    def _route_changed(self, topic: str, version: int) -> None:
        """A pushed change (watch thread): forget the masters if the topic's route moved."""
        seen = self._versions.get(topic)
        if seen is not None and seen != version:
            self._masters.clear()
            self._versions.clear()

    @property
    def endpoint(self) -> str:
        return ";".join(self._namesrv)

    def _route(self, topic: str) -> dict[str, str]:
        """broker name -> master address of the groups that hold ``topic`` ({}: none)."""
        last: grpc.RpcError | None = None
        for address in self._namesrv:
            channel = self._dial(address)
            try:
                stub = namesrv_pb2_grpc.NameServiceStub(channel)
                reply = stub.QueryRoute(
                    namesrv_pb2.QueryTopicRouteRequest(topic=topic), timeout=5.0
                )
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    return {}
                if exc.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                ):
                    raise BrokerCallError("QueryRoute (NameServer)", address, exc) from None
                last = exc
                continue
            finally:
                channel.close()
            masters = {b.broker_name: b.addresses.get(0, "") for b in reply.brokers}
            found = {q.broker_name: masters[q.broker_name] for q in reply.queues
                     if masters.get(q.broker_name)}  # fmt: skip
            self._masters.update(found)
            self._versions[topic] = reply.version
            self._watch.add(topic)
            self._writable.setdefault(
                topic,
                sorted(
                    (q.broker_name, q.write_queue_nums)
                    for q in reply.queues
                    if q.broker_name in found and q.write_queue_nums > 0 and q.perm & PERM_WRITE
                ),
            )  # a task's placement keeps the groups it first saw
            return found
        assert last is not None
        raise BrokerCallError("QueryRoute (NameServer)", self.endpoint, last)

    def write_groups(self, topic: str) -> list[tuple[str, int]]:
        """(broker name, write queue nums) of the groups taking writes to ``topic``, in broker
        name order; looked up once per client (a task's rows keep one placement)."""
        if topic not in self._writable:
            self._route(topic)
        groups = self._writable.get(topic, [])
        if not groups:
            raise RuntimeError(f"no broker group of the cluster takes writes to {topic!r}")
        return groups

    def groups_of(self, topic: str) -> list[str]:
        """The broker names of every group holding ``topic`` now (read or write)."""
        return sorted(self._route(topic))

    def group_rpc(self, topic: str, broker_name: str) -> BrokerRpc:
        """The client of ``broker_name``'s master (for calls on ``topic``)."""
        return self._broker(f"{topic}{SEPARATOR}{broker_name}")[0]

    def _broker(self, key: str) -> tuple[BrokerRpc, str]:
        topic, name = split_key(key)
        address = self._masters.get(name) or self._route(topic).get(name)
        if not address:
            raise RuntimeError(f"broker group {name!r} of topic {topic!r} has no live master")
        rpc = self._brokers.get(address)
        if rpc is None:
            rpc = self._brokers[address] = BrokerRpc(
                [address], self._timeout, connection=self.connection.to(address)
            )
        return rpc, topic

    # --- the calls the source makes, on "<topic>@<broker>" keys ------------------------------
    def queue_bounds(self, topic: str) -> list[QueueBounds]:
        out: list[QueueBounds] = []
        for name in sorted(self._route(topic)):
            rpc, _ = self._broker(f"{topic}{SEPARATOR}{name}")
            out += [
                QueueBounds(f"{topic}{SEPARATOR}{name}", b.queue_id, b.min_offset, b.max_offset)
                for b in rpc.queue_bounds(topic)
            ]
        return out

    def search_offset(self, key: str, queue_id: int, timestamp_ms: int) -> int:
        rpc, topic = self._broker(key)
        return rpc.search_offset(topic, queue_id, timestamp_ms)

    def start_pull_records(
        self, group: str, key: str, queue_id: int, offset: int, max_messages: int, tags: str
    ) -> PendingPull:
        rpc, topic = self._broker(key)
        return rpc.start_pull_records(group, topic, queue_id, offset, max_messages, tags)

    def update_consumer_offset(self, group: str, key: str, queue_id: int, offset: int) -> None:
        rpc, topic = self._broker(key)
        rpc.update_consumer_offset(group, topic, queue_id, offset)

    def close(self) -> None:
        self._watch.close()
        for rpc in self._brokers.values():
            rpc.close()
        self._brokers.clear()

    def __enter__(self) -> ClusterRpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(opts: Any) -> BrokerRpc | ClusterRpc:
    """The source's client: one broker (``endpoints``) or a cluster (``namesrv``)."""
    namesrv = getattr(opts, "namesrv", None)
    if namesrv:
        return ClusterRpc(namesrv, opts.timeout_s, connection=opts.connection)
    return BrokerRpc.for_options(opts)


__all__: Sequence[str] = ("ClusterRpc", "connect", "split_key")
