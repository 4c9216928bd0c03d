"""Administration over a cluster of two broker groups (``Admin(namesrv=)`` and the CLI's
``--namesrv``): writes land on every master holding the topic or group, reads merge both
groups' answers (stats per (broker, queue) with the total summed, progress per (broker, queue),
offsets reset on both)."""

from __future__ import annotations

import asyncio

import pytest
from wharf.client import Producer
from wharf.client.admin import Admin
from wharf.client.cluster_admin import ClusterAdmin
from wharf.client.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError

from tests.cluster.test_namesrv import cli, cli_lines, route, wait_for

pytestmark = pytest.mark.slow


async def _on_each(brokers, call):  # type: ignore[no-untyped-def]
    """``call(admin)`` on each broker by its own endpoint: {broker name: reply}."""
    out = {}
    for name, broker in brokers.items():
        async with Admin(broker.endpoint) as admin:
            out[name] = await call(admin)
    return out


async def test_admin_over_namesrv_writes_every_master_and_merges_reads(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")

    async with Admin(namesrv=ns) as admin:
        assert isinstance(admin, ClusterAdmin)
        made = await admin.create_topic("ledger", queue_nums=2)
        assert (made.read_queue_nums, made.write_queue_nums) == (4, 4)  # 2 on each group
        with pytest.raises(AlreadyExistsError):
            await admin.create_topic("ledger", queue_nums=2)
        for n in names:
            wait_for(lambda n=n: route(n.endpoint, "ledger") == {"broker-a": 2, "broker-b": 2},
                     5, "ledger on both groups")  # fmt: skip

        async with Producer(namesrv=ns) as producer:
            for i in range(40):
                await producer.send("ledger", f"entry-{i}".encode())
        stats = await admin.topic_stats("ledger")
        rows = {(q.broker_name, q.queue_id): q.max_offset - q.min_offset for q in stats.queues}
        assert sorted(rows) == [(b, q) for b in ("broker-a", "broker-b") for q in (0, 1)]
        assert stats.total_messages == sum(rows.values()) == 40
        by_broker = {b: sum(v for (bb, _), v in rows.items() if bb == b) for b in brokers}
        assert min(by_broker.values()) > 0  # both groups hold some
        offsets = await admin.queue_offsets("ledger")
        assert {(q.broker_name, q.queue_id) for q in offsets.queues} == set(rows)

        routes = await admin.topic_routes("ledger")
        assert sorted((r.broker_name, r.endpoint) for r in routes) == sorted(
            (n, b.endpoint) for n, b in brokers.items()
        )
        with pytest.raises(InvalidArgumentError):
            await admin.topic_route("ledger")

        updated = await admin.update_topic("ledger", write_queue_nums=3)
        assert updated.write_queue_nums == 6
        wait_for(lambda: route(names[0].endpoint, "ledger") == {"broker-a": 3, "broker-b": 3},
                 5, "updated on both groups")  # fmt: skip
        listed = {t.name: t for t in (await admin.list_topics()).topics}
        assert (listed["ledger"].read_queue_nums, listed["ledger"].write_queue_nums) == (4, 6)

        await admin.create_group("auditors", retry_max_times=3)
        groups = await _on_each(brokers, lambda a: a.list_groups())
        for reply in groups.values():
            assert {g.group_name: g.retry_max_times for g in reply.groups}["auditors"] == 3
        assert "auditors" in {g.group_name for g in (await admin.list_groups()).groups}

        # A group consumes everything through the cluster and commits on both groups.
        consumed = cli_lines(ns, "consume", "ledger", "--group", "auditors", "--commit")
        assert len(consumed) == 40
        progress = await admin.consumer_progress("auditors", "ledger")
        assert {(q.broker_name, q.queue_id) for q in progress.queues} == set(rows)
        assert progress.total_lag == 0
        assert {q.broker_name: q.consumer_offset for q in progress.queues if q.queue_id == 0} == {
            b: next(q.max_offset for q in stats.queues if (q.broker_name, q.queue_id) == (b, 0))
            for b in brokers
        }

        reset = await admin.reset_offsets_by_queue("auditors", "ledger", 0)
        assert {(q.broker_name, q.queue_id) for q in reset} == set(rows)
        assert all(q.offset == 0 for q in reset)
        with pytest.raises(InvalidArgumentError):  # queue ids alone are ambiguous here
            await admin.reset_offsets("auditors", "ledger", 0)
        assert (await admin.consumer_progress("auditors", "ledger")).total_lag == 40

        await admin.delete_group("auditors")
        groups = await _on_each(brokers, lambda a: a.list_groups())
        assert all("auditors" not in {g.group_name for g in r.groups} for r in groups.values())
        await admin.delete_topic("ledger")
        wait_for(lambda: route(names[0].endpoint, "ledger") == {}, 5, "ledger deleted")
        topics = await _on_each(brokers, lambda a: a.list_topics())
        assert all("ledger" not in {t.name for t in r.topics} for r in topics.values())
        with pytest.raises(NotFoundError):
            await admin.topic_stats("ledger")


def test_cli_admin_commands_over_namesrv(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    made = cli(ns, "topic", "create", "books", "--queues", "1")  # every master without --cluster
    assert sorted(b["broker"] for b in made["brokers"] if b["created"]) == ["broker-a", "broker-b"]
    for n in names:
        wait_for(lambda n=n: route(n.endpoint, "books") == {"broker-a": 1, "broker-b": 1}, 5, "")

    # One producer: its turn alternates the two groups (3 each). Six `wharf send` processes
    # each start at a random group and put all six on one group 1 time in 32, and the group
    # progress below then lists that group only.
    async def send_books() -> None:
        async with Producer(namesrv=ns) as producer:
            for i in range(6):
                await producer.send("books", f"book-{i}".encode())

    asyncio.run(send_books())

    status = cli(ns, "topic", "status", "books")
    assert status["total_messages"] == 6
    assert sorted(q["broker_name"] for q in status["queues"]) == ["broker-a", "broker-b"]
    assert sorted(r["broker_name"] for r in cli(ns, "topic", "route", "books")) == [
        "broker-a",
        "broker-b",
    ]
    updated = cli(ns, "topic", "update", "books", "--perm", "4")
    assert updated["perm"] == 4
    assert {t["name"]: t["perm"] for t in cli(ns, "topic", "list")}["books"] == 4

    cli(ns, "group", "create", "readers")
    assert "readers" in {g["group_name"] for g in cli(ns, "group", "list")}
    cli_lines(ns, "consume", "books", "--group", "readers", "--commit")
    progress = cli(ns, "group", "progress", "readers", "--topic", "books")
    assert sorted(q["broker_name"] for q in progress["queues"]) == ["broker-a", "broker-b"]
    assert progress["total_lag"] == 0
    reset = cli(
        ns, "offsets", "reset", "--group", "readers", "--topic", "books", "--timestamp", "0"
    )
    assert sorted((q["broker"], q["offset"]) for q in reset["queue_offsets"]) == [
        ("broker-a", 0),
        ("broker-b", 0),
    ]
    progress = cli(ns, "group", "progress", "readers", "--topic", "books")
    assert progress["total_lag"] == 6
    statuses = cli(ns, "broker", "status")
    assert sorted(s["broker_name"] for s in statuses) == ["broker-a", "broker-b"]

    cli(ns, "group", "delete", "readers")
    assert "readers" not in {g["group_name"] for g in cli(ns, "group", "list")}
    cli(ns, "topic", "delete", "books")
    for name, broker in brokers.items():  # gone from each broker itself
        topics = cli_lines_endpoint(broker.endpoint, "topic", "list")
        assert "books" not in {t["name"] for t in topics}, name


def cli_lines_endpoint(endpoint: str, *args: str):  # type: ignore[no-untyped-def]
    import json
    import subprocess
    import sys

    from tests.harness import REPO_ROOT

    proc = subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", "--endpoints", endpoint, "--json", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)
