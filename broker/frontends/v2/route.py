"""QueryRoute and QueryAssignment: the topic's queues as the official clients select them.

- Every queue carries broker ``{name, id 0, endpoints}``: id 0 is the only one the clients
  pick (master); ``endpoints`` echoes ``request.endpoints``, the access point the client
  dialled (so a NAT/Docker address is never advertised); when a request has none, the
  broker's advertised endpoint.
- Queue ids 0..max(read, write)-1, permission READ_WRITE where the topic both reads and writes
  the id (RocketMQ's per-id rule), READ or WRITE otherwise, NONE if the topic's perm has none.
- ``accept_message_types``: the topic's ``message.type`` attribute (NORMAL, FIFO, DELAY,
  TRANSACTION; MIXED or absent = all four). The clients refuse locally to send a type the
  queue does not accept.
- Unknown topic: TOPIC_NOT_FOUND unless autoCreateTopicEnable, then the default queue count
  (the topic is created by its first send, as on the wharf.v1 path).
- QueryAssignment (PushConsumer): one queue per readable id for a FIFO group, else one queue
  with id -1 ("pop from any queue", as the proxy does); FORBIDDEN when nothing is readable.
- In a cluster (namesrvAddr): the queues and assignments of every group whose master holds the
  topic (``cluster_groups``, from the NameServers), each with its group's broker name and
  master endpoints, so clients send to and receive from every group through one access point.
"""

from __future__ import annotations

import socket

from wharf.broker.cluster.routes import GroupQueues
from wharf.broker.core.errors import TopicNotFound
from wharf.broker.core.model import TopicDefaults
from wharf.broker.core.port import Messaging
from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.v2.codes import Code, V2Error
from wharf.broker.meta.topics import (
    MESSAGE_TYPE_ATTRIBUTE,
    PERM_READ,
    PERM_WRITE,
    TopicConfig,
)
from wharf.rocketmq.v2 import definition_pb2

MessageType = definition_pb2.MessageType
Permission = definition_pb2.Permission
ALL_TYPES: tuple[int, ...] = (
    MessageType.NORMAL,
    MessageType.FIFO,
    MessageType.DELAY,
    MessageType.TRANSACTION,
)
_TYPE_BY_NAME = {
    "NORMAL": (MessageType.NORMAL,),
    "FIFO": (MessageType.FIFO,),
    "DELAY": (MessageType.DELAY,),
    "TRANSACTION": (MessageType.TRANSACTION,),
    "MIXED": ALL_TYPES,
}


def accepted_types(topic: TopicConfig | None) -> tuple[int, ...]:
    if topic is None:
        return ALL_TYPES
    name = topic.attributes.get(MESSAGE_TYPE_ATTRIBUTE, "").strip().upper()
    return _TYPE_BY_NAME.get(name, ALL_TYPES)


def route_topic(port: Messaging, name: str) -> TopicConfig | None:
    """The topic a client asks about (None: not created yet, auto-create on; the core's
    rule). ILLEGAL_TOPIC for a bad name, TOPIC_NOT_FOUND for an unknown one without
    auto-create."""
    try:
        return port.routable_topic(name)
    except TopicNotFound as exc:
        hint = f"{exc}; create it first (`wharf topic create`)"
        raise V2Error(Code.TOPIC_NOT_FOUND, hint) from None
    except InvalidArgumentError as exc:
        raise V2Error(Code.ILLEGAL_TOPIC, str(exc)) from None


def endpoints_of(address: str) -> definition_pb2.Endpoints:
    """'host:port' -> Endpoints with the scheme the clients expect."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    scheme = definition_pb2.DOMAIN_NAME
    for family, value in (
        (socket.AF_INET, definition_pb2.IPv4),
        (socket.AF_INET6, definition_pb2.IPv6),
    ):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        scheme = value
        break
    endpoints = definition_pb2.Endpoints(scheme=scheme)
    endpoints.addresses.add(host=host, port=int(port) if port.isdigit() else 0)
    return endpoints


def _permission(topic: TopicConfig | None, queue_id: int, default_nums: int) -> int:
    read = topic.read_queue_nums if topic else default_nums
    write = topic.write_queue_nums if topic else default_nums
    perm = topic.perm if topic else PERM_READ | PERM_WRITE
    can_read = queue_id < read and bool(perm & PERM_READ)
    can_write = queue_id < write and bool(perm & PERM_WRITE)
    if can_read and can_write:
        return Permission.READ_WRITE
    if can_read:
        return Permission.READ
    if can_write:
        return Permission.WRITE
    return Permission.NONE


def _queue(
    queue: definition_pb2.MessageQueue,
    topic_name: str,
    namespace: str,
    queue_id: int,
    permission: int,
    broker_name: str,
    endpoints: definition_pb2.Endpoints,
    types: tuple[int, ...],
) -> None:
    queue.topic.name = topic_name
    queue.topic.resource_namespace = namespace
    queue.id = queue_id
    queue.permission = permission  # type: ignore[assignment]
    queue.broker.name = broker_name
    queue.broker.id = 0
    queue.broker.endpoints.CopyFrom(endpoints)
    queue.accept_message_types.extend(types)  # type: ignore[arg-type]


# One broker group's share of a topic: (broker name, its endpoints, its queues of the topic
# -- None: not created yet, the default count).
Group = tuple[str, definition_pb2.Endpoints, TopicConfig | None]


def cluster_groups(
    port: Messaging,
    topic_name: str,
    own: tuple[str, definition_pb2.Endpoints],
    cluster: list[GroupQueues] | None,
) -> list[Group]:
    """The groups a route lists: this broker alone, or (with NameServers that know the topic)
    every group whose master holds it -- this one answered with the endpoints the client
    dialled, the others with their masters' addresses."""
    topic = route_topic(port, topic_name)
    if not cluster:
        return [(own[0], own[1], topic)]
    attributes = topic.attributes if topic else {}
    return [
        (
            g.broker_name,
            own[1] if g.broker_name == own[0] else endpoints_of(g.address),
            TopicConfig(topic_name, g.read_queue_nums, g.write_queue_nums, g.perm, attributes),
        )
        for g in cluster
    ]


def fill_route(
    queues: object,
    defaults: TopicDefaults,
    topic_name: str,
    namespace: str,
    groups: list[Group],
) -> None:
    """Append the topic's queues on every group to ``queues`` (a repeated MessageQueue)."""
    default = defaults.queue_nums
    for broker_name, endpoints, topic in groups:
        count = max(topic.read_queue_nums, topic.write_queue_nums) if topic else default
        types = accepted_types(topic)
        for queue_id in range(count):
            _queue(
                queues.add(),  # type: ignore[attr-defined]
                topic_name,
                namespace,
                queue_id,
                _permission(topic, queue_id, default),
                broker_name,
                endpoints,
                types,
            )


def fill_assignment(
    assignments: object,
    defaults: TopicDefaults,
    topic_name: str,
    namespace: str,
    groups: list[Group],
    fifo: bool,
) -> None:
    default = defaults.queue_nums
    any_readable = False
    for broker_name, endpoints, topic in groups:
        readable = [
            queue_id
            for queue_id in range(topic.read_queue_nums if topic else default)
            if _permission(topic, queue_id, default) in (Permission.READ, Permission.READ_WRITE)
        ]
        if not readable:
            continue
        any_readable = True
        types = accepted_types(topic)
        for queue_id in readable if fifo else [-1]:
            assignment = assignments.add()  # type: ignore[attr-defined]
            _queue(
                assignment.message_queue,
                topic_name,
                namespace,
                queue_id,
                Permission.READ_WRITE if queue_id == -1 else _permission(topic, queue_id, default),
                broker_name,
                endpoints,
                types,
            )
    if not any_readable:
        raise V2Error(Code.FORBIDDEN, f"topic {topic_name!r} has no readable queue")


def not_found_group(exc: NotFoundError | InvalidArgumentError) -> V2Error:
    if isinstance(exc, NotFoundError):
        return V2Error(Code.CONSUMER_GROUP_NOT_FOUND, str(exc))
    return V2Error(Code.ILLEGAL_CONSUMER_GROUP, str(exc))
