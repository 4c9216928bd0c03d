"""The election rules of controller mode (wharf.broker.failover.election) against the in-memory
etcd (``MemoryEtcd``) and a fake store role: no processes, no real waits beyond a few tens of
milliseconds. Each broker's polls, renewals and sync-state checks are driven one at a time by
the test (``poll_once``, ``renew_once``, ``sync_state_once``); its background loops are given
hour-long periods so that only the test moves them. The end-to-end tests with a real etcd and
real brokers are tests/cluster/test_failover*.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from wharf.broker.errors import FailedPreconditionError
from wharf.broker.failover import Failover, Timing, campaign_rank
from wharf.broker.failover.memory import EtcdUnavailable, MemoryEtcd

HOUR = 3600.0
TIMING = Timing(
    poll_s=0.01,
    rank_delay_s=0.1,
    jitter_s=0.0,
    sss_check_s=HOUR,
    renew_s=HOUR,
    renew_retry_s=HOUR,
    renew_give_up_s=0.5,
    handover_wait_s=2.0,
)
PREFIX = b"/wharf/c/broker-a/"
HA_PORT = 10910  # + the broker id: each broker's replication listener


def _ha_address(broker_id: int) -> str:
    return f"127.0.0.1:{HA_PORT + broker_id}"


# --- fakes of the store's role (wharf.broker.failover.role) -----------------------------------
@dataclass
class FakeReplica:
    broker_id: int
    acked: int


class FakeReplication:
    """A master's replication listener: the test sets ``in_sync`` and ``acked``; every
    ``require`` is recorded with the sync-state set etcd listed at that moment."""

    def __init__(self, etcd: MemoryEtcd, prefix: bytes, port: int) -> None:
        self.port = port
        self.in_sync: set[int] = set()
        self.acked: dict[int, int] = {}
        self.required: list[tuple[set[int] | None, list[int]]] = []
        self._etcd = etcd
        self._prefix = prefix

    def require(self, replica_ids: set[int] | None) -> None:
        self.required.append((replica_ids, _members(self._etcd, self._prefix)))

    def in_sync_ids(self) -> set[int]:
        return set(self.in_sync)

    def replicas(self) -> list[FakeReplica]:
        return [FakeReplica(i, a) for i, a in sorted(self.acked.items())]


@dataclass
class FakeConfig:
    ha_listen_host: str = "127.0.0.1"


@dataclass
class FakeStore:
    etcd: MemoryEtcd
    prefix: bytes
    ha_port: int
    config: FakeConfig = field(default_factory=FakeConfig)
    ha_master: FakeReplication | None = None
    fence: Callable[[], str] | None = None
    redials: int = 0
    promotions: list[tuple[int, bool]] = field(default_factory=list)
    end: int = 0
    promote_error: Exception | None = None
    promote_gate: asyncio.Event | None = None  # set: promotion may finish

    def set_write_fence(self, fence: Callable[[], str] | None) -> None:
        self.fence = fence

    def replica_redial(self) -> None:
        self.redials += 1

    async def promote(self, epoch: int, sync_master: bool) -> None:
        if self.promote_error is not None:
            raise self.promote_error
        if self.promote_gate is not None:
            await self.promote_gate.wait()
        self.promotions.append((epoch, sync_master))
        self.ha_master = FakeReplication(self.etcd, self.prefix, self.ha_port)

    def commit_log_end(self) -> int:
        return self.end


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Node:
    """One broker of a group: its Failover, its store role and the restarts it asked for."""

    failover: Failover
    store: FakeStore
    restarts: list[str]
    became_master: list[int]

    @property
    def id(self) -> int:
        return self.failover.broker_id


class Cluster:
    def __init__(self, etcd: MemoryEtcd) -> None:
        self.etcd = etcd
        self.clock = Clock()
        self.nodes: list[Node] = []

    def broker(
        self, broker_id: int, *, name: str = "broker-a", wished_role: str = "SYNC_MASTER"
    ) -> Node:
        prefix = f"/wharf/c/{name}/".encode()
        store = FakeStore(self.etcd, prefix, HA_PORT + broker_id)
        restarts: list[str] = []
        became: list[int] = []
        failover: Failover

        async def on_master() -> None:
            became.append(failover.epoch)

        failover = Failover(
            etcd=self.etcd,
            cluster="c",
            broker_name=name,
            broker_id=broker_id,
            address=f"127.0.0.1:{8080 + broker_id}",
            ttl_ms=2000,
            wished_role=wished_role,
            store=store,  # a structural fake of StoreRole (mypy checks it)
            on_master=on_master,
            restart=restarts.append,
            timing=TIMING,
            clock=self.clock,
        )
        store.set_write_fence(failover.fence)
        node = Node(failover, store, restarts, became)
        self.nodes.append(node)
        return node

    def group(self, *ids: int) -> list[Node]:
        return [self.broker(i) for i in ids]


def _members(etcd: MemoryEtcd, prefix: bytes = PREFIX) -> list[int]:
    value = etcd.value(prefix + b"sss")
    return [] if value is None else list(json.loads(value)["members"])


def _master(etcd: MemoryEtcd, prefix: bytes = PREFIX) -> dict[str, object] | None:
    value = etcd.value(prefix + b"master")
    return None if value is None else dict(json.loads(value))


def _epoch(etcd: MemoryEtcd, prefix: bytes = PREFIX) -> int:
    value = etcd.value(prefix + b"epoch")
    return 0 if value is None else int(value)


def _ha(node: Node) -> FakeReplication:
    assert node.store.ha_master is not None
    return node.store.ha_master


async def _poll(*nodes: Node) -> None:
    """One poll of each broker, concurrently (MemoryEtcd interleaves them call by call)."""
    await asyncio.gather(*(n.failover.poll_once() for n in nodes))


async def _elect(first: Node, *others: Node) -> None:
    """``first`` wins an election alone; the others then follow it."""
    await first.failover.poll_once()
    assert first.failover.is_master
    await _poll(*others)


async def _sync(master: Node, in_sync: set[int]) -> None:
    """``in_sync`` caught up: each holds the master's log end (unless the test set less)."""
    ha = _ha(master)
    ha.in_sync = set(in_sync)
    for replica_id in in_sync:
        ha.acked.setdefault(replica_id, master.store.end)
    assert await master.failover.sync_state_once()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster(MemoryEtcd())
    yield c
    c.etcd.down = False
    for node in c.nodes:
        await asyncio.wait_for(node.failover.stop(), 5)


# --- campaign -----------------------------------------------------------------------------
async def test_a_campaign_elects_exactly_one_master_per_group(cluster: Cluster) -> None:
    a = cluster.group(1, 2, 3)
    b = [cluster.broker(i, name="broker-b") for i in (1, 2)]
    await _poll(*a, *b)  # no master, no sync-state set: all five campaign at once

    for nodes, prefix in ((a, PREFIX), (b, b"/wharf/c/broker-b/")):
        masters = [n for n in nodes if n.failover.is_master]
        assert len(masters) == 1
        winner = masters[0]
        master = _master(cluster.etcd, prefix)
        assert master == {
            "id": winner.id,
            "epoch": 1,
            "address": f"127.0.0.1:{8080 + winner.id}",
            "ha": _ha_address(winner.id),
        }
        assert _epoch(cluster.etcd, prefix) == 1
        assert _members(cluster.etcd, prefix) == [winner.id]
        assert cluster.etcd.value(prefix + b"role") == b"SYNC_MASTER"
        assert winner.store.promotions == [(1, True)]
        assert winner.became_master == [1]
        assert _ha(winner).required == [(set(), [winner.id])]  # this master alone, at first
        for loser in nodes:
            if loser is not winner:
                assert not loser.failover.is_master
                assert loser.store.promotions == []
    # The losers gave their leases back: only the two masters' remain.
    assert len(cluster.etcd.live_leases()) == 2


async def test_two_candidates_racing_for_the_same_term_make_one_master(cluster: Cluster) -> None:
    one, two = cluster.group(1, 2)
    before = cluster.etcd.transactions
    await _poll(one, two)  # both read "no master, epoch 0" before either writes

    assert cluster.etcd.transactions - before == 2  # both tried the same term...
    assert [n.failover.is_master for n in (one, two)].count(True) == 1  # ...one won it
    winner = one if one.failover.is_master else two
    loser = two if winner is one else one
    assert _epoch(cluster.etcd) == 1
    assert _master(cluster.etcd) is not None
    assert winner.failover.epoch == 1 and loser.failover.epoch == 0
    assert cluster.etcd.live_leases() == {cluster.etcd.lease_of(PREFIX + b"master")}

    # The loser follows and catches up; once the winner's lease lapses it takes term 2.
    await loser.failover.poll_once()
    assert loser.failover.master_id == winner.id
    assert loser.store.redials == 1
    await loser.failover.poll_once()
    assert loser.store.redials == 1  # the same master: no redial
    await _sync(winner, {loser.id})
    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))
    await loser.failover.poll_once()
    assert loser.failover.is_master and loser.failover.epoch == 2
    assert _epoch(cluster.etcd) == 2


async def test_a_replica_that_is_slow_to_commit_loses_to_one_that_won_meanwhile(
    cluster: Cluster,
) -> None:
    """The transaction compares the sync-state set as the campaign read it, not only the
    master key and the epoch: a replica that read term 1's set before its rank delay cannot
    win after term 2 came and went meanwhile (term 2's master may have acknowledged messages
    3 lacks)."""
    one, two, three = cluster.group(1, 2, 3)
    await _elect(one, two, three)
    await _sync(one, {2, 3})
    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))

    # Replica 3 reads the set [1, 2, 3] and waits its rank; 2 wins term 2 and dies at once.
    three.failover.timing = dataclasses.replace(TIMING, rank_delay_s=0.3)
    task = asyncio.create_task(three.failover.poll_once())
    await asyncio.sleep(0)
    await two.failover.poll_once()
    assert two.failover.is_master and two.failover.epoch == 2
    assert _members(cluster.etcd) == [2]
    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))
    assert not task.done()
    await task
    # 3 found no master and read epoch 2 when its delay ended, but its set is stale.
    assert not three.failover.is_master
    assert _master(cluster.etcd) is None and _epoch(cluster.etcd) == 2
    assert cluster.etcd.live_leases() == set()  # 3 gave its lease back
    await three.failover.poll_once()  # and now it is outside the set: it does not campaign
    assert _master(cluster.etcd) is None


async def test_a_broker_seeing_its_own_previous_life_as_master_waits(cluster: Cluster) -> None:
    """After kill -9 a master restarts while its old lease still holds its key: it neither
    follows itself nor campaigns."""
    (one,) = cluster.group(1)
    await one.failover.poll_once()
    reborn = cluster.broker(1)
    await reborn.failover.poll_once()
    assert not reborn.failover.is_master
    assert reborn.store.redials == 0 and reborn.failover.master_ha == ""


async def test_the_group_keeps_the_first_master_s_acknowledgement_mode(cluster: Cluster) -> None:
    one = cluster.broker(1, wished_role="ASYNC_MASTER")
    two = cluster.broker(2, wished_role="SLAVE")
    await _elect(one, two)
    assert one.store.promotions == [(1, False)]
    assert cluster.etcd.value(PREFIX + b"role") == b"ASYNC_MASTER"
    await _sync(one, {2})
    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))
    await two.failover.poll_once()
    assert two.store.promotions == [(2, False)]  # not SLAVE, not its own wish: the group's


async def test_a_failed_promotion_gives_the_term_back(cluster: Cluster) -> None:
    (one,) = cluster.group(1)
    one.store.promote_error = OSError("haListenPort 10912 in use")
    await one.failover.poll_once()
    assert _master(cluster.etcd) is None  # its lease was revoked at once
    assert cluster.etcd.live_leases() == set()
    assert one.restarts == ["stepped down: could not take over term 1"]
    assert one.became_master == []


async def test_a_master_leads_only_once_its_store_took_over(cluster: Cluster) -> None:
    """Elected first, promoted next (the whole log dispatched, up to 60 s): the Kafka front
    end answers for the partitions only after both, else a produce let in between checked
    its producer's sequences against a log half dispatched (and kept that stale window)."""
    a = cluster.broker(1)
    a.store.promote_gate = asyncio.Event()
    poll = asyncio.create_task(a.failover.poll_once())
    for _ in range(200):
        if a.failover.is_master:
            break
        await asyncio.sleep(0.01)
    assert a.failover.is_master and not a.failover.leads
    a.store.promote_gate.set()
    await poll
    assert a.failover.leads
    a.failover._step_down("a test")  # restarting: it answers for nothing meanwhile
    assert a.restarts and not a.failover.leads


async def test_with_etcd_down_nobody_is_elected(cluster: Cluster) -> None:
    one, two = cluster.group(1, 2)
    cluster.etcd.down = True
    for node in (one, two):
        with pytest.raises(EtcdUnavailable):
            await node.failover.poll_once()
    cluster.etcd.down = False
    await one.failover.poll_once()
    assert one.failover.is_master and _epoch(cluster.etcd) == 1


# --- lease expiry: only an in-sync replica takes over ----------------------------------------
async def test_a_master_s_lease_expiry_elects_an_in_sync_replica_never_an_out_of_sync_one(
    cluster: Cluster,
) -> None:
    one, two, three = cluster.group(1, 2, 3)
    await _elect(one, two, three)
    await _sync(one, {2})  # 3 lags
    assert _members(cluster.etcd) == [1, 2]

    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))  # the master died
    assert _master(cluster.etcd) is None
    for _ in range(5):  # 3 sees no master, again and again: it never campaigns
        await three.failover.poll_once()
    assert not three.failover.is_master
    assert _master(cluster.etcd) is None and _epoch(cluster.etcd) == 1

    await _poll(two, three)
    assert two.failover.is_master and not three.failover.is_master
    assert _master(cluster.etcd) == {
        "id": 2,
        "epoch": 2,
        "address": "127.0.0.1:8082",
        "ha": _ha_address(2),
    }
    assert _members(cluster.etcd) == [2]  # the new term starts with its master alone
    assert two.store.promotions == [(2, True)]
    await three.failover.poll_once()
    assert three.failover.master_id == 2 and three.store.redials == 2

    # The old master wakes up: its key is gone, it steps down (restarts as a replica).
    await one.failover.poll_once()
    assert one.restarts == ["stepped down: its master key is gone or another replica's"]
    assert one.failover.fence() != ""


def test_campaign_rank_orders_the_candidates() -> None:
    """Rank order among the set's members: the lowest id other than the last master first."""
    assert campaign_rank(3, [1, 2, 3], last_master=1, transfer_to=None) == 1
    assert campaign_rank(2, [1, 2, 3], last_master=1, transfer_to=None) == 0
    assert campaign_rank(1, [1, 2, 3], last_master=0, transfer_to=None) == 0
    assert campaign_rank(7, [], last_master=0, transfer_to=None) == 0  # no set yet: all at once
    assert campaign_rank(7, [7], last_master=7, transfer_to=None) == 0  # a lone member
    # A transfer: its successor first, the others TRANSFER_PRIORITY_RANKS later.
    assert campaign_rank(3, [1, 2, 3], last_master=1, transfer_to=3) == 0
    assert campaign_rank(2, [1, 2, 3], last_master=1, transfer_to=3) == 5


async def test_the_lowest_ranked_in_sync_replica_goes_first(cluster: Cluster) -> None:
    one, two, three = cluster.group(1, 2, 3)
    await _elect(one, two, three)
    await _sync(one, {2, 3})
    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))
    await _poll(three, two)  # 3 waits one rank delay; 2 has won by then
    assert two.failover.is_master and not three.failover.is_master
    assert _epoch(cluster.etcd) == 2


# --- the sync-state set -------------------------------------------------------------------
async def test_the_sync_state_set_grows_when_a_replica_catches_up_and_shrinks_when_it_lags(
    cluster: Cluster,
) -> None:
    one, two, three = cluster.group(1, 2, 3)
    await _elect(one, two, three)
    ha = _ha(one)
    ha.required.clear()

    # Nothing changed: nothing is written.
    before = cluster.etcd.transactions
    assert await one.failover.sync_state_once()
    assert cluster.etcd.transactions == before

    # 2 and 3 catch up: acknowledgements need them BEFORE etcd lists them.
    await _sync(one, {2, 3})
    assert _members(cluster.etcd) == [1, 2, 3]
    assert ha.required == [({2, 3}, [1]), ({2, 3}, [1, 2, 3])]
    assert one.failover.sync_state_set == {1, 2, 3}

    # 3 lags: etcd stops listing it BEFORE acknowledgements stop waiting for it.
    ha.required.clear()
    await _sync(one, {2})
    assert _members(cluster.etcd) == [1, 2]
    assert ha.required == [({2}, [1, 2])]

    # 3 catches up again, while 2 falls behind: both at once.
    ha.required.clear()
    await _sync(one, {3})
    assert _members(cluster.etcd) == [1, 3]
    assert ha.required == [({2, 3}, [1, 2]), ({3}, [1, 3])]
    assert json.loads(cluster.etcd.value(PREFIX + b"sss") or b"")["epoch"] == 1


async def test_a_caught_up_replica_is_listed_only_once_it_holds_what_was_acked_without_it(
    cluster: Cluster,
) -> None:
    """A master alone acknowledged up to its log end (1000). Replica 2 catches up, its acks
    are required at once, but etcd lists it only once it holds 1000: listed earlier it could
    be elected without the messages acknowledged before it was required (the CI campaign,
    seed 36: 12 acknowledged messages lost that way, their offsets reused)."""
    one, two = cluster.group(1, 2)
    await _elect(one, two)
    ha = _ha(one)
    ha.required.clear()
    one.store.end = 1000
    ha.acked = {2: 900}  # in sync by its catch-up probe, but 100 bytes short of the end

    await _sync(one, {2})
    assert ha.required == [({2}, [1])]  # required, not listed
    assert _members(cluster.etcd) == [1] and one.failover.sync_state_set == {1}

    one.store.end = 1200  # appends after the require need 2's acks: not part of the floor
    ha.acked[2] = 999
    await _sync(one, {2})
    assert _members(cluster.etcd) == [1]
    ha.acked[2] = 1000
    await _sync(one, {2})
    assert _members(cluster.etcd) == [1, 2]
    assert ha.required[-1] == ({2}, [1, 2])

    # While 1 was alone in the set, 2 could not have taken over: it never campaigns outside it.
    assert one.failover.epoch == 1


async def test_a_replica_that_falls_behind_before_it_is_listed_is_no_longer_required(
    cluster: Cluster,
) -> None:
    one, two = cluster.group(1, 2)
    await _elect(one, two)
    ha = _ha(one)
    ha.required.clear()
    one.store.end = 1000
    ha.acked = {2: 10}
    await _sync(one, {2})
    assert ha.required == [({2}, [1])]
    await _sync(one, set())  # it lagged for haMaxTimeSlaveNotCatchup before it was listed
    assert ha.required[-1] == (set(), [1])
    assert _members(cluster.etcd) == [1]

    # Caught up again later: a new floor, the log end of that moment.
    one.store.end = 2000
    ha.acked[2] = 1500
    await _sync(one, {2})
    assert ha.required[-1] == ({2}, [1]) and _members(cluster.etcd) == [1]
    ha.acked[2] = 2000
    await _sync(one, {2})
    assert _members(cluster.etcd) == [1, 2]


async def test_a_master_whose_set_changed_under_it_steps_down(cluster: Cluster) -> None:
    one, two = cluster.group(1, 2)
    await _elect(one, two)
    await cluster.etcd.put(PREFIX + b"sss", b'{"epoch": 1, "members": [1, 2]}')  # not by it
    _ha(one).in_sync, _ha(one).acked = {2}, {2: 0}  # caught up: it holds the log end
    assert not await one.failover.sync_state_once()
    assert one.restarts == ["stepped down: its sync-state set changed under it"]
    assert _members(cluster.etcd) == [1, 2]  # the foreign write stands


# --- transfer -----------------------------------------------------------------------------
async def test_transfer_hands_the_group_to_the_named_in_sync_replica(cluster: Cluster) -> None:
    one, two, three = cluster.group(1, 2, 3)
    await _elect(one, two, three)
    await _sync(one, {2, 3})
    _ha(one).acked = {2: 500, 3: 400}
    one.store.end = 500
    for node in (two, three):  # their loops run: they see the master go and campaign
        await node.failover.start()

    async def catch_up() -> None:  # replica 3 acknowledges the rest while 1 waits for it
        await asyncio.sleep(0.05)
        assert one.failover.fence() == "this master is handing over to a replica (or stepping down)"
        assert _master(cluster.etcd) is not None  # the lease is revoked only after that
        _ha(one).acked[3] = 500

    new_id, term = (await asyncio.gather(one.failover.transfer(3), catch_up()))[0]
    assert (new_id, term) == (3, 2)
    assert three.failover.is_master and not two.failover.is_master
    assert one.restarts == ["handed over to replica 3"]
    assert cluster.etcd.value(PREFIX + b"transfer") is None  # the winner's transaction took it
    assert _epoch(cluster.etcd) == 2


async def test_transfer_to_any_picks_the_lowest_in_sync_replica(cluster: Cluster) -> None:
    one, two, three = cluster.group(1, 2, 3)
    await _elect(one, two, three)
    await _sync(one, {3})
    for node in (two, three):
        await node.failover.start()
    assert await one.failover.transfer(0) == (3, 2)  # 2 is not in the set: it could not be


async def test_transfer_is_refused_to_a_lagging_replica_and_by_a_non_master(
    cluster: Cluster,
) -> None:
    one, two, three = cluster.group(1, 2, 3)
    await _elect(one, two, three)
    await _sync(one, {2})
    with pytest.raises(FailedPreconditionError, match="not in the sync-state set"):
        await one.failover.transfer(3)
    with pytest.raises(FailedPreconditionError, match="not the master"):
        await two.failover.transfer(3)
    assert one.failover.is_master and one.failover.fence() == ""  # nothing happened
    assert cluster.etcd.value(PREFIX + b"transfer") is None


async def test_a_transfer_nobody_takes_restarts_the_master_anyway(cluster: Cluster) -> None:
    one, two = cluster.group(1, 2)
    await _elect(one, two)
    await _sync(one, {2})
    one.failover.timing = dataclasses.replace(TIMING, handover_wait_s=0.1)
    with pytest.raises(FailedPreconditionError, match="no replica took over"):
        await one.failover.transfer(2)  # 2's loop is not running: it never campaigns
    assert one.restarts == ["handed over, but no replica took over in time"]
    assert _master(cluster.etcd) is None


# --- fencing ------------------------------------------------------------------------------
async def test_an_old_master_fences_itself_and_its_term_is_lower(cluster: Cluster) -> None:
    one, two = cluster.group(1, 2)
    clock = cluster.clock
    elected_at = clock.now
    await _elect(one, two)
    await _sync(one, {2})
    fence = one.store.fence
    assert fence is not None and fence() == ""

    # Acknowledge nothing once TTL - FENCE_MARGIN_S passed since the lease was asked for.
    clock.now = elected_at + 2 - 1 + 0.01
    assert "not renewed in time" in fence()
    assert await one.failover.renew_once()  # renewed: acknowledging again
    assert fence() == ""

    # etcd goes away: renewals fail, the fence comes down at the last good one's TTL - margin.
    cluster.etcd.down = True
    clock.now += 0.5
    with pytest.raises(EtcdUnavailable):
        await one.failover.renew_once()
    assert fence() == ""
    clock.now += 0.6
    assert "not renewed in time" in fence()

    # etcd lets the lease go; the in-sync replica takes term 2.
    cluster.etcd.down = False
    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))
    await two.failover.poll_once()
    assert two.failover.is_master and two.failover.epoch == 2
    assert two.store.fence is not None and two.store.fence() == ""
    assert one.failover.epoch == 1 < two.failover.epoch  # the old master's term is lower
    assert one.store.promotions == [(1, True)] and two.store.promotions == [(2, True)]

    # The old master can change nothing of the new term: its set update is refused (its
    # master key is not the one it created) and it steps down; a renewal finds its lease gone.
    _ha(one).in_sync = set()
    assert not await one.failover.sync_state_once()
    assert _members(cluster.etcd) == [2]
    assert not await one.failover.renew_once()
    assert one.restarts == ["stepped down: its sync-state set changed under it"]
    assert "stepping down" in fence()

    # Restarted as a replica, it follows the new master and campaigns last next time.
    reborn = cluster.broker(1)
    await reborn.failover.poll_once()
    assert reborn.failover.master_id == 2 and reborn.store.redials == 1
    assert not reborn.failover.is_master


async def test_a_renewal_a_stalled_etcd_member_holds_is_sent_again_and_moves_the_fence(
    cluster: Cluster,
) -> None:
    """A member cut from its peers holds a renewal until its 2 s time-out; the fence comes down
    1 s after the next renewal is due. The renewal is sent again every ``renew_hedge_s`` and
    the first answer moves the fence, from that attempt's send time; the held ones are
    cancelled."""
    (one,) = cluster.group(1)
    one.failover.timing = dataclasses.replace(TIMING, renew_hedge_s=0.05)
    await one.failover.poll_once()
    fence = one.store.fence
    assert fence is not None and fence() == ""
    cluster.etcd.stalled_refreshes = 2  # two members in a row hold it; the third answers
    sent_before = cluster.etcd.refreshes
    cluster.clock.now += 0.5  # TTL 2 s, margin 1 s: the fence comes down at 1 s
    renewal = asyncio.ensure_future(one.failover.renew_once())
    await asyncio.sleep(0.005)
    cluster.clock.now += 0.4  # the attempt that answers goes out later than the first
    assert await asyncio.wait_for(renewal, 5)
    assert cluster.etcd.refreshes - sent_before == 3
    cluster.clock.now += 2 - 1 - 0.01  # TTL - margin from the answered attempt's send time...
    assert fence() == ""
    cluster.clock.now += 0.02  # ...not from the first attempt's (which would have fenced)
    assert "not renewed in time" in fence()
    assert [t for t in asyncio.all_tasks() if "refresh" in repr(t.get_coro())] == []


async def test_a_renewal_every_attempt_of_which_fails_raises_and_leaves_the_fence(
    cluster: Cluster,
) -> None:
    """Every attempt fails (etcd refuses): one goes out each ``renew_hedge_s`` until
    ``renew_give_up_s`` passed, then the renewal raises the last error."""
    (one,) = cluster.group(1)
    one.failover.timing = dataclasses.replace(TIMING, renew_hedge_s=0.02, renew_give_up_s=0.1)
    await one.failover.poll_once()
    cluster.etcd.down = True
    sent_before = cluster.etcd.refreshes
    with pytest.raises(EtcdUnavailable):
        await one.failover.renew_once()
    assert 4 <= cluster.etcd.refreshes - sent_before <= 6  # ~0.1 s / 0.02 s, none answered
    cluster.clock.now += 2 - 1 - 0.01
    assert one.store.fence is not None and one.store.fence() == ""


async def test_a_lease_etcd_ended_makes_the_master_step_down_at_its_renewal(
    cluster: Cluster,
) -> None:
    (one,) = cluster.group(1)
    await one.failover.poll_once()
    cluster.etcd.expire(cluster.etcd.lease_of(PREFIX + b"master"))
    assert not await one.failover.renew_once()
    assert one.restarts == ["stepped down: its lease expired"]


async def test_a_master_that_lost_its_term_stops_without_the_hand_over_wait(
    cluster: Cluster,
) -> None:
    """Its lease ended: the shutdown that follows (``restart``) must not wait for a lagging
    replica (HANDOVER_WAIT_S, 2 s here) before the NameServer registration ends."""
    one, two = cluster.group(1, 2)
    await _elect(one, two)
    await _sync(one, {2})
    one.store.end = 500  # written since: replica 2 lags behind it
    lease = cluster.etcd.lease_of(PREFIX + b"master")
    cluster.etcd.expire(lease)
    assert not await one.failover.renew_once()
    assert one.failover.term_lost and one.restarts == ["stepped down: its lease expired"]
    started = time.monotonic()
    await one.failover.stop()
    assert time.monotonic() - started < 0.5  # no hand-over wait
    assert not one.failover.is_master and lease not in cluster.etcd.live_leases()
