"""The producer's auto-batcher and the consumer's process queue."""

from __future__ import annotations

import asyncio

from wharf.client.batcher import AutoBatcher
from wharf.client.consumer.process_queue import ProcessQueue
from wharf.client.errors import (
    DeadlineExceededError,
    UnavailableError,
)
from wharf.client.message import ReceivedMessage
from wharf.v1 import common_pb2


# ---------------------------------------------------------------- batcher
async def test_batcher_groups_concurrent_sends_per_key_and_keeps_order() -> None:
    calls: list[tuple[object, list[int]]] = []

    async def send(key: object, items: list[int]) -> list[int]:
        calls.append((key, list(items)))
        await asyncio.sleep(0)
        return [i * 10 for i in items]

    batcher = AutoBatcher(send, max_messages=100)
    futures = [batcher.submit("a" if i % 2 else "b", i, 1) for i in range(50)]
    results = await asyncio.gather(*futures)
    assert results == [i * 10 for i in range(50)]
    assert sorted(str(k) for k, _ in calls) == ["a", "b"]  # one request per key
    assert all(items == sorted(items) for _, items in calls)


async def test_batcher_closes_batches_at_size_limit_and_caps_in_flight() -> None:
    active = 0
    peak = 0
    sizes: list[int] = []

    async def send(key: object, items: list[int]) -> list[int]:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        sizes.append(len(items))
        await asyncio.sleep(0.01)
        active -= 1
        return items

    batcher = AutoBatcher(send, max_messages=10, max_in_flight=2)
    results = await asyncio.gather(*(batcher.submit("k", i, 1) for i in range(95)))
    assert results == list(range(95))
    assert max(sizes) <= 10 and sum(sizes) == 95
    assert peak <= 2


async def test_batcher_linger_waits_for_more_messages() -> None:
    sizes: list[int] = []

    async def send(key: object, items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items

    batcher = AutoBatcher(send, linger_s=0.05)
    first = batcher.submit("k", 1, 1)
    await asyncio.sleep(0.01)
    second = batcher.submit("k", 2, 1)
    assert await asyncio.gather(first, second) == [1, 2]
    assert sizes == [2]


async def test_batcher_fails_every_future_of_a_failed_batch() -> None:
    async def send(key: object, items: list[int]) -> list[int]:
        raise UnavailableError("broker gone")

    batcher = AutoBatcher(send)
    futures = [batcher.submit("k", i, 1) for i in range(5)]
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(o, UnavailableError) for o in outcomes)
    await asyncio.wait_for(batcher.drain(), 1)
    assert batcher.buffered == 0


async def test_batcher_rejects_mismatched_result_count() -> None:
    async def send(key: object, items: list[int]) -> list[int]:
        return items[:-1]

    batcher = AutoBatcher(send)
    futures = [batcher.submit("k", i, 1) for i in range(3)]
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in outcomes)


# ---------------------------------------------------------------- process queue
def _msg(offset: int) -> ReceivedMessage:
    return ReceivedMessage.from_view(common_pb2.MessageView(topic="t", queue_offset=offset))


async def test_committable_offset_never_skips_an_unfinished_message() -> None:
    pq = ProcessQueue(0)
    pq.add([_msg(i) for i in range(5)], next_offset=5)
    assert pq.committable_offset() == 0
    pq.done(1, 100)
    pq.done(2, 100)
    assert pq.committable_offset() == 0
    pq.done(0, 100)
    assert pq.committable_offset() == 3
    pq.done(3, 100)
    pq.done(4, 100)
    assert pq.committable_offset() == 5


async def test_process_queue_flow_control_blocks_until_space() -> None:
    pq = ProcessQueue(0)
    pq.add([_msg(i) for i in range(3)], next_offset=3)
    waiter = asyncio.ensure_future(pq.wait_for_space(3))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    pq.done(0, 3)
    await asyncio.wait_for(waiter, 1)


async def test_batcher_fails_a_batch_past_its_deadline_with_one_timer() -> None:
    async def never_answers(key: object, items: list[int]) -> list[int]:
        await asyncio.sleep(10)
        return items

    batcher = AutoBatcher(never_answers)
    deadline = asyncio.get_running_loop().time() + 0.05
    futures = [batcher.submit("k", i, 1, deadline) for i in range(3)]
    outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 2)
    assert all(isinstance(o, DeadlineExceededError) for o in outcomes)
    assert batcher.buffered == 0


async def test_batcher_grows_batches_while_all_slots_are_busy() -> None:
    sizes: list[int] = []

    async def slow_send(key: object, items: list[int]) -> list[int]:
        sizes.append(len(items))
        await asyncio.sleep(0.02)
        return items

    batcher = AutoBatcher(slow_send, max_in_flight=1)
    futures = []
    for i in range(100):  # a paced sender: one message per loop turn, over ~2 replies' time
        futures.append(batcher.submit("k", i, 1))
        await asyncio.sleep(0.0005)
    assert await asyncio.gather(*futures) == list(range(100))
    # Without growth this would be ~100 one-message requests queued behind the slot.
    assert len(sizes) < 20 and max(sizes) > 10


async def test_a_lone_send_reaches_the_send_function_one_loop_turn_after_submit() -> None:
    """Fast path (linger 0, a free slot, nothing waiting): the request task is created at
    submit and closes the batch when it runs; the sends of the same turn still join it."""
    calls: list[list[int]] = []

    async def send(key: object, items: list[int]) -> list[int]:
        calls.append(list(items))
        return items

    batcher = AutoBatcher(send, max_in_flight=2)
    first = batcher.submit("k", 1, 1)
    second = batcher.submit("k", 2, 1)  # same turn: same batch
    await asyncio.sleep(0)  # one loop turn
    assert calls == [[1, 2]]
    assert await asyncio.gather(first, second) == [1, 2]
    third = batcher.submit("k", 3, 1)  # the batch above is closed: a new one
    await asyncio.sleep(0)
    assert calls == [[1, 2], [3]]
    assert await third == 3


async def test_the_fast_path_batch_respects_the_size_limit_and_drains() -> None:
    calls: list[list[int]] = []

    async def send(key: object, items: list[int]) -> list[int]:
        calls.append(list(items))
        await asyncio.sleep(0)
        return items

    batcher = AutoBatcher(send, max_messages=3, max_in_flight=4)
    futures = [batcher.submit("k", i, 1) for i in range(7)]
    await batcher.drain()
    assert [f.result() for f in futures] == list(range(7))
    assert calls == [[0, 1, 2], [3, 4, 5], [6]]  # each batch sent once, in order
    assert batcher.in_flight == 0 and batcher.buffered == 0


async def test_batcher_sends_waiting_batches_of_mergeable_keys_in_one_request() -> None:
    """With send_many, the batches of several keys waiting at once share a request (issue 33:
    one request per topic dominated); a non-mergeable key keeps its own; an error of one
    batch fails that batch alone; the size limits hold over the whole request."""
    singles: list[object] = []
    requests: list[list[tuple[object, int]]] = []

    async def send(key: object, items: list[int]) -> list[int]:
        singles.append(key)
        await asyncio.sleep(0.01)
        return [i * 10 for i in items]

    async def send_many(batches: list[tuple[object, list[int]]]) -> list[list[int] | Exception]:
        requests.append([(key, len(items)) for key, items in batches])
        await asyncio.sleep(0.01)
        return [
            UnavailableError("no") if key == "bad" else [i * 10 for i in items]
            for key, items in batches
        ]

    batcher = AutoBatcher(
        send, send_many=send_many, mergeable=lambda key: key != "pinned",
        max_messages=20, max_in_flight=1,
    )  # fmt: skip
    keys = ["busy", *(f"t{i}" for i in range(8)), "pinned", "bad"]
    groups = [batcher.submit_group(key, [1, 2, 3], 3) for key in keys]
    results = await asyncio.gather(*groups, return_exceptions=True)
    assert results[: len(keys) - 1] == [[10, 20, 30]] * (len(keys) - 1)
    assert isinstance(results[-1], UnavailableError)
    assert singles.count("pinned") == 1 and "pinned" not in str(requests)
    merged = [key for request in requests for key, _ in request]
    assert sorted(map(str, merged + singles)) == sorted(keys)  # each batch sent exactly once
    assert any(len(request) > 1 for request in requests)
    assert all(sum(n for _, n in request) <= 20 for request in requests)
    await batcher.drain()


async def test_batches_opened_in_one_turn_expire_together_at_the_next_and_go_once() -> None:
    """With linger 0, every batch opened in a loop turn (but the fast-path one) expires at the
    next turn through one callback: those closed by size meanwhile are not sent twice, and
    a key submitted again after its batch left opens a new batch that expires in its turn."""
    requests: list[list[tuple[object, int]]] = []
    loop = asyncio.get_running_loop()
    scheduled = 0
    real_call_soon = loop.call_soon

    def counting_call_soon(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal scheduled
        scheduled += 1
        return real_call_soon(*args, **kwargs)

    async def send(key: object, items: list[int]) -> list[int]:
        requests.append([(key, len(items))])
        return list(items)

    async def send_many(batches: list[tuple[object, list[int]]]) -> list[list[int] | Exception]:
        requests.append([(key, len(items)) for key, items in batches])
        await asyncio.sleep(0)
        return [list(items) for _, items in batches]

    batcher = AutoBatcher(send, send_many=send_many, max_messages=4, max_in_flight=1)
    first = batcher.submit_group("lead", [0], 1)  # the fast path: its task, no expiry
    loop.call_soon = counting_call_soon  # type: ignore[method-assign]
    try:
        groups = [batcher.submit_group(f"k{i}", [i, i], 2) for i in range(50)]
        full = batcher.submit_group("k0", [7, 7], 2)  # k0 reaches 4: closed by size now
    finally:
        loop.call_soon = real_call_soon  # type: ignore[method-assign]
    assert scheduled == 1  # one expiry callback for the 50 batches of this turn
    results = await asyncio.gather(first, *groups, full)
    assert results == [[0], *([i, i] for i in range(50)), [7, 7]]
    sent = [key for request in requests for key, _ in request]
    assert sorted(sent) == sorted(["lead", *(f"k{i}" for i in range(50))])  # each batch once
    again = await batcher.submit_group("k1", [9], 1)  # a new batch of a key already sent
    assert again == [9]
    await batcher.drain()


async def test_a_group_gets_its_own_results_alone_in_a_batch_or_sharing_one() -> None:
    """A send_batch's group resolves to exactly its messages' results: alone in its batch
    (the whole answer, no slice) or sharing the batch with another group and single sends."""

    async def send(key: object, items: list[int]) -> list[int]:
        return [item * 10 for item in items]

    batcher = AutoBatcher(send)
    lead = batcher.submit_group("lead", [1], 1)  # the fast path takes the first batch
    alone = batcher.submit_group("a", [1, 2, 3], 3)
    first = batcher.submit_group("b", [4, 5], 2)
    single = batcher.submit("b", 6, 1)
    second = batcher.submit_group("b", [7], 1)
    assert await lead == [10]
    assert await alone == [10, 20, 30]
    assert (await first, await single, await second) == ([40, 50], 60, [70])
