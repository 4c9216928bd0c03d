"""THE table: every RPC of every authenticated service -> what it needs, in one place.

Key: ``"<service full name>/<method>"``. Value: a function of the (parsed) request returning
the ``Need``s of that request: ``(kind, name, perm)`` with kind ``topic`` / ``group`` (name =
the resource, perm = PUB, SUB or ANY = either is enough) or ``admin``. An empty list = the
caller only has to be authenticated (a producer's heartbeat, a client's other telemetry).

tests/broker/test_acl.py iterates the service descriptors (wharf.v1 MessagingService and
AdminService, apache.rocketmq.v2 MessagingService) and fails on any method without an entry,
so a new RPC cannot be served unchecked. gRPC health and reflection are not in the table:
they are never authenticated. The RocketMQ 4 remoting port's request codes map to the same
``Need``s in ``wharf.broker.kit.remoting.acl.ACCESS`` (a front end's request parsing; this package
imports no front end), with tests/broker/remoting/test_acl.py checking every served code.

Choices: reading offsets or routes of a topic needs SUB (ANY for QueryRoute: producers and
consumers both ask); committing or reading a group's offsets needs SUB on the group AND the
topic; EndTransaction(s) and RecallMessage need PUB (they decide what gets delivered); wharf.v1
ViewMessage by offset id (no topic in the request) needs admin, with a topic it needs SUB on
it; every AdminService RPC needs admin (ListTopics and stats included: they name every
topic and group). Consumer groups are resources as topics are (RocketMQ 4's HEART_BEAT and
UNREGISTER_CLIENT, RocketMQ 5's Telemetry settings): joining a group (a heartbeat or settings
naming it, which also creates it when autoCreateSubscriptionGroup is on), leaving it and its
subscriptions need SUB on the group and on each subscribed topic, so an account that may only
publish cannot take a group's queues, create groups or remove another group's clients.
Producer groups are not resources (as in RocketMQ): a producer's heartbeat needs none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from wharf.broker.kit.acl.rules import Perm

V1_MESSAGING = "wharf.v1.MessagingService"
V1_ADMIN = "wharf.v1.AdminService"
V2_MESSAGING = "apache.rocketmq.v2.MessagingService"


class Need(NamedTuple):
    kind: str  # "topic", "group" or "admin"
    name: str
    perm: Perm


ADMIN = Need("admin", "", Perm.ANY)
Needs = Callable[[Any], list[Need]]


def _admin(request: Any) -> list[Need]:
    return [ADMIN]


def _topic(perm: Perm, field: str = "topic") -> Needs:
    return lambda r: [Need("topic", getattr(r, field), perm)]


def _topic_group(topic_field: str, group_field: str) -> Needs:
    return lambda r: [
        Need("topic", getattr(r, topic_field), Perm.SUB),
        Need("group", getattr(r, group_field), Perm.SUB),
    ]


def _group(field: str) -> Needs:
    return lambda r: [Need("group", getattr(r, field), Perm.SUB)]


def _pull_stream(r: Any) -> list[Need]:
    """SUB on the topic and the group of each pull (of each of a ``batch``); a cancel: none."""
    if r.batch:
        return [need for item in r.batch for need in _pull_stream(item)]
    if r.cancel:
        return []
    return [Need("topic", r.topic, Perm.SUB), Need("group", r.consumer_group, Perm.SUB)]


def _heartbeat(r: Any) -> list[Need]:
    """SUB on each consumer group the client joins and on each topic it subscribes."""
    needs = []
    for consumer in r.consumers:
        needs.append(Need("group", consumer.group, Perm.SUB))
        needs.extend(Need("topic", s.topic, Perm.SUB) for s in consumer.subscriptions)
    return needs


def _unregister(r: Any) -> list[Need]:
    """SUB on each consumer group the client leaves."""
    return [Need("group", group, Perm.SUB) for group in r.consumer_groups]


def _send(r: Any) -> list[Need]:
    """PUB on the topic of the request, or of each of its ``parts`` or ``batch_topics``."""
    if r.batch_topics:
        return [Need("topic", t, Perm.PUB) for t in set(r.batch_topics)]
    if r.parts:
        return [Need("topic", t, Perm.PUB) for t in {part.topic for part in r.parts}]
    return [Need("topic", r.topic, Perm.PUB)]


def _end_transactions(r: Any) -> list[Need]:
    """PUB on every topic the batch END may touch (the broker holds it to ``topics``); no
    topics named: any writer's halves, so admin."""
    return [Need("topic", t, Perm.PUB) for t in r.topics] or [ADMIN]


def _view_message(r: Any) -> list[Need]:
    return [Need("topic", r.topic, Perm.SUB)] if r.topic else [ADMIN]


# v2 requests name resources as Resource{name} or MessageQueue{topic{name}}.
def _v2_topic(perm: Perm) -> Needs:
    return lambda r: [Need("topic", r.topic.name, perm)]


def _v2_topic_group(r: Any) -> list[Need]:
    return [Need("topic", r.topic.name, Perm.SUB), Need("group", r.group.name, Perm.SUB)]


def _v2_queue_group(r: Any) -> list[Need]:
    return [
        Need("topic", r.message_queue.topic.name, Perm.SUB),
        Need("group", r.group.name, Perm.SUB),
    ]


def _v2_group(r: Any) -> list[Need]:
    """SUB on the request's group when it names one (a consumer's; a producer's has none)."""
    return [Need("group", r.group.name, Perm.SUB)] if r.HasField("group") else []


def _v2_telemetry(r: Any) -> list[Need]:
    """A settings frame: a consumer's needs SUB on its group and each subscribed topic, a
    producer's PUB on each topic it publishes to; other frames: none."""
    if not r.HasField("settings"):
        return []
    settings = r.settings
    if settings.HasField("subscription"):
        sub = settings.subscription
        needs = [Need("topic", e.topic.name, Perm.SUB) for e in sub.subscriptions]
        return [Need("group", sub.group.name, Perm.SUB), *needs]
    if settings.HasField("publishing"):
        return [Need("topic", t.name, Perm.PUB) for t in settings.publishing.topics]
    return []


def _v2_send(r: Any) -> list[Need]:
    return [Need("topic", name, Perm.PUB) for name in {m.topic.name for m in r.messages}]


ACCESS: dict[str, Needs] = {
    # --- wharf.v1 MessagingService ---
    f"{V1_MESSAGING}/SendMessage": _send,
    f"{V1_MESSAGING}/SendMessageStream": _send,  # checked per request
    f"{V1_MESSAGING}/PullMessage": _topic_group("topic", "consumer_group"),
    # checked per request, as SendMessageStream (a cancel request names no topic: allowed)
    f"{V1_MESSAGING}/PullMessageStream": _pull_stream,
    f"{V1_MESSAGING}/QueryMessage": _topic(Perm.SUB),
    f"{V1_MESSAGING}/ViewMessage": _view_message,
    f"{V1_MESSAGING}/SearchOffset": _topic(Perm.SUB),
    f"{V1_MESSAGING}/GetQueueOffsets": _topic(Perm.SUB),
    f"{V1_MESSAGING}/QueryRoute": _topic(Perm.ANY),
    f"{V1_MESSAGING}/Heartbeat": _heartbeat,
    f"{V1_MESSAGING}/UnregisterClient": _unregister,
    f"{V1_MESSAGING}/GetConsumerList": _group("consumer_group"),
    f"{V1_MESSAGING}/UpdateConsumerOffset": _topic_group("topic", "consumer_group"),
    f"{V1_MESSAGING}/QueryConsumerOffset": _topic_group("topic", "consumer_group"),
    f"{V1_MESSAGING}/SendMessageBack": _group("consumer_group"),
    f"{V1_MESSAGING}/EndTransaction": _topic(Perm.PUB),
    f"{V1_MESSAGING}/EndTransactions": _end_transactions,
    f"{V1_MESSAGING}/TransactionChecks": lambda r: [Need("topic", t, Perm.PUB) for t in r.topics],
    f"{V1_MESSAGING}/RecallMessage": _topic(Perm.PUB),
    # --- wharf.v1 AdminService: all admin ---
    **{
        f"{V1_ADMIN}/{m}": _admin
        for m in (
            "CreateTopic",
            "UpdateTopic",
            "DeleteTopic",
            "ListTopics",
            "GetTopicStats",
            "CreateSubscriptionGroup",
            "ListSubscriptionGroups",
            "DeleteSubscriptionGroup",
            "GetConsumerProgress",
            "ResetConsumerOffset",
            "GetBrokerStatus",
            "TransferMaster",
            "ListHalfMessages",
            "ResolveHalfMessage",
        )
    },
    # --- apache.rocketmq.v2 MessagingService ---
    f"{V2_MESSAGING}/QueryRoute": _v2_topic(Perm.ANY),
    f"{V2_MESSAGING}/Heartbeat": _v2_group,
    f"{V2_MESSAGING}/SendMessage": _v2_send,
    f"{V2_MESSAGING}/QueryAssignment": _v2_topic_group,
    f"{V2_MESSAGING}/ReceiveMessage": _v2_queue_group,
    f"{V2_MESSAGING}/AckMessage": _v2_topic_group,
    f"{V2_MESSAGING}/ForwardMessageToDeadLetterQueue": _v2_topic_group,
    f"{V2_MESSAGING}/PullMessage": _v2_queue_group,
    f"{V2_MESSAGING}/UpdateOffset": _v2_queue_group,
    f"{V2_MESSAGING}/GetOffset": _v2_queue_group,
    f"{V2_MESSAGING}/QueryOffset": lambda r: [Need("topic", r.message_queue.topic.name, Perm.SUB)],
    f"{V2_MESSAGING}/EndTransaction": _v2_topic(Perm.PUB),
    f"{V2_MESSAGING}/Telemetry": _v2_telemetry,  # checked per frame (a client stream)
    f"{V2_MESSAGING}/NotifyClientTermination": _v2_group,
    f"{V2_MESSAGING}/ChangeInvisibleDuration": _v2_topic_group,
    f"{V2_MESSAGING}/RecallMessage": _v2_topic(Perm.PUB),
    f"{V2_MESSAGING}/SyncLiteSubscription": _v2_topic_group,
}
