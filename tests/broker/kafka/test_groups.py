"""The group coordinator: KIP-394 member ids, generations, the leader's assignments reaching
every member, rebalances on join / leave / session expiry / rebalance timeout, commit checks,
and (over the wire) the refusal of a group RocketMQ consumers use."""

from __future__ import annotations

import asyncio
import struct

import pytest
from wharf.broker.core.clients import ConsumeFrom, MessageModel
from wharf.broker.frontends.kafka.coordinator import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    Coordinator,
    Member,
    subscribed_topics,
)
from wharf.broker.frontends.kafka.errors import Code, KafkaError

from tests.broker.kafka.kafka_helpers import start_kafka
from tests.inproc import InProcFactory


def member(
    member_id: str = "", session_ms: int = 10_000, rebalance_ms: int = 5_000, protocols=None
) -> Member:
    return Member(
        member_id=member_id,
        client_id="cli",
        client_host="127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type="consumer",
        protocols=protocols or [("range", b"meta-" + member_id.encode()), ("roundrobin", b"")],
    )


async def joined(c: Coordinator, group: str = "g", **kwargs) -> dict:
    """A v4+ join: MEMBER_ID_REQUIRED, then the join with the id."""
    first = await c.join(group, member(**kwargs), True)
    assert first["error_code"] == Code.MEMBER_ID_REQUIRED and first["member_id"].startswith("cli-")
    return await c.join(
        group,
        member(first["member_id"], **{k: v for k, v in kwargs.items() if k != "member_id"}),
        True,
    )


async def test_first_member_forms_generation_one_and_leads() -> None:
    c = Coordinator()
    reply = await joined(c)
    me = reply["member_id"]
    assert (reply["error_code"], reply["generation_id"], reply["leader"]) == (0, 1, me)
    assert reply["protocol_name"] == "range"
    assert [m["member_id"] for m in reply["members"]] == [me]
    assert c.groups["g"].state == COMPLETING
    assert await c.sync("g", 1, me, {me: b"assigned"}) == (Code.NONE, b"assigned")
    assert c.groups["g"].state == STABLE
    assert c.heartbeat("g", 1, me) == Code.NONE
    assert c.heartbeat("g", 0, me) == Code.ILLEGAL_GENERATION
    with pytest.raises(KafkaError) as info:
        c.heartbeat("g", 1, "stranger")
    assert info.value.code == Code.UNKNOWN_MEMBER_ID


async def test_join_before_v4_gets_an_id_at_once() -> None:
    c = Coordinator()
    reply = await c.join("g", member(), False)
    assert reply["error_code"] == 0 and reply["member_id"] and reply["generation_id"] == 1


async def test_second_member_rebalances_and_gets_the_leaders_assignment() -> None:
    c = Coordinator()
    one = await joined(c)
    a = one["member_id"]
    await c.sync("g", 1, a, {a: b"all"})
    # member b joins: the group prepares a rebalance; a learns it from its heartbeat
    first = await c.join("g", member(), True)
    b = first["member_id"]
    join_b = asyncio.create_task(c.join("g", member(b), True))
    await asyncio.sleep(0.01)
    assert c.groups["g"].state == PREPARING
    assert c.heartbeat("g", 1, a) == Code.REBALANCE_IN_PROGRESS
    assert not join_b.done()  # waits for a to rejoin
    rejoin_a = await c.join("g", member(a), True)
    reply_b = await join_b
    assert rejoin_a["generation_id"] == reply_b["generation_id"] == 2
    assert rejoin_a["leader"] == a == reply_b["leader"]  # the leader stays
    assert {m["member_id"] for m in rejoin_a["members"]} == {a, b}
    assert reply_b["members"] == []  # only the leader sees the members
    sync_b = asyncio.create_task(c.sync("g", 2, b, {}))
    await asyncio.sleep(0.01)
    assert not sync_b.done()  # waits for the leader's assignments
    assert await c.sync("g", 2, a, {a: b"p0", b: b"p1"}) == (Code.NONE, b"p0")
    assert await sync_b == (Code.NONE, b"p1")


async def test_leave_rebalances_the_rest() -> None:
    c = Coordinator()
    a = (await joined(c))["member_id"]
    await c.sync("g", 1, a, {a: b"x"})
    b = (await c.join("g", member(), True))["member_id"]
    join_b = asyncio.create_task(c.join("g", member(b), True))
    await c.join("g", member(a), True)
    await join_b
    assert c.leave("g", a) == Code.NONE
    assert c.leave("g", a) == Code.UNKNOWN_MEMBER_ID
    assert c.groups["g"].state == PREPARING
    reply = await c.join("g", member(b), True)
    assert (reply["generation_id"], reply["leader"]) == (3, b)
    assert c.leave("g", b) == Code.NONE
    assert c.groups["g"].state == EMPTY


async def test_a_silent_member_is_expired_after_its_session_timeout() -> None:
    c = Coordinator()
    a = (await joined(c, session_ms=1000))["member_id"]
    await c.sync("g", 1, a, {})
    group = c.groups["g"]
    c.expire(group.members[a].last_seen + 0.5)
    assert a in group.members  # within the session
    c.expire(group.members[a].last_seen + 1.1)
    assert a not in group.members and group.state == EMPTY and group.generation == 2


async def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    c = Coordinator()
    a = (await joined(c, rebalance_ms=300))["member_id"]
    await c.sync("g", 1, a, {})
    b = (await c.join("g", member(rebalance_ms=300), True))["member_id"]
    started = asyncio.get_running_loop().time()
    reply = await c.join("g", member(b, rebalance_ms=300), True)  # a never rejoins
    assert 0.25 < asyncio.get_running_loop().time() - started < 2
    assert (reply["generation_id"], reply["leader"]) == (2, b)
    assert list(c.groups["g"].members) == [b]


async def test_a_group_forming_from_empty_waits_the_initial_delay_for_more_members() -> None:
    # Kafka's group.initial.rebalance.delay.ms: members started together form one generation
    # (not one per arrival), and nothing completes before the delay though all have joined.
    c = Coordinator(initial_delay_ms=200)
    loop = asyncio.get_running_loop()
    started = loop.time()
    join_a = asyncio.create_task(joined(c))
    await asyncio.sleep(0.1)
    assert not join_a.done() and c.groups["g"].state == PREPARING
    join_b = asyncio.create_task(joined(c))  # a newcomer in the window: one more window
    reply_a, reply_b = await join_a, await join_b
    took = loop.time() - started
    assert 0.35 < took < 1.5, took  # two windows of 0.2 s, not one
    assert reply_a["generation_id"] == reply_b["generation_id"] == 1
    assert reply_a["leader"] == reply_a["member_id"]
    assert {m["member_id"] for m in reply_a["members"]} == {
        reply_a["member_id"],
        reply_b["member_id"],
    }


async def test_the_initial_delay_is_bounded_by_the_rebalance_timeout() -> None:
    c = Coordinator(initial_delay_ms=10_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    reply = await joined(c, rebalance_ms=300)
    assert 0.25 < loop.time() - started < 2
    assert reply["error_code"] == 0 and reply["generation_id"] == 1


async def test_the_initial_delay_applies_only_to_a_group_forming_from_empty() -> None:
    c = Coordinator(initial_delay_ms=300)
    a = (await joined(c))["member_id"]
    await c.sync("g", 1, a, {a: b"all"})
    loop = asyncio.get_running_loop()
    started = loop.time()
    b = (await c.join("g", member(), True))["member_id"]
    join_b = asyncio.create_task(c.join("g", member(b), True))
    await asyncio.sleep(0.01)
    rejoin_a = await c.join("g", member(a), True)  # everyone in: completes at once
    assert (await join_b)["generation_id"] == rejoin_a["generation_id"] == 2
    assert loop.time() - started < 0.2
    # the last member leaves: Empty again, and the next group forming waits once more
    c.leave("g", a)
    c.leave("g", b)
    assert c.groups["g"].state == EMPTY
    started = loop.time()
    assert (await joined(c))["generation_id"] == 4
    assert loop.time() - started > 0.25


async def test_a_member_leaving_during_the_initial_delay() -> None:
    c = Coordinator(initial_delay_ms=200)
    first = await c.join("g", member(), True)
    join_a = asyncio.create_task(c.join("g", member(first["member_id"]), True))
    await asyncio.sleep(0.05)
    assert c.leave("g", first["member_id"]) == Code.NONE
    assert (await join_a)["error_code"] == Code.UNKNOWN_MEMBER_ID
    assert c.groups["g"].state == EMPTY and c.groups["g"].timer is None


async def test_protocols_must_be_shared() -> None:
    c = Coordinator()
    await joined(c, protocols=[("range", b"")])
    with pytest.raises(KafkaError) as info:
        await c.join("g", member(protocols=[("sticky", b"")]), True)
    assert info.value.code == Code.INCONSISTENT_GROUP_PROTOCOL


async def test_invalid_session_timeout() -> None:
    with pytest.raises(KafkaError) as info:
        await Coordinator().join("g", member(session_ms=10), True)
    assert info.value.code == Code.INVALID_SESSION_TIMEOUT


async def test_commit_checks() -> None:
    c = Coordinator()
    assert c.check_commit("nobody", -1, "") == Code.NONE  # a simple/admin commit
    assert c.check_commit("nobody", 3, "x") == Code.ILLEGAL_GENERATION
    a = (await joined(c))["member_id"]
    assert c.check_commit("g", 1, a) == Code.REBALANCE_IN_PROGRESS  # awaiting the sync
    await c.sync("g", 1, a, {})
    assert c.check_commit("g", 1, a) == Code.NONE
    assert c.check_commit("g", 0, a) == Code.ILLEGAL_GENERATION
    assert c.check_commit("g", 1, "other") == Code.UNKNOWN_MEMBER_ID
    assert c.check_commit("g", -1, "") == Code.UNKNOWN_MEMBER_ID  # the group is active


def join_body(group: str, metadata: bytes = b"") -> dict:
    """A first JoinGroup of a "consumer" member with one protocol, "range"."""
    return {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": metadata}],
    }


async def test_over_the_wire_commits_and_rocketmq_groups(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    ctx = kafka.controller.ctx
    ctx.topics.create("t", 2, 2, 6, {})
    client = await kafka.client()
    join = join_body("kg")
    first = await client.call(11, 5, join)
    assert first["error_code"] == 79
    reply = await client.call(11, 5, {**join, "member_id": first["member_id"]})
    me, generation = reply["member_id"], reply["generation_id"]
    synced = await client.call(
        14, 3, {"group_id": "kg", "generation_id": generation, "member_id": me,
                "assignments": [{"member_id": me, "assignment": b"A"}]},
    )  # fmt: skip
    assert synced == {"throttle_time_ms": 0, "error_code": 0, "assignment": b"A"}

    def commit(gen: int, member_id: str, offset: int) -> dict:
        return {
            "group_id": "kg",
            "generation_id": gen,
            "member_id": member_id,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 1,
                            "committed_offset": offset,
                            "committed_metadata": "m",
                        }
                    ],
                }
            ],
        }

    def code(response: dict) -> int:
        return response["topics"][0]["partitions"][0]["error_code"]

    assert code(await client.call(8, 7, commit(generation, me, 5))) == 0
    assert code(await client.call(8, 7, commit(generation + 1, me, 6))) == 22
    assert code(await client.call(8, 7, commit(generation, "who", 6))) == 25
    assert ctx.offsets.query("kg", "t", 1) == 5  # the broker's offset table
    fetched = await client.call(9, 5, {"group_id": "kg", "topics": None})
    rows = fetched["topics"][0]["partitions"]
    assert (
        fetched["topics"][0]["name"],
        rows[0]["partition_index"],
        rows[0]["committed_offset"],
    ) == ("t", 1, 5)
    one = await client.call(
        9, 1, {"group_id": "kg", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    )
    assert [p["committed_offset"] for p in one["topics"][0]["partitions"]] == [-1, 5]
    described = await client.call(15, 2, {"groups": ["kg", "unknown"]})
    kg, unknown = described["groups"]
    assert kg["group_state"] == "Stable" and kg["members"][0]["member_assignment"] == b"A"
    assert unknown["group_state"] == "Dead"
    ctx.offsets.commit("offsets-only", "t", 0, 3)
    listed = await client.call(16, 2, {})
    assert {"group_id": "kg", "protocol_type": "consumer"} in listed["groups"]
    assert {"group_id": "offsets-only", "protocol_type": ""} in listed["groups"]
    left = await client.call(
        13, 3, {"group_id": "kg", "members": [{"member_id": me, "group_instance_id": None}]}
    )
    assert left["members"][0]["error_code"] == 0

    # a RocketMQ consumer group: refused, and its offsets untouched
    ctx.clients.heartbeat(
        "rmq-client-1", "rocket", {"t": "*"}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET
    )
    refused = await client.call(11, 5, {**join, "group_id": "rocket"})
    assert refused["error_code"] == 23
    commit_rocket = {**commit(-1, "", 9), "group_id": "rocket"}
    assert code(await client.call(8, 7, commit_rocket)) == 23
    assert ctx.offsets.query("rocket", "t", 1) == -1
    await client.close()
    await kafka.close()


async def test_stop_answers_joins_waiting_on_a_rebalance(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    client = await kafka.client()
    join = {
        "group_id": "waiting",
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 60_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    first = await client.call(11, 5, join)
    joined = await client.call(11, 5, {**join, "member_id": first["member_id"]})
    await client.call(
        14, 3, {"group_id": "waiting", "generation_id": joined["generation_id"],
                "member_id": joined["member_id"], "assignments": []},
    )  # fmt: skip
    other = await kafka.client()
    second = await other.call(11, 5, join)
    other.send(11, 5, {**join, "member_id": second["member_id"]})  # waits for the first member
    await asyncio.sleep(0.1)
    began = asyncio.get_running_loop().time()
    kafka.part.close_listener()
    stopping = asyncio.create_task(kafka.part.stop(5.0))
    _, reply = await other.receive(11, 5)
    assert reply["error_code"] == Code.NOT_COORDINATOR
    await stopping
    assert asyncio.get_running_loop().time() - began < 2  # not the 5 s grace, nor 60 s
    await client.close()
    await other.close()


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data (as kafka-python sends)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def test_subscribed_topics_of_a_member_metadata() -> None:
    assert subscribed_topics(subscription("a", "b")) == {"a", "b"}
    assert subscribed_topics(b"") == set()
    assert subscribed_topics(struct.pack(">hi", 0, 1_000_000)) == set()  # a lying count
    assert subscribed_topics(b"\x00\x00\x00\x00\x00\x01\x00\x09ab") == set()  # short string


async def test_group_progress_counts_kafka_members_and_their_topics(
    inproc_broker: InProcFactory,
) -> None:
    """A Kafka group in `wharf group progress` (AdminCore.consumer_progress): its members
    online and the topics they subscribe to (whose queues it lists), before any commit."""
    kafka = await start_kafka(inproc_broker)
    ctx = kafka.controller.ctx
    ctx.topics.create("t", 2, 2, 6, {})
    client = await kafka.client()
    join = join_body("kv", subscription("t"))
    reply = await client.call(11, 1, join)  # v1: an id at once, no KIP-394 round
    assert reply["error_code"] == 0
    progress = ctx.admin.consumer_progress("kv")
    assert progress.online_clients == 1
    assert ctx.clients.subscribed_topics("kv") == {"t"}  # the queues progress lists
    left = await client.call(
        13, 3, {"group_id": "kv", "members": [{"member_id": reply["member_id"],
                                               "group_instance_id": None}]},
    )  # fmt: skip
    assert left["members"][0]["error_code"] == 0
    assert ctx.clients.online_count("kv") == 0
    await client.close()
    await kafka.close()
    assert ctx.clients.views == []  # the stopped front end lends no view
