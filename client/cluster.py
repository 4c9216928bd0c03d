"""The SDK over a cluster (``Producer(namesrv=...)``, ``PushConsumer(namesrv=...)``,
``PullConsumer(namesrv=...)``, ``Admin(namesrv=...)``): routes from the NameServers
(``wharf.client.namesrv``), one single-broker client per group master.

One pattern for every client, delegation: the cluster client holds ``BrokerClients`` of
single-broker clients of its own kind (``Producer``, ``PushConsumer``, ``PullConsumer``,
``BrokerAdmin``: made with ``Connection.to(master)``, started on first use, closed together)
and the route of the topic chooses which ones a call goes to: ``ClusterSender`` (one group per
send), ``ClusterConsumers`` (one consumer per master holding a subscribed topic),
``ClusterQueues`` (a queue's group), ``ClusterAdmin`` (every master holding the topic, or of
the cluster: ``wharf.client.cluster_admin``). None of them subclasses the client it delegates to.

Sends (``ClusterSender``): a topic's writable groups (a master and write queues) in turn, round
robin per topic; a group that failed a send, or answered slowly, is avoided for a while
(RocketMQ's latency fault tolerance: failures 30 s; latency >= 550 / 1000 / 2000 / 3000 /
15000 ms avoided 30 / 60 / 120 / 180 / 600 s); retries go to another group, and each attempt
gets ``remaining deadline / attempts left`` so a dead broker cannot eat the whole send timeout
(RocketMQ #8997). A selector picks among (broker, queue) pairs of every group and the message
stays on its group (ordered messages never fail over). When no group takes writes because a
group has no master (an election under way), a send polls the route every 100 ms until its
deadline instead of failing at once (an ordered send waits so for its own group). Routes are cached and dropped when the
NameServer pushes a change of the topic's route (``wharf.client.route_watch``: WatchRoutes;
a dead broker's route changes within milliseconds), and at once after a failed send; while
the watch is broken they expire after ``route_ttl_s`` (30 s, RocketMQ's poll) instead.

Consumption (``ClusterConsumers``): one single-broker ``PushConsumer`` per master holding a
subscribed topic, each rebalancing that broker's queues among the group's members (every
member reaches every broker, so every (broker, queue) has exactly one owner in the group);
offsets live on each queue's broker. The set of masters follows the routes: reconciled when
the NameServer pushes a change of a subscribed topic's route (within ~1 s), polled every
``route_refresh_s`` (5 s) only while the watch is broken; a new group gets a consumer, a
vanished one's consumer is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from wharf.client.connection import Connection
from wharf.client.errors import NotFoundError, UnavailableError, WharfError
from wharf.client.message import MessageQueue
from wharf.client.namesrv import NameServerClient, TopicRoute
from wharf.client.route_watch import RouteWatch
from wharf.client.selector import MessageQueueSelector

log = logging.getLogger("wharf.client.cluster")

PERM_READ, PERM_WRITE = 4, 2
# While a group has no master, a send polls its route this often until its deadline.
MASTER_WAIT_POLL_S = 0.1
WAKE_S = 0.5  # how often a consumer's route follower checks whether the watch broke
FAILURE_ISOLATION_S = 30.0
# RocketMQ's MQFaultStrategy: latency (ms) at least -> not available for (s).
LATENCY_TIERS = ((15000, 600.0), (3000, 180.0), (2000, 120.0), (1000, 60.0), (550, 30.0))

C = TypeVar("C")  # a single-broker client
R = TypeVar("R")


class FaultTolerance:
    """When each broker may be chosen again (monotonic seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def available(self, broker: str) -> bool:
        return self._until.get(broker, 0.0) <= self._clock()

    def failed(self, broker: str) -> None:
        self._until[broker] = self._clock() + FAILURE_ISOLATION_S

    def answered(self, broker: str, latency_ms: float) -> None:
        for at_least, avoid_s in LATENCY_TIERS:
            if latency_ms >= at_least:
                self._until[broker] = self._clock() + avoid_s
                return
        self._until.pop(broker, None)


def name_server_client(namesrv: str | Connection) -> NameServerClient:
    """The NameServers of a cluster client: addresses (unsigned unless the environment has
    keys, plaintext) or a Connection's (``NameServerClient.of``)."""
    if isinstance(namesrv, Connection):
        return NameServerClient.of(namesrv)
    return NameServerClient(namesrv)


class BrokerClients(Generic[C]):
    """One started single-broker client per address (made by ``make(address)`` on first
    use): the per-broker delegation every cluster client shares (``ClusterSender``,
    ``ClusterConsumers``, ``ClusterQueues``, ``wharf.client.cluster_admin.ClusterAdmin``)."""

    def __init__(self, make: Callable[[str], C]) -> None:
        self._make = make
        self.by_address: dict[str, C] = {}
        self._lock = asyncio.Lock()

    async def get(self, address: str) -> C:
        client = self.by_address.get(address)
        if client is None:
            async with self._lock:
                client = self.by_address.get(address)
                if client is None:
                    client = self._make(address)
                    await client.start()  # type: ignore[attr-defined]
                    self.by_address[address] = client
        return client

    async def close(self, address: str | None = None) -> None:
        addresses = [address] if address is not None else list(self.by_address)
        for a in addresses:
            client = self.by_address.pop(a, None)
            if client is not None:
                try:
                    await client.close()  # type: ignore[attr-defined]
                except WharfError as exc:  # a dead broker: its last commit cannot land
                    log.warning("closing the client of %s: %s", a, exc)


class ClusterSender(Generic[C]):
    def __init__(
        self,
        namesrv: str | Connection,
        make_client: Callable[[str], C],
        send_timeout: float,
        retry_times: int,
        route_ttl_s: float = 30.0,
    ) -> None:
        """``namesrv``: the NameServers' addresses, or a client's Connection (its keys and,
        with ``namesrv_tls``, TLS dial them too); ``make_client(address)``: a master's client."""
        self.namesrv = name_server_client(namesrv)
        self._clients: BrokerClients[C] = BrokerClients(make_client)
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.route_ttl_s = route_ttl_s
        self.faults = FaultTolerance()
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._next: dict[str, int] = {}
        self.watch = RouteWatch(self.namesrv, self._route_changed)
        self._kept: list[str] = []  # topics whose every master keeps a started client
        self._kept_versions: dict[str, int] = {}
        self._connecting: asyncio.Task[None] | None = None
        self._connect_again = False

    def _route_changed(self, topic: str, version: int) -> None:
        cached = self._routes.get(topic)
        if cached is not None and cached[1].version != version:
            del self._routes[topic]
        if topic in self._kept and self._kept_versions.get(topic) != version:
            self._connect_again = True  # a pass running now may have read the old route
            if self._connecting is None or self._connecting.done():
                self._connecting = asyncio.get_running_loop().create_task(self._follow_kept())

    async def _follow_kept(self) -> None:
        while self._connect_again:
            self._connect_again = False
            await self._connect_kept()

    async def keep_connected(self, topics: list[str]) -> None:
        """Start a client on every master holding ``topics`` now, and on each master that
        joins their routes later (a transaction checker's listeners)."""
        self._kept = sorted(set(topics))
        await self._connect_kept()
        self.watch.add(self._kept)

    async def _connect_kept(self) -> None:
        for topic in self._kept:
            try:
                route = await self.namesrv.query_route(topic)
            except NotFoundError:
                continue
            except WharfError as exc:
                log.warning("connecting to the masters of %s: %s", topic, exc)
                continue
            self._kept_versions[topic] = route.version
            for group in route.groups.values():
                if group.master:
                    await self._clients.get(group.master)

    async def first_answer(self, topic: str, call: Callable[[C], Awaitable[R]]) -> R:
        """``call`` on the masters of the topic's groups in turn: the first that does not
        answer NotFoundError (calls naming a message only its broker holds)."""
        route = await self.route(topic, refresh=True)
        masters = sorted(g.master for g in route.groups.values() if g.master)
        last: NotFoundError | None = None
        for address in masters:
            try:
                return await call(await self._clients.get(address))
            except NotFoundError as exc:
                last = exc
        raise last or NotFoundError(f"no live master holds {topic!r}")

    async def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        cached = self._routes.get(topic)
        now = time.monotonic()
        expired = cached is not None and (
            not self.watch.healthy and now - cached[0] > self.route_ttl_s
        )
        if cached is None or refresh or expired:
            route = await self.namesrv.query_route(topic)
            self._routes[topic] = (now, route)
            self.watch.add([topic])
            return route
        return cached[1]

    @staticmethod
    def writable(route: TopicRoute) -> list[tuple[str, str, int]]:
        """(broker name, master address, write queues) of the groups that take writes."""
        out = []
        for name, queues in sorted(route.queues.items()):
            group = route.groups.get(name)
            master = group.master if group else None
            if master and queues.write_queue_nums > 0 and queues.perm & PERM_WRITE:
                out.append((name, master, queues.write_queue_nums))
        return out

    def _pick(self, topic: str, groups: list[tuple[str, str, int]], tried: set[str]) -> int:
        fresh = [i for i, g in enumerate(groups) if g[0] not in tried]
        healthy = [i for i in fresh if self.faults.available(groups[i][0])]
        choices = healthy or fresh or list(range(len(groups)))
        # A random start per topic (RocketMQ's ThreadLocalIndex): short-lived producers -- one
        # CLI send each -- would otherwise all pick the first group.
        n = self._next.get(topic)
        if n is None:
            n = random.randrange(1 << 16)
        self._next[topic] = n + 1
        return choices[n % len(choices)]

    async def send(
        self,
        topic: str,
        call: Callable[[C, int | None, float], Awaitable[R]],
        queue_id: int | None = None,
        selector: MessageQueueSelector | None = None,
        selector_arg: object = None,
        deadline_s: float | None = None,
    ) -> R:
        """``call(client, queue_id, seconds)`` on a group's client, retried on other groups."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (deadline_s or self.send_timeout)
        tried: set[str] = set()
        pinned: str | None = None  # a selector's group: ordered messages stay on it
        last: WharfError | None = None
        for attempt in range(self.retry_times + 1):
            route = await self.route(topic, refresh=attempt > 0)
            groups = self.writable(route)
            if not groups or (pinned is not None and pinned not in {g[0] for g in groups}):
                route = await self._await_master(topic, route, pinned, deadline)
                groups = self.writable(route)
            if not groups:
                raise NotFoundError(f"no broker group of the cluster takes writes to {topic!r}")
            if selector is not None:
                if pinned is None:
                    queues = [
                        MessageQueue(topic, q, name) for name, _, n in groups for q in range(n)
                    ]
                    chosen = selector.select(queues, selector_arg)
                    pinned, queue_id = chosen.broker_name, chosen.queue_id
                match = [g for g in groups if g[0] == pinned]
                if not match:
                    raise NotFoundError(
                        f"broker group {pinned!r} no longer takes writes to {topic!r}"
                    )
                name, address, _ = match[0]
            else:
                name, address, _ = groups[self._pick(topic, groups, tried)]
            budget = (deadline - loop.time()) / (self.retry_times + 1 - attempt)
            if budget <= 0:
                break
            client = await self._clients.get(address)
            started = loop.time()
            try:
                result = await call(client, queue_id, budget)
            except WharfError as exc:
                if not exc.retriable:
                    raise
                self.faults.failed(name)
                tried.add(name)
                last = exc
                log.debug("send to %s (%s) failed: %s; %d retries left", name, address, exc,
                          self.retry_times - attempt)  # fmt: skip
                continue
            self.faults.answered(name, (loop.time() - started) * 1000)
            return result
        if last is not None:
            raise last
        raise NotFoundError(f"no attempt left within the deadline for {topic!r}")

    async def _await_master(
        self, topic: str, route: TopicRoute, pinned: str | None, deadline: float
    ) -> TopicRoute:
        """A group of the route has no master (controller mode elects one within its lease;
        static roles wait for a restart): wait for the route to show one, until the send's
        deadline, instead of failing every send of the election (an ordered send waits for
        its own group). Returns the route to use; UnavailableError (retriable) at the
        deadline. A route whose groups all have masters is returned as it is."""
        loop = asyncio.get_running_loop()

        def electing(route: TopicRoute) -> bool:
            names = [pinned] if pinned is not None else list(route.groups)
            return any(
                route.groups.get(name) is None or route.groups[name].master is None
                for name in names
            )

        while electing(route) and not (pinned is None and self.writable(route)):
            remaining = deadline - loop.time()
            if remaining <= 0:
                which = f"broker group {pinned!r}" if pinned else "no broker group"
                raise UnavailableError(
                    f"{which} of {topic!r} has a master yet (an election may be under way): "
                    "retry, or give sends a deadline longer than the controller's lease"
                )
            await asyncio.sleep(min(MASTER_WAIT_POLL_S, remaining))
            try:
                route = await self.route(topic, refresh=True)
            except NotFoundError:
                continue  # the last group of the topic left the route meanwhile
        return route

    async def any_client(self, topic: str) -> C:
        """The client of one writable group's master (calls that need a broker, not a queue)."""
        groups = self.writable(await self.route(topic))
        if not groups:
            raise NotFoundError(f"no broker group of the cluster takes writes to {topic!r}")
        return await self._clients.get(groups[0][1])

    async def close(self) -> None:
        await self.watch.close()
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        await self._clients.close()
        await self.namesrv.close()


class ClusterConsumers(Generic[C]):
    """One single-broker consumer per master holding a subscribed topic (see the module)."""

    def __init__(
        self,
        namesrv: str | Connection,
        topics: Callable[[], list[str]],
        make_consumer: Callable[[str], C],
        route_refresh_s: float = 5.0,
    ) -> None:
        self.namesrv = name_server_client(namesrv)
        self._topics = topics
        self._clients: BrokerClients[C] = BrokerClients(make_consumer)
        self.route_refresh_s = route_refresh_s
        self._task: asyncio.Task[None] | None = None
        self.watch = RouteWatch(self.namesrv, self._route_changed)
        self._versions: dict[str, int] = {}  # the route version each topic was reconciled at
        self._changed = asyncio.Event()

    @property
    def consumers(self) -> dict[str, C]:
        return dict(self._clients.by_address)

    def _route_changed(self, topic: str, version: int) -> None:
        if self._versions.get(topic) != version:
            self._changed.set()

    async def start(self) -> None:
        await self.reconcile()
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def reconcile(self) -> None:
        """Start a consumer on each master that holds a subscribed topic, close the others."""
        masters: set[str] = set()
        topics = self._topics()
        self.watch.add(topics)
        for topic in topics:
            try:
                route = await self.namesrv.query_route(topic)
            except NotFoundError:
                self._versions[topic] = 0
                continue
            self._versions[topic] = route.version
            masters |= {g.reader for g in route.groups.values() if g.reader}
        for address in sorted(masters - set(self._clients.by_address)):
            log.info("consuming from broker %s", address)
            await self._clients.get(address)
        for address in sorted(set(self._clients.by_address) - masters):
            log.info("broker %s left the routes; its consumer closes", address)
            await self._clients.close(address)

    async def _follow(self) -> None:
        """Reconcile on a pushed change; poll every ``route_refresh_s`` while the watch is
        broken."""
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WAKE_S):
                    await self._changed.wait()
            polling = not self.watch.healthy and loop.time() - last >= self.route_refresh_s
            if not (self._changed.is_set() or polling):
                continue
            self._changed.clear()
            last = loop.time()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except WharfError as exc:
                log.warning("route refresh failed (%s); next in %.0f s", exc, self.route_refresh_s)

    async def each(self, action: Callable[[C], Awaitable[Any]]) -> None:
        for client in list(self._clients.by_address.values()):
            await action(client)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.watch.close()
        await self._clients.close()
        await self.namesrv.close()


class ClusterQueues(Generic[C]):
    """Queues of every group as (topic, queue, broker name), and the started single-broker
    client of the master that serves each (``PullConsumer(namesrv=...)``)."""

    def __init__(
        self,
        namesrv: str | Connection,
        make_client: Callable[[str], C],
    ) -> None:
        self.namesrv = name_server_client(namesrv)
        self._clients: BrokerClients[C] = BrokerClients(make_client)
        self._masters: dict[str, str] = {}  # broker name -> master address
        self._versions: dict[str, int] = {}  # topic -> the route version _masters came from
        self.watch = RouteWatch(self.namesrv, self._route_changed)

    def _route_changed(self, topic: str, version: int) -> None:
        """A topic's route moved: forget the masters (looked up again on the next call)."""
        if self._versions.get(topic, version) != version:
            self._masters.clear()
            self._versions.clear()

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of every group whose master holds the topic."""
        route = await self.namesrv.query_route(topic)
        self._versions[topic] = route.version
        self.watch.add([topic])
        out = []
        for name, queues in sorted(route.queues.items()):
            group = route.groups.get(name)
            if group is None or not group.reader or not queues.perm & PERM_READ:
                continue
            self._masters[name] = group.reader
            out += [MessageQueue(topic, q, name) for q in range(queues.read_queue_nums)]
        return out

    async def client(self, queue: MessageQueue) -> tuple[C, MessageQueue]:
        """The client of the queue's master, and the queue as that broker knows it."""
        if not queue.broker_name:
            raise NotFoundError(f"{queue} names no broker group: take queues from queues()")
        address = self._masters.get(queue.broker_name)
        if address is None:
            await self.queues(queue.topic)
            address = self._masters.get(queue.broker_name)
            if address is None:
                raise NotFoundError(f"broker group {queue.broker_name!r} has no live master")
        return await self._clients.get(address), MessageQueue(queue.topic, queue.queue_id)

    async def close(self) -> None:
        await self.watch.close()
        await self._clients.close()
        await self.namesrv.close()
