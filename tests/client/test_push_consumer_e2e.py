"""Push consumer against the real daemon: rebalance, broadcasting, retry/DLQ, offsets."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from wharf.client import Admin, ConsumeResult, Producer, PullConsumer, PushConsumer, ReceivedMessage
from wharf.client.message import MessageQueue, dlq_topic

from tests.harness import BrokerProcess

FAST: dict[str, Any] = dict(
    rebalance_interval_s=0.5,
    heartbeat_interval_s=0.2,
    commit_interval_s=0.2,
    long_poll_ms=500,
)


class Recorder:
    """A handler that records what it consumed (per consumer)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.seen: list[ReceivedMessage] = []
        self.delay_s = delay_s

    async def __call__(self, msg: ReceivedMessage) -> ConsumeResult:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.seen.append(msg)
        return ConsumeResult.SUCCESS

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.seen]


async def eventually(check: Callable[[], bool], within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def make_topic(endpoint: str, topic: str, queues: int = 6) -> None:
    async with Admin(endpoint) as admin:
        await admin.create_topic(topic, queue_nums=queues)


async def test_group_members_split_queues_and_a_joiner_loses_nothing(
    broker: BrokerProcess, name: str
) -> None:
    await make_topic(broker.endpoint, name, queues=6)
    handlers = [Recorder(delay_s=0.001) for _ in range(3)]
    # A handover delay of 5 heartbeats keeps the duplicate bound meaningful on a loaded CI box.
    consumers = [
        PushConsumer(
            broker.endpoint,
            name,
            handler=h,
            consume_from_where="FIRST",
            handover_delay_s=1.0,
            **FAST,
        )
        for h in handlers
    ]
    for c in consumers:
        c.subscribe(name)
    sent: list[str] = []

    def topic_shares(members: list[PushConsumer]) -> list[int]:
        return sorted(len([q for q in c.assigned_queues if q.topic == name]) for c in members)

    async with Producer(broker.endpoint) as producer:

        async def send_some(n: int) -> None:
            results = await asyncio.gather(
                *(producer.send(name, f"m{len(sent) + i}") for i in range(n))
            )
            sent.extend(r.msg_id for r in results)

        await consumers[0].start()
        await consumers[1].start()
        await eventually(lambda: topic_shares(consumers[:2]) == [3, 3])
        await send_some(300)
        await consumers[2].start()  # joins while messages flow
        for _ in range(5):
            await send_some(60)
            await asyncio.sleep(0.1)
        await eventually(lambda: topic_shares(consumers) == [2, 2, 2])
        await send_some(200)
        seen = lambda: {m.msg_id for h in handlers for m in h.seen}  # noqa: E731
        await eventually(lambda: set(sent) <= seen())
    for c in consumers:
        await c.close()
    total = sum(len(h.seen) for h in handlers)
    duplicates = total - len(set(sent))
    assert set(sent) <= seen()  # at least once: nothing lost
    # Redeliveries are bounded by what the rebalance window can hold: the handover delay
    # lets the previous owner commit before the new owner reads the offset, so at most
    # the messages still in flight at the handover (here: one send burst) come twice.
    assert duplicates <= 60, [len(h.seen) for h in handlers]
    assert all(h.seen for h in handlers)  # the joiner took over queues and consumed


async def test_broadcasting_delivers_everything_to_every_member(
    broker: BrokerProcess, name: str, tmp_path
) -> None:
    await make_topic(broker.endpoint, name, queues=3)
    handlers = [Recorder(), Recorder()]
    consumers = [
        PushConsumer(
            broker.endpoint,
            name,
            handler=h,
            message_model="BROADCASTING",
            offset_store_path=tmp_path / f"offsets-{i}.json",
            **FAST,
        )
        for i, h in enumerate(handlers)
    ]
    for c in consumers:
        c.subscribe(name)
        await c.start()
    assert all(len(c.assigned_queues) == 3 for c in consumers)
    async with Producer(broker.endpoint) as producer:
        await asyncio.gather(*(producer.send(name, f"b{i}") for i in range(50)))
    expected = sorted(f"b{i}".encode() for i in range(50))
    await eventually(lambda: all(sorted(h.bodies()) == expected for h in handlers))
    for c in consumers:
        await c.close()
    assert (tmp_path / "offsets-0.json").exists()  # local offsets persisted on close


async def test_failing_handler_goes_to_retry_then_dlq(broker: BrokerProcess, name: str) -> None:
    attempts: collections.Counter[str] = collections.Counter()

    async def always_fails(msg: ReceivedMessage) -> ConsumeResult:
        attempts[msg.msg_id] += 1
        assert msg.topic == name  # redeliveries show the original topic
        if msg.body == b"boom":
            raise RuntimeError("handler crashed")
        return ConsumeResult.RECONSUME_LATER

    consumer = PushConsumer(
        broker.endpoint, name, handler=always_fails, consume_from_where="FIRST",
        max_reconsume_times=2, **FAST,
    )  # fmt: skip
    consumer.subscribe(name)
    async with consumer:
        async with Producer(broker.endpoint) as producer:
            r1 = await producer.send(name, b"later")
            r2 = await producer.send(name, b"boom")
        await eventually(lambda: attempts[r1.msg_id] >= 3 and attempts[r2.msg_id] >= 3)
        async with PullConsumer(broker.endpoint, "dlq-reader") as reader:

            async def dlq_ids() -> set[str]:
                result = await reader.pull(MessageQueue(dlq_topic(name), 0), 0, max_messages=10)
                return {m.msg_id for m in result.messages}

            deadline = time.monotonic() + 15
            while await dlq_ids() != {r1.msg_id, r2.msg_id}:
                assert time.monotonic() < deadline, "messages never reached the DLQ"
                await asyncio.sleep(0.1)
    # first delivery + 2 retries, then the DLQ (no further deliveries)
    assert attempts[r1.msg_id] == 3 and attempts[r2.msg_id] == 3


async def test_tag_subscription_filters(broker: BrokerProcess, name: str) -> None:
    handler = Recorder()
    consumer = PushConsumer(
        broker.endpoint, name, handler=handler, consume_from_where="FIRST", **FAST
    )
    consumer.subscribe(name, "a || c")
    async with Producer(broker.endpoint) as producer:
        for tag in "abcab":
            await producer.send(name, tag, tags=tag, queue_id=0)
    async with consumer:
        await eventually(lambda: len(handler.seen) >= 3)
        await asyncio.sleep(0.3)
    assert sorted(handler.bodies()) == [b"a", b"a", b"c"]


async def test_offsets_resume_after_consumer_and_broker_restart(
    fresh_broker: BrokerProcess, name: str
) -> None:
    broker = fresh_broker
    await make_topic(broker.endpoint, name, queues=2)

    async def consume_round(expected: set[bytes]) -> list[bytes]:
        handler = Recorder()
        consumer = PushConsumer(
            broker.endpoint, name, handler=handler, consume_from_where="FIRST", **FAST
        )
        consumer.subscribe(name)
        async with consumer:
            await eventually(lambda: expected <= set(handler.bodies()))
            await asyncio.sleep(0.3)  # nothing else should arrive
        return handler.bodies()

    async def send(prefix: str) -> set[bytes]:
        async with Producer(broker.endpoint) as producer:
            await asyncio.gather(*(producer.send(name, f"{prefix}{i}") for i in range(20)))
        return {f"{prefix}{i}".encode() for i in range(20)}

    first = await send("a")
    assert sorted(await consume_round(first)) == sorted(first)
    second = await send("b")
    assert sorted(await consume_round(second)) == sorted(second)  # consumer restart: resumes
    broker.restart()
    third = await send("c")
    assert sorted(await consume_round(third)) == sorted(third)  # broker restart: offsets kept


async def test_new_group_from_last_skips_history(broker: BrokerProcess, name: str) -> None:
    await make_topic(broker.endpoint, name, queues=2)
    async with Producer(broker.endpoint) as producer:
        await producer.send(name, b"old")
        handler = Recorder()
        consumer = PushConsumer(
            broker.endpoint, name, handler=handler, consume_from_where="LAST", **FAST
        )
        consumer.subscribe(name)
        async with consumer:
            await eventually(lambda: len(consumer.assigned_queues) >= 2)
            for worker in list(consumer._workers.values()):
                await asyncio.wait_for(worker.started.wait(), 10)
            await producer.send(name, b"new")
            await eventually(lambda: handler.bodies() == [b"new"])


async def test_flow_control_caps_unprocessed_messages_per_queue(
    broker: BrokerProcess, name: str
) -> None:
    await make_topic(broker.endpoint, name, queues=1)
    release = asyncio.Event()
    running = 0
    peak = 0
    done = 0

    async def slow(msg: ReceivedMessage) -> ConsumeResult:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        done += 1
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        broker.endpoint, name, handler=slow, consume_from_where="FIRST",
        max_in_flight_per_queue=5, consume_concurrency=50, **FAST,
    )  # fmt: skip
    consumer.subscribe(name)
    async with Producer(broker.endpoint) as producer:
        await producer.send_batch(name, [f"f{i}" for i in range(30)], queue_id=0)
    async with consumer:
        await eventually(lambda: running == 5)
        await asyncio.sleep(0.5)  # more pulls would have happened by now without the cap
        assert peak == 5
        release.set()
        await eventually(lambda: done == 30)
    assert peak == 5


async def test_close_commits_what_was_processed(broker: BrokerProcess, name: str) -> None:
    await make_topic(broker.endpoint, name, queues=1)
    handler = Recorder()
    consumer = PushConsumer(
        broker.endpoint, name, handler=handler, consume_from_where="FIRST",
        **{**FAST, "commit_interval_s": 60.0},  # only close() commits here
    )  # fmt: skip
    consumer.subscribe(name)
    async with Producer(broker.endpoint) as producer:
        await producer.send_batch(name, [f"c{i}" for i in range(7)], queue_id=0)
    async with consumer:
        await eventually(lambda: len(handler.seen) == 7)
    async with PullConsumer(broker.endpoint, name) as reader:
        assert await reader.committed(MessageQueue(name, 0)) == 7


async def test_consume_from_timestamp_skips_older_messages(
    broker: BrokerProcess, name: str
) -> None:
    await make_topic(broker.endpoint, name, queues=1)
    async with Producer(broker.endpoint) as producer:
        await producer.send(name, b"before", queue_id=0)
        await asyncio.sleep(0.05)
        cut = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        await producer.send(name, b"after", queue_id=0)
    handler = Recorder()
    consumer = PushConsumer(
        broker.endpoint, name, handler=handler, consume_from_where="TIMESTAMP",
        consume_timestamp_ms=cut, **FAST,
    )  # fmt: skip
    consumer.subscribe(name)
    async with consumer:
        await eventually(lambda: handler.bodies() == [b"after"])
        await asyncio.sleep(0.3)
    assert handler.bodies() == [b"after"]


async def test_orderly_consumer_keeps_queue_order_through_failures(
    broker: BrokerProcess, name: str
) -> None:
    await make_topic(broker.endpoint, name, queues=2)
    consumed: dict[int, list[int]] = collections.defaultdict(list)
    failed_once: set[int] = set()
    running = 0
    overlap = False

    async def handler(msg: ReceivedMessage) -> ConsumeResult:
        nonlocal running, overlap
        running += 1
        overlap = overlap or running > 2  # at most one per queue, two queues
        try:
            seq = int(msg.body)
            await asyncio.sleep(0.002 * (seq % 3))  # uneven handler times
            if seq % 10 == 3 and seq not in failed_once:
                failed_once.add(seq)
                return ConsumeResult.RECONSUME_LATER  # retried in place, queue waits
            consumed[msg.queue_id].append(seq)
            return ConsumeResult.SUCCESS
        finally:
            running -= 1

    consumer = PushConsumer(
        broker.endpoint, name, handler=handler, consume_from_where="FIRST", orderly=True,
        orderly_retry_pause_s=0.05, **FAST,
    )  # fmt: skip
    consumer.subscribe(name)
    async with Producer(broker.endpoint) as producer:
        for i in range(40):
            await producer.send(name, str(i), queue_id=i % 2)
    async with consumer:
        await eventually(lambda: sum(len(v) for v in consumed.values()) == 40)
    assert consumed[0] == list(range(0, 40, 2)) and consumed[1] == list(range(1, 40, 2))
    assert failed_once == {3, 13, 23, 33} and not overlap


async def test_a_streamed_pull_reply_starts_the_handler_before_the_pull_loop_resumes(
    broker: BrokerProcess, name: str, monkeypatch: Any
) -> None:
    # The stream's read loop hands the reply to the queue (decode, process queue, handler
    # task) as it arrives: the handler runs before the queue's pull loop resumes from that
    # pull (one loop turn less from the reply to the handler), in order, with the offset
    # still committed after the handler.
    from wharf.client.consumer.pull_stream import Puller
    from wharf.v1 import messaging_pb2

    events: list[str] = []
    real_call = Puller.__call__

    async def recording(self: Puller, request: Any, **kwargs: Any) -> Any:
        reply = await real_call(self, request, **kwargs)
        if request.topic == name and reply.status == messaging_pb2.FOUND:
            events.append("pull returned")
        return reply

    monkeypatch.setattr(Puller, "__call__", recording)
    await make_topic(broker.endpoint, name, queues=1)

    async def handler(msg: ReceivedMessage) -> ConsumeResult:
        events.append(f"handler {msg.body.decode()}")
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        broker.endpoint, name, handler=handler, consume_from_where="FIRST", **FAST
    )
    consumer.subscribe(name)
    async with consumer, Producer(broker.endpoint) as producer:
        for i in range(3):
            await producer.send(name, b"m%d" % i, queue_id=0)
            await eventually(lambda i=i: f"handler m{i}" in events)
            await eventually(lambda: "pull returned" in events[-1:])
    # Each lone message: its handler first, then the pull loop resumes.
    assert [e for e in events if e.startswith("handler")] == [
        "handler m0",
        "handler m1",
        "handler m2",
    ]
    for i in range(3):
        at = events.index(f"handler m{i}")
        assert events[at + 1] == "pull returned", events
