"""Metadata at scale (issue 33): what persisting ``topics.json``, ``subscriptionGroup.json`` and
``consumerOffset.json`` costs the event loop and the disk with 25,000 topics, 10,000 groups and
100,000 committed offsets, and how long the listings and a NameServer registration take.

    .venv/bin/python -m tests.bench.metadata_scale [--topics 25000] [--groups 10000]
        [--offsets 100000] [--commits-per-s 1000] [--minutes 5] [--interval-s 5]

In-process, through the real classes: the three managers filled at that size, the broker's own
``MetadataPersister.persist`` (the broker's, over these tables) writing
into a temporary ``config/`` directory. Printed:

* ``first persist``: every table written once (a broker's first write after its start), and
  ``one topic change``: one topic updated, then a persist (what the controller does ~50 ms
  after a change), and ``one offset commit`` (with the bytes its persist wrote); for each the
  longest event-loop stall (a task ticking ``sleep(0)`` records
  the longest gap between its turns: the loop-side work of the persist, plus whatever the
  writer thread holds the GIL for) and the wall time.
* ``steady``: ``--minutes`` simulated minutes at ``--commits-per-s`` offset commits a second
  spread over all (topic, group, queue) offsets, one topic change a minute, a persist every
  ``--interval-s`` (flushConsumerOffsetInterval) plus one right after each topic change; bytes
  written to the disk per minute (``wchar`` of /proc/self/io: every write(2) of the process,
  tmp files, backups and journals included) and the longest loop stall over the run.
* ``rpc`` / ``console`` / ``cli``: an in-process broker (its real store) holding ``--topics``
  topics: ListTopics through the SDK's Admin (plain, with_stats, a prefix and a page of 100
  through ``Admin.list_topics_page``, again), the console's topic pages (Starlette's
  TestClient in a thread of this process: the loop stall printed then includes that thread's
  hold of the GIL) and ``wharf topic list`` (table and --json, into a buffer; ``--limit 0``
  last: rich holds the loop, and the broker on it, for seconds).
* ``listing``: ``TopicConfigManager.listing`` and the broker's ListTopics reply, built and
  cached (``AdminService._topic_listing``).
* ``namesrv``: one broker's registration of the whole topic table into the NameServer's
  ``RouteTable`` as its BrokerSession handles it (first, a repeat, one topic more: how many
  routes its watchers are told changed), and a route lookup.
* ``replication snapshot``: what a master builds on its loop for its replicas each second
  (``BrokerController._replica_link``), for reference.

The simulated minutes run as fast as the machine goes (no sleeping between rounds): the
bytes are per simulated minute. The "before" figures: the same program against a copy of the
tree before the change (``git archive`` of the base commit into /tmp, run with that copy first
on PYTHONPATH through a ``build/tree``-style symlink tree, as ``make typecheck`` builds).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from wharf.broker.controller import BrokerController
from wharf.broker.meta.groups import SubscriptionGroup, SubscriptionGroupManager
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.persister import MetadataPersister
from wharf.broker.meta.topics import TopicConfig, TopicConfigManager

QUEUES = 4


def wchar() -> int:
    """Bytes this process handed to write(2) so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


class StallMeter:
    """The longest gap between two turns of a task that only yields: the longest callback
    (or GIL hold by another thread) the loop suffered while it ran."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> StallMeter:
        self.longest = 0.0
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def build(topics_n: int, groups_n: int, offsets_n: int) -> SimpleNamespace:
    topics = TopicConfigManager(default_queue_nums=QUEUES, auto_create=True)
    for i in range(topics_n):
        topics.create(f"topic-{i:05d}", QUEUES, QUEUES, 6, {})
    groups = SubscriptionGroupManager(auto_create=True, default_retry_max_times=16)
    for i in range(groups_n):
        groups.put(SubscriptionGroup(f"group-{i:05d}"))
    offsets = ConsumerOffsetManager()
    keys: list[tuple[str, str, int]] = []
    for i in range(offsets_n // QUEUES):
        topic, group = f"topic-{i % topics_n:05d}", f"group-{i % groups_n:05d}"
        for q in range(QUEUES):
            offsets.commit(group, topic, q, random.randrange(1 << 30))
            keys.append((group, topic, q))
    return SimpleNamespace(topics=topics, groups=groups, offsets=offsets, keys=keys)


def host(directory: Path, tables: SimpleNamespace) -> MetadataPersister:
    """The broker's metadata persister over these tables."""
    return MetadataPersister(directory, (tables.topics, tables.groups, tables.offsets), 5.0)


async def timed_persist(broker: MetadataPersister) -> tuple[float, float]:
    """(longest loop stall, wall time) of one persist."""
    with StallMeter() as meter:
        for _ in range(3):  # the meter ticks before the persist starts
            await asyncio.sleep(0)
        start = time.perf_counter()
        await broker.persist()
        wall = time.perf_counter() - start
        await asyncio.sleep(0)
    return meter.longest, wall


def change_topic(tables: SimpleNamespace, n: int) -> None:
    name = f"topic-{n % len(tables.topics.table):05d}"
    old = tables.topics.require(name)
    perm = 4 if old.perm == 6 else 6
    tables.topics.replace(TopicConfig(name, QUEUES, QUEUES, perm, {}))


def file_sizes(directory: Path) -> str:
    return ", ".join(
        f"{p.name} {p.stat().st_size / 1e6:.2f} MB"
        for p in sorted(directory.iterdir())
        if p.suffix in (".json", ".journal")
    )


async def persistence(args: argparse.Namespace, directory: Path) -> None:
    start = time.perf_counter()
    tables = build(args.topics, args.groups, args.offsets)
    print(
        f"built {len(tables.topics.table)} topics, {len(tables.groups.table)} groups, "
        f"{len(tables.keys)} offsets in {time.perf_counter() - start:.1f} s"
    )
    broker = host(directory, tables)
    stall, wall = await timed_persist(broker)
    print(f"first persist:      loop stall {stall * 1e3:7.1f} ms, wall {wall * 1e3:7.1f} ms")
    print(f"  files: {file_sizes(directory)}")
    change_topic(tables, 0)
    stall, wall = await timed_persist(broker)
    print(f"one topic change:   loop stall {stall * 1e3:7.1f} ms, wall {wall * 1e3:7.1f} ms")
    tables.offsets.commit("group-00000", "topic-00000", 0, 1 << 31)
    before = wchar()
    stall, wall = await timed_persist(broker)
    print(
        f"one offset commit:  loop stall {stall * 1e3:7.1f} ms, wall {wall * 1e3:7.1f} ms, "
        f"{(wchar() - before) / 1e3:.1f} kB written"
    )

    rounds_per_minute = round(60 / args.interval_s)
    per_round = round(args.commits_per_s * args.interval_s)
    rng = random.Random(7)
    longest = 0.0
    before = wchar()
    start = time.perf_counter()
    for minute in range(args.minutes):
        for r in range(rounds_per_minute):
            for _ in range(per_round):
                group, topic, q = rng.choice(tables.keys)
                tables.offsets.commit(group, topic, q, rng.randrange(1 << 30))
            if r == 0:  # the minute's topic change, persisted at once as the controller does
                change_topic(tables, minute + 1)
                stall, _ = await timed_persist(broker)
                longest = max(longest, stall)
            stall, _ = await timed_persist(broker)
            longest = max(longest, stall)
    written = wchar() - before
    print(
        f"steady {args.commits_per_s} commits/s + 1 topic change/min, persist every "
        f"{args.interval_s:g} s, {args.minutes} simulated min "
        f"({time.perf_counter() - start:.1f} s real): "
        f"{written / args.minutes / 1e6:.2f} MB written/min, longest loop stall "
        f"{longest * 1e3:.1f} ms"
    )
    print(f"  files: {file_sizes(directory)}")
    start = time.perf_counter()
    again = SimpleNamespace(
        topics=TopicConfigManager(QUEUES, True),
        groups=SubscriptionGroupManager(True, 16),
        offsets=ConsumerOffsetManager(),
    )
    host(directory, again).load_blocking()
    ok = (
        again.offsets.table == tables.offsets.table
        and again.topics.table == tables.topics.table
        and again.groups.table == tables.groups.table
    )
    print(f"reload: {time.perf_counter() - start:.2f} s, equal to memory: {ok}")


def listing(args: argparse.Namespace) -> None:
    """The broker's side of ListTopics: the table's sorted listing and the reply built from it
    (AdminService._topic_listing; a second call finds it cached)."""
    from wharf.broker.frontends.v1 import admin

    topics = TopicConfigManager(default_queue_nums=QUEUES, auto_create=True)
    for i in range(args.topics):
        topics.create(f"topic-{i:05d}", QUEUES, QUEUES, 6, {})
    for i in range(args.groups):
        topics.ensure_system(f"%RETRY%group-{i:05d}", 1)
    start = time.perf_counter()
    listed = topics.listing(include_system=False)
    took = time.perf_counter() - start
    print(f"listing: TopicConfigManager.listing of {len(listed)} topics in {took * 1e3:.1f} ms")
    service: Any = admin.AdminService.__new__(admin.AdminService)
    # The port's listing calls over the table (the listing needs nothing else of the port).
    port = SimpleNamespace(
        topics=topics.listing, topics_stamp=lambda: (topics.version, len(topics.table))
    )
    service.ctx = SimpleNamespace(port=port)
    service._listings = {}
    listing_of = getattr(service, "_topic_listing", None)
    if listing_of is None:  # before: built on every call
        start = time.perf_counter()
        reply = admin.admin_pb2.ListTopicsResponse(topics=[admin._topic_proto(t) for t in listed])
        print(f"listing: ListTopics reply built in {(time.perf_counter() - start) * 1e3:.1f} ms")
        return
    for label in ("built", "cached"):
        start = time.perf_counter()
        _, reply = listing_of(False)
        copy = admin.admin_pb2.ListTopicsResponse()
        copy.CopyFrom(reply)
        took = time.perf_counter() - start
        print(
            f"listing: ListTopics reply ({len(reply.SerializeToString()) / 1e6:.2f} MB) {label} "
            f"in {took * 1e3:.1f} ms"
        )


def namesrv(args: argparse.Namespace) -> None:
    """One broker's full registration as the NameServer's BrokerSession handles it: the
    message parsed, its topics turned into the table's dict, ``RouteTable.register``."""
    from wharf.broker.namesrv.routes import RouteTable, TopicQueues
    from wharf.v1 import namesrv_pb2

    reg = namesrv_pb2.BrokerRegistration(
        cluster="c", broker_name="b0", broker_id=0, address="127.0.0.1:8081", data_version=1
    )
    for i in range(args.topics):
        reg.topics.add(topic=f"topic-{i:05d}", read_queue_nums=4, write_queue_nums=4, perm=6)
    wire = reg.SerializeToString()
    table = RouteTable()
    changed: list[int] = []
    table.watch(lambda topics: changed.append(len(topics)))
    for label in ("first", "repeat", "one topic more"):
        if label == "one topic more":
            reg.topics.add(topic="topic-new", read_queue_nums=4, write_queue_nums=4, perm=6)
            wire = reg.SerializeToString()
        start = time.perf_counter()
        parsed = namesrv_pb2.BrokerRegistration.FromString(wire)
        topics = {
            t.topic: TopicQueues(t.read_queue_nums, t.write_queue_nums, t.perm)
            for t in parsed.topics
        }
        table.register(("c", "b0", 0), parsed.address, parsed.data_version, topics)
        took = time.perf_counter() - start
        print(
            f"namesrv: {label} registration of {len(topics)} topics ({len(wire) / 1e6:.2f} MB) "
            f"in {took * 1e3:.1f} ms, {changed[-1] if changed else 0} routes changed"
        )
        changed.clear()
    start = time.perf_counter()
    for i in range(1000):
        table.route(f"topic-{i:05d}")
    print(f"namesrv: route lookup {(time.perf_counter() - start) * 1e3:.3f} us each")


async def list_over_rpc(args: argparse.Namespace, directory: Path) -> None:
    """ListTopics, ``wharf topic list`` and the console's topic listing against an in-process
    broker (its real store) holding ``--topics`` topics (put straight into its table)."""
    import contextlib
    import io

    from wharf.broker.settings import load_settings
    from wharf.client import Admin
    from wharf.client.cli import topic_commands
    from wharf.client.cli.output import Output

    overrides = {
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "store_path_root_dir": str(directory),
    }
    controller = BrokerController(load_settings(None, {}, overrides))
    await controller.start()
    try:
        for i in range(args.topics):
            controller.topics.create(f"topic-{i:05d}", QUEUES, QUEUES, 6, {})
        await controller.persist_metadata()  # not in the background of what is timed
        await asyncio.sleep(0.5)
        endpoint = f"127.0.0.1:{controller.grpc_port}"
        async with Admin(endpoint, rpc_timeout_s=60) as admin:
            for label, kwargs in (
                ("ListTopics", {}),
                ("ListTopics with_stats", {"with_stats": True}),
                ("ListTopics prefix topic-123", {"prefix": "topic-123"}),
                ("ListTopics page of 100", {"limit": 100}),
                ("ListTopics again (cached reply)", {}),
            ):
                paged = "prefix" in kwargs or "limit" in kwargs
                call = getattr(admin, "list_topics_page" if paged else "list_topics", None)
                if call is None:
                    print(f"rpc: {label}: not supported")
                    continue
                await call(**kwargs)  # warm
                with StallMeter() as meter:
                    await asyncio.sleep(0)
                    start = time.perf_counter()
                    reply = await call(**kwargs)
                    took = time.perf_counter() - start
                print(
                    f"rpc: {label}: {len(reply.topics)} topics in {took * 1e3:.1f} ms "
                    f"(client and broker on this loop; longest stall {meter.longest * 1e3:.1f} ms)"
                )
        with StallMeter() as meter:
            pages = await asyncio.to_thread(console_pages, endpoint)
        for url, took, size in pages:
            print(f"console: GET {url}: {size / 1e3:.0f} kB in {took * 1e3:.0f} ms")
        print(
            f"console: longest stall of the broker's loop over those pages (GIL shared with "
            f"the console's thread) {meter.longest * 1e3:.1f} ms"
        )
        for label, extra in (
            ("", {}),
            (" --prefix topic-123", {"prefix": "topic-123"}),
            (" --limit 0", {"limit": 0}),  # last: rich holds this loop (and the broker) long
        ):
            options = {"system": False, "limit": None, "prefix": "", "after": "", **extra}
            namespace = argparse.Namespace(endpoints=endpoint, connect={}, namesrv=None, **options)
            for as_json in (False, True):
                sink = io.StringIO()
                start = time.perf_counter()
                with contextlib.redirect_stdout(sink):
                    await topic_commands.topic_list(namespace, Output(as_json))
                took = time.perf_counter() - start
                print(
                    f"cli: wharf topic list{' --json' if as_json else ''}{label}: "
                    f"{len(sink.getvalue()) / 1e6:.2f} MB of output in {took * 1e3:.0f} ms"
                )
    finally:
        await controller.shutdown()


def console_pages(endpoint: str) -> list[tuple[str, float, int]]:
    """(url, seconds, bytes) of the console's topic pages (Starlette's TestClient, in this
    thread; the broker's loop answers meanwhile)."""
    from starlette.testclient import TestClient
    from wharf.client.console.app import build_app
    from wharf.client.console.brokers import BrokerPool
    from wharf.client.console.context import Console
    from wharf.client.console.security import Guard

    console = Console(BrokerPool([endpoint], rpc_timeout_s=30), Guard())
    out = []
    with TestClient(build_app(console)) as client:
        for url in ("/topics", "/topics?q=topic-123", "/topics?page=200", "/topics/topic-01234"):
            client.get(url).raise_for_status()  # warm
            start = time.perf_counter()
            response = client.get(url)
            took = time.perf_counter() - start
            response.raise_for_status()
            out.append((url, took, len(response.content)))
    return out


def replication_snapshot(args: argparse.Namespace) -> None:
    """What a master builds on its loop for its replicas whenever metadata may have changed
    (``BrokerController._replica_link``'s ``snapshot``: every table's JSON, each second)."""
    from wharf.broker.meta.persist import dumps

    tables = build(args.topics, args.groups, args.offsets)
    start = time.perf_counter()
    payload = dumps(
        {m.FILE_NAME: m.to_json() for m in (tables.topics, tables.groups, tables.offsets)}
    )
    print(
        f"replication snapshot (on the loop, each second with a replica): "
        f"{len(payload) / 1e6:.1f} MB in {(time.perf_counter() - start) * 1e3:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=25_000)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--offsets", type=int, default=100_000)
    parser.add_argument("--commits-per-s", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--interval-s", type=float, default=5.0)
    args = parser.parse_args()
    random.seed(1)
    with tempfile.TemporaryDirectory(prefix="wharf-meta-") as tmp:
        asyncio.run(persistence(args, Path(tmp) / "config"))
    with tempfile.TemporaryDirectory(prefix="wharf-meta-") as tmp:
        asyncio.run(list_over_rpc(args, Path(tmp)))
    listing(args)
    namesrv(args)
    replication_snapshot(args)


if __name__ == "__main__":
    main()
