"""Console page render times on a big broker: 1,000 topics, many messages, 50 groups.

    .venv/bin/python -m tests.bench.console [--messages 10000000] [--topics 1000] [--rounds 20]
        [--root DIR] [--fill-seconds 90]

Starts a broker (ASYNC_FLUSH), creates ``--topics`` topics of 4 queues and ``--groups`` groups
(each committed half-way on three topics), fills the store towards ``--messages`` 16-byte
messages through the SDK (``send_batch`` of 1,000, spread round robin over the topics; the first
message of each batch carries a key, so key searches hit the index) for at most
``--fill-seconds``, then starts the real
``wharf console`` process and times each page over HTTP: ``--rounds`` requests after one
warm-up, printing median, p95 and max in ms. The peer is the floor of the same HTTP path: a
static file (``/static/console.css``) served by the same process.

With ``--root DIR`` the broker's store is kept in DIR and a later run continues the filling, so
10 million messages can be reached in several runs of under two minutes each on a shared
machine: ``for i in 1 2 3 4; do python -m tests.bench.console --root /tmp/cb; done``.

Prints figures only; nothing is asserted (tests/bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from wharf.client import Admin, Message, MessageQueue, Producer, PullConsumer

from tests.console.browser import ConsoleProcess
from tests.harness import BrokerProcess

BATCH = 1000
QUEUES = 4


async def prepare(endpoint: str, topics: int, groups: int) -> list[str]:
    """The topics and groups (kept when they exist, so a run can reuse a store)."""
    names = [f"bench-topic-{i:04d}" for i in range(topics)]
    async with Admin(endpoint) as admin:
        existing = {t.name for t in (await admin.list_topics()).topics}
        await asyncio.gather(
            *(admin.create_topic(n, queue_nums=QUEUES) for n in names if n not in existing)
        )
        await asyncio.gather(*(admin.create_group(f"bench-group-{g:02d}") for g in range(groups)))
    return names


async def stored(endpoint: str, names: list[str]) -> int:
    async with Admin(endpoint) as admin:
        stats = await asyncio.gather(*(admin.topic_stats(n) for n in names))
    return sum(s.total_messages for s in stats)


async def fill(endpoint: str, names: list[str], target: int, max_seconds: float) -> int:
    """Send 16-byte messages until the store holds ``target`` or ``max_seconds`` passed."""
    have = await stored(endpoint, names)
    body = b"0123456789abcdef"
    first = have // BATCH  # batch numbers continue across runs: keys stay unique
    last = -(-target // BATCH)
    sent = 0
    started = time.monotonic()
    async with Producer(endpoint, streams=2) as producer:
        next_batch = first

        async def worker() -> None:
            nonlocal next_batch, sent
            while next_batch < last and time.monotonic() - started < max_seconds:
                number = next_batch
                next_batch += 1
                topic = names[number % len(names)]
                count = min(BATCH, target - number * BATCH)
                items: list[bytes | Message] = [Message(topic, body, keys=(f"key-{number}",))]
                items.extend([body] * (count - 1))
                await producer.send_batch(topic, items, deadline_s=60)
                sent += count
                if number % 1000 == 0:
                    rate = sent / max(time.monotonic() - started, 1e-9)
                    print(f"  {have + sent:,} messages stored ({rate:,.0f} msg/s)", flush=True)

        await asyncio.gather(*(worker() for _ in range(4)))
    took = time.monotonic() - started
    if sent:
        print(f"sent {sent:,} messages in {took:.1f} s ({sent / took:,.0f} msg/s)")
    return have + sent


async def commit_groups(endpoint: str, names: list[str], groups: int) -> None:
    """Each group committed half-way on three topics (lag to show, a trace to compute)."""
    async with PullConsumer(endpoint, "bench-group-00") as consumer:
        for g in range(groups):
            consumer.group = f"bench-group-{g:02d}"
            for t in range(3):
                queue = MessageQueue(names[(g * 3 + t) % len(names)], 0)
                _, high = await consumer.bounds(queue)
                await consumer.commit(queue, high // 2)


async def sample_message(endpoint: str, topic: str, key: str) -> str:
    async with Admin(endpoint) as admin:
        found = (await admin.query_messages(topic, key)).messages
    if not found:
        raise RuntimeError(f"no message with key {key} in {topic}")
    # the unique id with its topic: an offset msg id names the broker's host:port, which a
    # reused store's broker (a new ephemeral port each run) no longer matches
    return found[0].msg_id


def timed(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as reply:
        reply.read()
        if reply.status != 200:
            raise RuntimeError(f"{url}: HTTP {reply.status}")
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000, help="store size to reach")
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--root", type=Path, help="keep the broker here across runs (default: a temp dir)"
    )
    parser.add_argument(
        "--fill-seconds", type=float, default=90.0, help="stop filling after this long"
    )
    args = parser.parse_args()
    settings = {"flushDiskType": "ASYNC_FLUSH", "maxIndexNum": 2_000_000}
    with contextlib.ExitStack() as stack:
        root = args.root or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        broker = stack.enter_context(
            BrokerProcess(root / "broker", settings=settings, ready_timeout=120)
        )
        names = asyncio.run(prepare(broker.endpoint, args.topics, args.groups))
        total = asyncio.run(fill(broker.endpoint, names, args.messages, args.fill_seconds))
        asyncio.run(commit_groups(broker.endpoint, names, args.groups))
        big = "bench-topic-0007"
        msg_id = asyncio.run(sample_message(broker.endpoint, big, "key-7"))
        # path, and a text the page must contain (so a fast error page is not timed as a page)
        pages = {
            "static file (peer)": ("/static/console.css", "font"),
            "overview /": ("/", ">UP<"),
            "topics, page 1 of 10": ("/topics", "page 1 of 10"),
            "topics, page 10": ("/topics?page=10", "page 10 of 10"),
            "topics filtered (q=-09)": ("/topics?q=-09", "bench-topic-0999"),
            "topic page": (f"/topics/{big}", 'id="queues"'),
            "groups": ("/groups", "bench-group-49"),
            "group page": ("/groups/bench-group-00", 'id="progress"'),
            "messages by key": (f"/messages?topic={big}&key=key-7", "1 message with key"),
            "messages by time, page 1": (f"/messages?topic={big}&begin=1", "page 1 of"),
            "messages by time, page 100": (
                f"/messages?topic={big}&begin=1&page=100",
                "page 100 of",
            ),
            "message page + trace": (f"/messages/{msg_id}?topic={big}", 'id="trace"'),
        }
        with ConsoleProcess(broker.endpoint, root / "console.log") as console:
            print(
                f"\npage render times over HTTP, {args.rounds} rounds after a warm-up "
                f"({args.topics} topics, {total:,} messages stored, {args.groups} groups)"
            )
            print(f"{'page':<30} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
            for label, (path, expect) in pages.items():
                page = urllib.request.urlopen(console.url + path, timeout=60).read().decode()
                if expect not in page:
                    raise RuntimeError(f"{path}: the page lacks {expect!r}")
                times = sorted(timed(console.url + path) for _ in range(args.rounds))
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                median = statistics.median(times)
                print(f"{label:<30} {median:>10.1f} {p95:>8.1f} {times[-1]:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
