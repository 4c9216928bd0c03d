"""apache.rocketmq.v2 clients in the broker's one client registry (``broker/core/clients.py``):
a client's Telemetry settings and Heartbeats mapped onto its session (kind, group, topics).

A client is registered by its first Telemetry settings frame or Heartbeat; its Telemetry
stream is its channel (the check-back commands go out on it). It is dropped when its last
Telemetry stream ends, on NotifyClientTermination, or by the registry's expiry
(channelExpiredTimeout without a heartbeat or settings frame).
"""

from __future__ import annotations

from wharf.broker.core.clients import ClientKind, ClientRegistry, Session
from wharf.broker.kit.acl.caller import caller
from wharf.rocketmq.v2 import definition_pb2


def kind_of(client_type: int) -> ClientKind:
    """A v2 ClientType as the registry's kind: unset is UNKNOWN (Heartbeat refuses it), every
    type but PRODUCER a consumer of some form (push, simple, pull)."""
    if client_type == definition_pb2.CLIENT_TYPE_UNSPECIFIED:
        return ClientKind.UNKNOWN
    if client_type == definition_pb2.PRODUCER:
        return ClientKind.PRODUCER
    return ClientKind.CONSUMER


def on_settings(
    clients: ClientRegistry, client_id: str, settings: definition_pb2.Settings
) -> Session:
    group, topics = "", None
    if settings.HasField("subscription"):
        group = settings.subscription.group.name
        topics = tuple(s.topic.name for s in settings.subscription.subscriptions)
    elif settings.HasField("publishing"):
        topics = tuple(t.name for t in settings.publishing.topics)
    return clients.touch(client_id, kind_of(settings.client_type), group, topics, caller())


def on_heartbeat(clients: ClientRegistry, client_id: str, client_type: int, group: str) -> Session:
    return clients.touch(client_id, kind_of(client_type), group, caller=caller())
