"""The one client registry (broker/core/clients.py): group members (wharf.v1, remoting) and
sessions with channels (apache.rocketmq.v2) under one expiry."""

from __future__ import annotations

import pytest
from wharf.broker.core.clients import ClientKind, ClientRegistry, ConsumeFrom, MessageModel
from wharf.broker.errors import PermissionDeniedError
from wharf.broker.kit.acl.caller import Caller


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_members_producers_and_sessions_expire_together() -> None:
    clock = Clock()
    reg = ClientRegistry(expire_after_s=120, clock=clock)
    reg.heartbeat("v1-consumer", "g", {"t": "*"}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET)
    reg.producer_heartbeat("v1-producer", "pg")
    reg.touch("v2-consumer", ClientKind.CONSUMER, "g2", ("t",))
    clock.now += 60
    reg.touch("v2-producer", ClientKind.PRODUCER, "", ("t",))
    clock.now += 61  # the first three silent for 121 s, v2-producer for 61 s
    dropped = reg.expire()
    assert sorted(dropped) == [("g", "v1-consumer"), ("g2", "v2-consumer")]
    assert reg.members("g")[0] == [] and reg.groups_of("v1-producer") == ([], [])
    assert reg.get("v2-consumer") is None and reg.get("v2-producer") is not None


def test_a_session_is_not_a_group_member() -> None:
    """v2 clients never join the rebalance membership wharf.v1 and remoting consumers read."""
    reg = ClientRegistry()
    reg.touch("v2", ClientKind.CONSUMER, "g", ("t",))
    assert reg.members("g")[0] == [] and reg.online_count("g") == 0


def test_check_back_producers_are_open_channel_producers_of_the_topic_newest_first() -> None:
    clock = Clock()
    reg = ClientRegistry(clock=clock)
    sent: list[str] = []
    for name in ("old", "new", "consumer", "other-topic"):
        clock.now += 1
        kind = ClientKind.CONSUMER if name == "consumer" else ClientKind.PRODUCER
        reg.touch(name, kind, "", ("x",) if name == "other-topic" else ("t",))
        reg.channel_opened(name, lambda command, name=name: sent.append(name) or True)
    reg.touch("no-channel", ClientKind.PRODUCER, "", ("t",))
    assert [s.client_id for s in reg.producers_on("t")] == ["new", "old"]
    reg.channel_closed("new")
    assert [s.client_id for s in reg.producers_on("t")] == ["old"]


def test_a_remoting_connection_is_the_clients_way_back_until_it_closes_or_moves() -> None:
    """``attach`` keeps the connection a client last heartbeat on; a close of an older
    connection does not end the session, a close of the current one does; the session, and
    its connection, expire like any other."""
    clock = Clock()
    reg = ClientRegistry(expire_after_s=120, clock=clock)
    old, new = object(), object()
    reg.attach("c1", old)
    assert reg.connection_of("c1") is old and reg.connection_of("c2") is None
    reg.attach("c1", new)  # reconnected
    assert not reg.detach("c1", old) and reg.connection_of("c1") is new
    assert reg.detach("c1", new) and reg.connection_of("c1") is None
    reg.attach("c2", old)
    clock.now += 121
    reg.expire()
    assert reg.connection_of("c2") is None


def test_a_client_belongs_to_the_account_that_registered_it() -> None:
    registry = ClientRegistry()
    alice, bob, root = Caller("alice", False), Caller("bob", False), Caller("root", True)
    registry.heartbeat(
        "c1", "g", {}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET, caller=alice
    )
    with pytest.raises(PermissionDeniedError, match="'bob' may not act for client 'c1'"):
        registry.unregister("c1", ["g"], [], bob)
    with pytest.raises(PermissionDeniedError):  # nor take its id over
        registry.heartbeat(
            "c1", "g", {}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET, caller=bob
        )
    assert registry.members("g")[0] == ["c1"]
    registry.unregister("c1", ["g"], [], root)  # an admin may
    assert registry.members("g")[0] == []
    registry.touch("s1", ClientKind.CONSUMER, "g", caller=alice)
    with pytest.raises(PermissionDeniedError):
        registry.terminate("s1", bob)
    assert registry.terminate("s1", alice)
    registry.channel_opened("s2")  # a channel opens before its settings name the account
    registry.touch("s2", ClientKind.CONSUMER, "g", caller=bob)
    with pytest.raises(PermissionDeniedError):
        registry.terminate("s2", alice)
    # Without ACL nobody is recorded and everyone may (ANYONE is the default caller).
    registry.heartbeat("c2", "g", {}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET)
    registry.unregister("c2", ["g"], [])
    assert registry.members("g")[0] == []
