"""The etcd seam the election uses (wharf.broker.failover.kv.Etcd), run against a real etcd
(Debian's etcd-server, through AetcdEtcd: the broker's) and against MemoryEtcd (the election's
unit tests, tests/broker/test_election.py): every body below runs on both, so the stand-in
cannot drift from etcd where the election's rules depend on it (comparisons, revisions,
atomic transactions, leases taking their keys with them).

What only the stand-in does (``expire``, ``down``) and a lease running out on etcd's clock stay
out of here (the end-to-end tests in tests/cluster/test_failover*.py cover the latter).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from wharf.broker.failover import AetcdEtcd, Etcd
from wharf.broker.failover.kv import (
    Absent,
    Compare,
    CreatedAt,
    Delete,
    ModifiedAt,
    Op,
    Put,
    ValueIs,
)
from wharf.broker.failover.memory import MemoryEtcd

from tests.harness import EtcdProcess

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def etcd_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    process = EtcdProcess(Path(tmp_path_factory.mktemp("etcd"))).start()
    yield process
    process.kill()


@pytest.fixture(params=["real", "memory"])
async def etcd(request: pytest.FixtureRequest) -> AsyncIterator[Etcd]:
    client: Etcd
    if request.param == "real":
        process: EtcdProcess = request.getfixturevalue("etcd_process")
        client = AetcdEtcd([process.endpoint])
    else:
        client = MemoryEtcd()
    yield client
    await client.close()


@pytest.fixture
def key() -> Iterator[bytes]:
    """A fresh key prefix per test (the real etcd is shared by the module)."""
    yield f"/contract/{next(_prefixes)}/".encode()


async def test_get_put_and_revisions(etcd: Etcd, key: bytes) -> None:
    assert await etcd.get(key + b"a") is None
    await etcd.put(key + b"a", b"1")
    first = await etcd.get(key + b"a")
    assert first is not None
    assert first.value == b"1" and first.create_revision == first.mod_revision > 0
    await etcd.put(key + b"a", b"2")
    second = await etcd.get(key + b"a")
    assert second is not None and second.value == b"2"
    assert second.create_revision == first.create_revision
    assert second.mod_revision > first.mod_revision
    await etcd.put(key + b"b", b"")
    empty = await etcd.get(key + b"b")
    assert empty is not None and empty.value == b""


async def test_comparisons(etcd: Etcd, key: bytes) -> None:
    a, missing = key + b"a", key + b"missing"
    await etcd.put(a, b"x")
    entry = await etcd.get(a)
    assert entry is not None
    holds: list[list[Compare]] = [
        [Absent(missing)],
        [CreatedAt(missing, 0)],
        [ModifiedAt(missing, 0)],
        [ValueIs(a, b"x")],
        [CreatedAt(a, entry.create_revision)],
        [ModifiedAt(a, entry.mod_revision)],
        [Absent(missing), ValueIs(a, b"x"), ModifiedAt(a, entry.mod_revision)],
    ]
    fails: list[list[Compare]] = [
        [Absent(a)],
        [CreatedAt(a, 0)],
        [ValueIs(a, b"y")],
        [ValueIs(missing, b"")],
        [CreatedAt(a, entry.create_revision + 1)],
        [ModifiedAt(a, entry.mod_revision - 1)],
        [Absent(missing), ValueIs(a, b"y")],  # one failing comparison is enough
    ]
    for compare in holds:
        assert await etcd.transaction(compare, []), compare
    for compare in fails:
        assert not await etcd.transaction(compare, []), compare


async def test_a_transaction_applies_all_or_nothing(etcd: Etcd, key: bytes) -> None:
    a, b, c = key + b"a", key + b"b", key + b"c"
    await etcd.put(c, b"old")
    ops: list[Op] = [Put(a, b"1"), Put(b, b"2"), Delete(c), Delete(key + b"missing")]
    assert not await etcd.transaction([Absent(c)], ops)
    assert await etcd.get(a) is None and await etcd.get(b) is None
    assert (await etcd.get(c)) is not None

    before = await etcd.get(c)
    assert before is not None
    assert await etcd.transaction([ValueIs(c, b"old")], ops)
    got_a, got_b = await etcd.get(a), await etcd.get(b)
    assert got_a is not None and got_b is not None
    assert (got_a.value, got_b.value) == (b"1", b"2")
    assert got_a.mod_revision == got_b.mod_revision > before.mod_revision  # one revision
    assert await etcd.get(c) is None
    # What the transaction wrote no longer matches what was read before it.
    assert not await etcd.transaction([ModifiedAt(c, before.mod_revision)], [])


async def test_a_lease_takes_its_keys_with_it(etcd: Etcd, key: bytes) -> None:
    lease = await etcd.grant(5)
    await etcd.put(key + b"bound", b"1", lease)
    assert await etcd.transaction([], [Put(key + b"also", b"2", lease), Put(key + b"free", b"3")])
    assert 0 < await etcd.refresh(lease) <= 5
    for name in (b"bound", b"also", b"free"):
        assert await etcd.get(key + name) is not None

    await etcd.revoke(lease)
    assert await etcd.get(key + b"bound") is None
    assert await etcd.get(key + b"also") is None
    assert await etcd.get(key + b"free") is not None  # not bound to it
    assert await etcd.refresh(lease) <= 0
    with pytest.raises(Exception, match="lease not found"):
        await etcd.revoke(lease)
    with pytest.raises(Exception, match="lease not found"):
        await etcd.put(key + b"late", b"", lease)
    with pytest.raises(Exception, match="lease not found"):
        await etcd.transaction([], [Put(key + b"late", b"", lease)])
    assert await etcd.get(key + b"late") is None


async def test_leases_are_distinct(etcd: Etcd, key: bytes) -> None:
    one, two = await etcd.grant(5), await etcd.grant(5)
    assert one != two and one > 0 and two > 0
    await etcd.put(key + b"one", b"", one)
    await etcd.put(key + b"two", b"", two)
    await etcd.revoke(one)
    assert await etcd.get(key + b"one") is None
    assert await etcd.get(key + b"two") is not None
    await etcd.revoke(two)
