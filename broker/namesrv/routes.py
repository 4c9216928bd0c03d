"""RouteTable: the NameServer's whole state, RocketMQ's RouteInfoManager as plain dicts owned
by the event loop (no locks: every change happens between two awaits).

A broker is known by (cluster, broker name, broker id) and lives as long as its session
(``service.py``): ``register`` stores its address and topics, ``heartbeat`` refreshes it,
``drop`` forgets it (session closed, unregister, or silence past ``not_active_timeout_ms`` found
by ``expire``). A topic's route is derived on demand from the live brokers: the queues of every
group whose master (id 0) holds the topic, and the addresses of every replica of those groups.
A group whose master is gone keeps its queues in the route through its lowest-id live replica,
without the write permission: consumers read from the replica (RocketMQ 4's static
master/slave), producers send to the other groups.

Every change bumps ``version`` and tells the watchers which topics' routes moved, so clients
refresh at once (RocketMQ clients poll every 30 s and send to dead brokers meanwhile).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

BrokerKey = tuple[str, str, int]  # cluster, broker name, broker id
Watcher = Callable[[set[str]], None]  # the topics whose route changed
PERM_WRITE = 2  # RocketMQ's PermName.PERM_WRITE (the NameServer imports only the broker's kit)


@dataclass(frozen=True, slots=True)
class TopicQueues:
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(slots=True)
class LiveBroker:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    data_version: int
    topics: dict[str, TopicQueues]
    registered_at_ms: int
    last_seen: float  # monotonic seconds
    owner: object = None  # the session that registered it (a newer session takes it over)
    epoch: int = 0  # controller mode: the master term it claims (0 with static roles)
    remoting_address: str = ""  # its RocketMQ 4.x remoting port, host:port ("": none)
    kafka_address: str = ""  # the Kafka address its Metadata names, host:port ("": none)


@dataclass(frozen=True, slots=True)
class Route:
    topic: str
    queues: list[tuple[str, TopicQueues]]  # (broker name, queues), sorted by broker name
    brokers: list[tuple[str, str, dict[int, str]]]  # (cluster, broker name, id -> address)
    version: int


class RouteTable:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.brokers: dict[BrokerKey, LiveBroker] = {}
        self.version = 0
        self._topic_versions: dict[str, int] = {}
        self._watchers: list[Watcher] = []
        # Broker names whose write permission mqadmin wipeWritePerm (205) took away: their
        # queues are routed without PERM_WRITE until addWritePerm (327) or the group's master
        # registers a changed topic table (as Apache's RouteInfoManager, whose wiped queueData
        # a changed registration replaces).
        self.write_wiped: set[str] = set()

    # --- changes --------------------------------------------------------------------------
    def register(
        self,
        key: BrokerKey,
        address: str,
        data_version: int,
        topics: dict[str, TopicQueues],
        owner: object = None,
        epoch: int = 0,
        remoting_address: str = "",
        kafka_address: str = "",
    ) -> bool:
        """Store a broker's registration; False (ignored) when another session holds the key
        with a higher epoch: a deposed master that wakes up (SIGCONT after a partition) must
        not take the route back from the master elected meanwhile (RocketMQ #6316)."""
        old = self.brokers.get(key)
        if old is not None and old.owner is not owner and old.epoch > epoch:
            return False
        if old is None:
            touched = set(topics)
        elif (old.address, old.remoting_address, old.kafka_address) != (
            address,
            remoting_address,
            kafka_address,
        ):
            touched = set(topics) | set(old.topics)
        else:
            # Only the routes of the topics added, removed or changed: a broker with 25,000
            # topics that creates one re-registers them all (its dataVersion moved), and
            # telling every watcher that 25,001 routes moved cost them 25,001 lookups.
            held = old.topics
            touched = {t for t, queues in topics.items() if held.get(t) != queues}
            touched.update(t for t in held if t not in topics)
        cluster, name, broker_id = key
        if (
            broker_id == 0
            and name in self.write_wiped
            and (old is None or old.data_version != data_version)
        ):
            self.write_wiped.discard(name)
            touched.update(topics)
        self.brokers[key] = LiveBroker(
            cluster, name, broker_id, address, data_version, topics,
            old.registered_at_ms if old else int(time.time() * 1000), self._clock(), owner,
            epoch, remoting_address, kafka_address,
        )  # fmt: skip
        self._changed(touched)
        return True

    def heartbeat(self, key: BrokerKey, data_version: int, owner: object = None) -> bool:
        """Refresh a broker; False when it must register (unknown, or older topics known).
        A heartbeat of another session than the key's holder refreshes nothing."""
        broker = self.brokers.get(key)
        if broker is None or broker.data_version != data_version:
            return False
        if owner is not None and broker.owner is not owner:
            return True
        broker.last_seen = self._clock()
        return True

    def drop(self, key: BrokerKey, owner: object = None) -> bool:
        """Forget a broker (only if ``owner`` registered it, when given: the session of a
        restarted broker's old connection ends after its new one registered)."""
        broker = self.brokers.get(key)
        if broker is None or (owner is not None and broker.owner is not owner):
            return False
        del self.brokers[key]
        self._changed(set(broker.topics))
        return True

    def delete_topic(self, topic: str) -> bool:
        """Forget ``topic`` in every broker's registration (mqadmin deleteTopic, after the
        brokers): its route is gone until a broker registers it again. False: none held it."""
        holders = [b for b in self.brokers.values() if topic in b.topics]
        for broker in holders:
            broker.topics = {t: q for t, q in broker.topics.items() if t != topic}
        self._changed({topic} if holders else set())
        return bool(holders)

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """mqadmin wipeWritePerm (205, ``writable`` False) / addWritePerm (327): take the
        write bit off (or give it back to) the queues of ``broker_name`` in every route.
        Returns the number of topics it holds (Apache's wipeTopicCount / addTopicCount; 0 for
        a name no live broker has, which changes nothing)."""
        topics = {
            t for b in self.brokers.values() if b.broker_name == broker_name for t in b.topics
        }
        if not topics:
            return 0
        if writable:
            self.write_wiped.discard(broker_name)
        else:
            self.write_wiped.add(broker_name)
        self._changed(topics)
        return len(topics)

    def expire(self, not_active_timeout_s: float) -> list[LiveBroker]:
        """Drop brokers silent for longer than the timeout; returns them."""
        now = self._clock()
        gone = [b for b in self.brokers.values() if now - b.last_seen > not_active_timeout_s]
        for broker in gone:
            self.drop((broker.cluster, broker.broker_name, broker.broker_id))
        return gone

    def _changed(self, topics: set[str]) -> None:
        if not topics:
            return
        self.version += 1
        for topic in topics:
            self._topic_versions[topic] = self.version
        for watcher in list(self._watchers):
            watcher(topics)

    # --- queries --------------------------------------------------------------------------
    def route(self, topic: str) -> Route | None:
        """The topic's route, or None when no live master holds it."""
        queues: list[tuple[str, TopicQueues]] = []
        groups: dict[str, tuple[str, dict[int, str]]] = {}
        holders: dict[str, LiveBroker] = {}  # per group: its master, else its lowest replica
        for broker in self.brokers.values():
            if topic in broker.topics:
                best = holders.get(broker.broker_name)
                if best is None or broker.broker_id < best.broker_id:
                    holders[broker.broker_name] = broker
        for name, broker in holders.items():
            held = broker.topics[topic]
            if broker.broker_id != 0 or name in self.write_wiped:
                # The master is gone: its replicas serve reads (RocketMQ 4's static mode), so
                # the group's queues stay routable, read-only: producers go elsewhere. The same
                # for a group whose write permission was wiped (205).
                held = dataclasses.replace(held, perm=held.perm & ~PERM_WRITE)
            queues.append((name, held))
            groups.setdefault(name, (broker.cluster, {}))
        if not queues:
            return None
        for broker in self.brokers.values():  # every replica of the groups that hold it
            if broker.broker_name in groups:
                groups[broker.broker_name][1][broker.broker_id] = broker.address
        queues.sort(key=lambda q: q[0])
        brokers = [(c, name, addrs) for name, (c, addrs) in sorted(groups.items())]
        return Route(topic, queues, brokers, self._topic_versions.get(topic, self.version))

    def topic_version(self, topic: str) -> int:
        """The version of the topic's route; 0 when it has none."""
        return self._topic_versions.get(topic, 0) if self.route(topic) else 0

    def masters(self, cluster: str | None = None) -> list[LiveBroker]:
        return sorted(
            (b for b in self.brokers.values() if b.broker_id == 0 and cluster in (None, b.cluster)),
            key=lambda b: b.broker_name,
        )

    def listing(self) -> list[LiveBroker]:
        return sorted(self.brokers.values(), key=lambda b: (b.cluster, b.broker_name, b.broker_id))

    def seen_ago_ms(self, broker: LiveBroker) -> int:
        return int((self._clock() - broker.last_seen) * 1000)

    # --- watchers -------------------------------------------------------------------------
    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.remove(watcher)

    def topics(self) -> Iterable[str]:
        return {t for b in self.brokers.values() for t in b.topics}
