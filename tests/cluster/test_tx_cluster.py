"""Transactions and recall through ``namesrv=`` over two broker groups: a transaction's halves
spread over both groups and each ends on the broker that stored it (commit: all visible;
rollback: none, no half left open); halves a producer left open on both groups are committed
by another producer's checker, which listens on every master of the topic; a timed message is
recalled on whichever group holds it."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from wharf.client import Producer
from wharf.client.admin import Admin
from wharf.client.errors import NotFoundError

from tests.cluster.test_namesrv import cli, route, wait_for
from tests.cluster.test_official_client_cluster import stored
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.slow


async def _visible(brokers, topic: str) -> dict[str, list[bytes]]:  # type: ignore[no-untyped-def]
    return {name: await asyncio.to_thread(stored, b.endpoint, topic) for name, b in brokers.items()}


async def test_transactions_and_recall_over_two_groups(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    cli(ns, "topic", "create", "tx", "--cluster", "C", "--queues", "2")
    for n in names:
        wait_for(lambda n=n: route(n.endpoint, "tx") == {"broker-a": 2, "broker-b": 2}, 5, "")
    checked: list[str] = []

    def checker(view) -> bool:  # type: ignore[no-untyped-def]
        checked.append(view.body.decode())
        return view.body.startswith(b"orphan")

    async with Producer(
        namesrv=ns, transaction_checker=checker, transaction_topics=["tx"]
    ) as producer:
        async with producer.transaction() as tx:
            for i in range(10):
                await tx.send("tx", f"paid-{i}")
        seen = await _visible(brokers, "tx")
        assert sorted(b for v in seen.values() for b in v) == sorted(
            f"paid-{i}".encode() for i in range(10)
        )
        assert all(seen.values())  # both groups stored (and committed) some

        with pytest.raises(RuntimeError):
            async with producer.transaction() as tx:
                for i in range(10):
                    await tx.send("tx", f"undone-{i}")
                raise RuntimeError("the local transaction failed")
        async with Admin(namesrv=ns) as admin:
            assert list((await admin.list_half_messages("tx")).messages) == []
        seen = await _visible(brokers, "tx")
        assert not any(b.startswith(b"undone") for v in seen.values() for b in v)

        # Another producer stores halves on both groups and goes away without an END: the
        # broker of each asks a producer of the topic -- this one's checker answers both.
        async with Producer(namesrv=ns) as quitter:
            tx = quitter.transaction()
            for i in range(10):
                await tx.send("tx", f"orphan-{i}")
        for _ in range(150):
            seen = await _visible(brokers, "tx")
            if sum(b.startswith(b"orphan") for v in seen.values() for b in v) == 10:
                break
            await asyncio.sleep(0.1)
        orphans = {n: [b for b in v if b.startswith(b"orphan")] for n, v in seen.items()}
        assert sorted(b for v in orphans.values() for b in v) == sorted(
            f"orphan-{i}".encode() for i in range(10)
        )
        assert all(orphans.values())  # check-backs answered on both groups
        assert all(c.startswith("orphan") for c in checked)

        timed = [await producer.send("tx", f"later-{i}", delay=600) for i in range(4)]
        assert len({r.offset_msg_id[:16] for r in timed}) == 2  # the timer of both groups
        for result in timed:
            assert await producer.recall("tx", result.recall_handle) == result.msg_id
        with pytest.raises(NotFoundError):
            await producer.recall("tx", timed[0].recall_handle)

    # Halves left open with no checker alive: an operator lists and commits them by hand
    # through the cluster (transaction ids are per broker: the list names it, commit takes it).
    async with Producer(namesrv=ns) as quitter:
        tx = quitter.transaction()
        for i in range(4):
            await tx.send("tx", f"by-hand-{i}")
    halves = await asyncio.to_thread(cli, ns, "tx", "list", "--topic", "tx")
    assert len(halves) == 4 and {h["broker_name"] for h in halves} == {"broker-a", "broker-b"}
    refused = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "wharf.client.cli.main", "--namesrv", ns, "tx", "commit",
         halves[0]["transaction_id"]],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "name the broker" in refused.stderr
    for half in halves:
        done = await asyncio.to_thread(
            cli, ns, "tx", "commit", half["transaction_id"], "--broker", half["broker_name"]
        )
        assert done["resolution"]
    for _ in range(50):  # the committed copies are dispatched asynchronously
        seen = await _visible(brokers, "tx")
        if sum(b.startswith(b"by-hand") for v in seen.values() for b in v) == 4:
            break
        await asyncio.sleep(0.1)
    assert sorted(b for v in seen.values() for b in v if b.startswith(b"by-hand")) == [
        f"by-hand-{i}".encode() for i in range(4)
    ]
