"""The one client registry (broker/core/clients.py): group members (wharf.v1, remoting) and
sessions with channels (apache.rocketmq.v2) under one expiry."""

from __future__ import annotations

from wharf.broker.core.clients import ClientKind, ClientRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_members_producers_and_sessions_expire_together() -> None:
    clock = Clock()
    reg = ClientRegistry(expire_after_s=120, clock=clock)
    reg.heartbeat("v1-consumer", "g", {"t": "*"}, 1, 1)
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
