"""Replication inside one event loop: a master store and a SLAVE store over 127.0.0.1 (frames,
handshake, byte copies, SYNC_MASTER waits and the confirm offset), plus the frame codec and
the ack waiters on their own."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wharf.store.errors import NotMasterError, ReplicationError
from wharf.store.ha import ReplicaLink, frames, truncation
from wharf.store.ha.acks import ReplicaAcks
from wharf.store.ha.master import Replica, _whole_records
from wharf.store.log import mapped_file
from wharf.store.message_store import MessageStore
from wharf.store.model import PutStatus

from tests.store.helpers import msg, small_config, until


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, MessageStore]]:
    master = MessageStore(
        small_config(
            tmp_path / "m",
            broker_role="SYNC_MASTER",
            ha_listen_port=0,
            slave_timeout=500,
            ha_max_time_slave_not_catchup=1500,
        )
    )
    await master.start()
    assert master.ha_master is not None
    slave = MessageStore(
        small_config(
            tmp_path / "s",
            broker_role="SLAVE",
            ha_master_address=f"127.0.0.1:{master.ha_master.port}",
        )
    )
    await slave.start()
    yield master, slave
    await slave.shutdown()
    await master.shutdown()


def _segment_bytes(store: MessageStore) -> dict[str, bytes]:
    """Every segment with data (a preallocated next segment is all zeros on either side)."""
    folder = store.insides.paths.commit_log_dir
    segments = {}
    for name in sorted(os.listdir(folder)):
        try:
            data = (folder / name).read_bytes()
        except FileNotFoundError:  # a preallocation (temporary name) renamed meanwhile
            continue
        if name.isdigit() and data.count(0) != len(data):
            segments[name] = data
    return segments


def _no_proof(signed: bytes) -> bytes:
    return bytes(32)


class FakeReplica:
    """A replica that reports only when told to: the master's view of a paused slave."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.end = 0
        self.task = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, port: int, segment_size: int) -> FakeReplica:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        kind, _ = await frames.read_frame(reader)
        assert kind == frames.FrameType.CHALLENGE
        writer.write(frames.encode_hello(frames.Hello(segment_size, 0, 1, "C", "b"), _no_proof))
        kind, _ = await frames.read_frame(reader)
        assert kind == frames.FrameType.WELCOME
        return cls(reader, writer)

    async def _read(self) -> None:
        while True:
            kind, payload = await frames.read_frame(self.reader)
            if kind == frames.FrameType.DATA:
                offset, _, data = frames.decode_data(memoryview(payload))
                self.end = max(self.end, offset + len(data))

    async def report(self, end: int | None = None) -> None:
        """Report ``end`` (default: everything received) as written and flushed."""
        end = self.end if end is None else end
        self.writer.write(frames.encode_report(end, end))
        await self.writer.drain()

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()


async def test_sync_master_waits_for_the_replica_and_caps_what_consumers_see(
    tmp_path: Path,
) -> None:
    master = MessageStore(
        small_config(tmp_path / "m", broker_role="SYNC_MASTER", ha_listen_port=0,
                     slave_timeout=300, ha_max_time_slave_not_catchup=1500)
    )  # fmt: skip
    await master.start()
    ha = master.ha_master
    assert ha is not None
    replica = await FakeReplica.connect(ha.port, master.insides.commit_log.file_size)
    try:
        await until(lambda: len(ha.replicas()) == 1)
        put = asyncio.ensure_future(master.put("t", 0, [msg("a")]))
        await until(lambda: replica.end > 0)
        assert not put.done()  # stored, flushed: still waiting for the replica
        await replica.report()
        assert (await put).status is PutStatus.PUT_OK
        assert ha.in_sync(ha.replicas()[0])
        await master.wait_dispatched(1.0)
        assert master.get_max_offset("t", 0) == 1
        # The replica stops reporting: stored, not acknowledged ...
        second = await master.put("t", 0, [msg("b")])
        assert second.status is PutStatus.FLUSH_SLAVE_TIMEOUT
        await master.wait_dispatched(0.2)
        # ... and hidden from consumers while the in-sync replica lacks it,
        assert master.get_max_offset("t", 0) == 1
        # until it has not caught up for haMaxTimeSlaveNotCatchup and leaves the in-sync set.
        await until(lambda: master.get_max_offset("t", 0) == 2, within_s=5)
        assert not ha.in_sync(ha.replicas()[0])
    finally:
        await replica.close()
        await master.shutdown()


async def test_the_slave_log_is_a_byte_copy_across_segments(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    assert master.ha_master is not None
    await until(lambda: len(master.ha_master.replicas()) == 1)  # type: ignore[union-attr]
    for i in range(200):  # ~200 KiB over 64 KiB segments: rolls with blank tails
        result = await master.put("t", i % 2, [msg(b"x" * 1000, keys=f"k{i}")])
        assert result.status is PutStatus.PUT_OK
    end = master.insides.commit_log.max_offset
    await until(lambda: slave.insides.commit_log.max_offset == end)
    await slave.wait_dispatched(2.0)
    assert _segment_bytes(slave) == _segment_bytes(master)
    assert len(_segment_bytes(master)) > 2
    assert slave.get_max_offset("t", 0) == 100  # its own dispatch built the queues
    assert [m.body for m in slave.query_messages("t", "k7", 10, 0, 2**62)] == [b"x" * 1000]
    with pytest.raises(NotMasterError):
        await slave.put("t", 0, [msg("refused")])
    with pytest.raises(NotMasterError):
        _ = slave.pop


@pytest.mark.parametrize(
    ("flush", "replica_flush"),
    [("SYNC_FLUSH", "SYNC_FLUSH"), ("SYNC_FLUSH", "ASYNC_FLUSH"), ("ASYNC_FLUSH", "SYNC_FLUSH")],
)
async def test_a_sync_flush_master_acknowledges_only_what_the_replica_has_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: str, replica_flush: str
) -> None:
    """A SYNC_FLUSH group's acknowledgement survives a power cut of the replica (the fault
    campaign, seed 36: acknowledged from the replica's page cache, cut, elected, lost),
    whatever the replica's own flushDiskType. The replica's syncs are made slower than the
    master's, so an ack on its written end comes before its sync; an ASYNC_FLUSH group keeps
    acknowledging on the written end."""
    replica_root = str(tmp_path / "s")
    real = mapped_file.fdatasync

    def slow_on_the_replica(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(replica_root):
            time.sleep(0.02)
        real(fd)

    monkeypatch.setattr(mapped_file, "fdatasync", slow_on_the_replica)
    master = MessageStore(
        small_config(tmp_path / "m", broker_role="SYNC_MASTER", ha_listen_port=0,
                     flush_disk_type=flush, slave_timeout=3000)
    )  # fmt: skip
    await master.start()
    assert master.ha_master is not None
    replica = MessageStore(
        small_config(replica_root, broker_role="SLAVE", flush_disk_type=replica_flush,
                     ha_master_address=f"127.0.0.1:{master.ha_master.port}")
    )  # fmt: skip
    await replica.start()
    try:
        await until(lambda: len(master.ha_master.replicas()) == 1)  # type: ignore[union-attr]
        behind = 0
        for i in range(20):
            result = await master.put("t", 0, [msg(f"m{i}")])
            assert result.status is PutStatus.PUT_OK
            behind += replica.insides.commit_log.flushed_offset < result.append.end_offset
        if flush == "SYNC_FLUSH":
            assert behind == 0
        else:  # acknowledged before the replica's slower sync: the written end counts
            assert behind > 10
    finally:
        await replica.shutdown()
        await master.shutdown()


async def test_without_a_replica_a_sync_master_says_slave_not_available(tmp_path: Path) -> None:
    master = MessageStore(small_config(tmp_path / "m", broker_role="SYNC_MASTER", ha_listen_port=0))
    await master.start()
    try:
        result = await master.put("t", 0, [msg("alone")])
        assert result.status is PutStatus.SLAVE_NOT_AVAILABLE  # stored, not replicated
        await master.wait_dispatched(1.0)
        assert master.get_max_offset("t", 0) == 1  # no in-sync replica holds consumers back
    finally:
        await master.shutdown()


async def test_a_replica_with_another_segment_size_is_refused(tmp_path: Path) -> None:
    master = MessageStore(small_config(tmp_path / "m", ha_listen_port=0))
    await master.start()
    assert master.ha_master is not None
    other = small_config(
        tmp_path / "s",
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{master.ha_master.port}",
        mapped_file_size_commit_log=128 * 1024,
    )
    slave = MessageStore(other)
    await slave.start()
    try:
        ha_slave = slave.role.ha_slave
        assert ha_slave is not None
        await until(lambda: "segment sizes differ" in ha_slave.last_error)
        assert master.ha_master.refused == 1 and not master.ha_master.replicas()
    finally:
        await slave.shutdown()
        await master.shutdown()


async def test_append_raw_refuses_gaps_and_starts_an_empty_replica_at_a_segment(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path / "s", broker_role="SLAVE",
                                      ha_master_address="127.0.0.1:1"))  # fmt: skip
    await store.start()
    try:
        log = store.insides.commit_log
        size = log.file_size
        with pytest.raises(ReplicationError):
            log.append_raw(100, b"x" * 10, 0)  # not a segment start
        assert log.append_raw(2 * size, b"\1" * 16, 0) == 2 * size + 16
        with pytest.raises(ReplicationError):
            log.append_raw(2 * size + 20, b"x", 0)  # a gap
        assert log.min_offset == 2 * size and log.max_offset == 2 * size + 16
    finally:
        await store.shutdown()


def test_frames_round_trip_and_refuse_strangers() -> None:
    hello = frames.Hello(1 << 30, 12345, 2, "C", "broker-a", ((1, 0),), b"n" * 16, "repl")
    encoded = frames.encode_hello(hello, lambda signed: bytes(reversed(signed[-32:])))
    decoded, signed, proof = frames.decode_hello(encoded[5:])
    assert decoded == hello
    assert signed == encoded[5:-32] and proof == bytes(reversed(signed[-32:]))
    with pytest.raises(frames.ProtocolError, match="version 1"):  # the unauthenticated handshake
        frames.decode_hello(encoded[5:9] + b"\x00\x01" + encoded[11:])
    with pytest.raises(frames.ProtocolError):
        frames.decode_hello(b"HTTP" + encoded[9:])
    welcome = frames.Welcome(0, 10, 5, 3, ((1, 0),))
    decoded_welcome, _, proof = frames.decode_welcome(frames.encode_welcome(welcome, _no_proof)[5:])
    assert decoded_welcome == welcome and proof == bytes(32)
    assert frames.decode_report(frames.encode_report(7, 6, 3)[5:]) == (7, 6, 3)
    assert frames.decode_report(frames.encode_report(7, 6)[5:21]) == (7, 6, None)  # older
    header = frames.data_header(100, 90, 3)
    offset, confirm, data = frames.decode_data(memoryview(header[5:] + b"abc"))
    assert (offset, confirm, bytes(data)) == (100, 90, b"abc")


async def test_read_frame_refuses_oversized_and_unknown_frames() -> None:
    for raw in (b"\xff\xff\xff\xff\x04", b"\x00\x00\x00\x01\x63"):
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        with pytest.raises(frames.ProtocolError):
            await frames.read_frame(reader)


def test_whole_records_cuts_at_a_record_boundary() -> None:
    record = (12).to_bytes(4, "big") + b"\0" * 8
    assert _whole_records(record * 3 + record[:5]) == 36
    assert _whole_records(record[:5]) == 0


async def test_replica_acks_resolve_in_order_and_time_out() -> None:
    acks = ReplicaAcks(0.05)
    early, late = acks.wait(10), acks.wait(20)
    acks.advance(15)
    assert early.done() and early.result() is True and not late.done()
    assert await late is False and acks.timeouts == 1
    assert await acks.wait(5) is True  # below the watermark: at once


async def test_a_truncation_lowers_the_timer_and_transaction_checkpoints(tmp_path: Path) -> None:
    """A replica's cut at T also lowers the P of the timer's and the transactions' ledgers: a
    start-up walk from a P past T would land inside the records replicated there since (a
    promoted former master failed its start with CorruptRecordError)."""
    config = small_config(tmp_path, ha_listen_port=0)
    store = MessageStore(config)
    await store.start()
    cut = (await store.put("orders", 0, [msg("kept")])).append.end_offset
    await store.put("orders", 0, [msg(f"unacknowledged {i}") for i in range(3)])
    await store.timer.checkpoint()
    await store.shutdown()  # both ledgers' checkpoints now say P = the log end, past the cut
    paths = store.insides.paths
    ledgers = (paths.timer_checkpoint_file, paths.transaction_checkpoint_file)
    for path in ledgers:
        assert json.loads(path.read_text())["logOffset"] > cut
    truncation.request_blocking(paths, cut)
    replica = MessageStore(config, replication=ReplicaLink(controller=True))
    await replica.start()
    try:
        assert replica.commit_log_end() == cut
        for path in ledgers:
            assert json.loads(path.read_text())["logOffset"] == cut
        await replica.role.promote(2, sync_master=False)  # loads both ledgers
        assert (await replica.put("orders", 0, [msg("after")])).status is PutStatus.PUT_OK
    finally:
        await replica.shutdown()


async def _store_with_an_undispatched_tail(tmp_path: Path) -> tuple[object, int]:
    """A store whose log holds "seen" (dispatched) and three records past what was dispatched
    (the reput stopped before them), as a master's unacknowledged writes are at a crash."""
    config = small_config(tmp_path, ha_listen_port=0)
    store = MessageStore(config)
    await store.start()
    await store.put("orders", 0, [msg("seen")])
    assert await store.wait_dispatched()
    await store.insides.reput_service.stop()
    await store.put("orders", 0, [msg(f"tail {i}") for i in range(3)])
    await store.shutdown()
    return config, 1


async def test_a_controller_mode_store_holds_its_undispatched_tail_until_a_master_agrees(
    tmp_path: Path,
) -> None:
    """A controller-mode store starts as a replica: what its log holds past what it had
    dispatched (a deposed master's writes no replica may have) stays out of its queues, in
    recovery and after, until a master's handshake finds the log a prefix of its own, and then
    only as far as that master's committed offset goes (issue 63). A store with static roles
    dispatches it at once, as before."""
    config, seen = await _store_with_an_undispatched_tail(tmp_path)
    replica = MessageStore(config, replication=ReplicaLink(controller=True))
    await replica.start()
    try:
        assert replica.recovered.redispatched_messages == 0
        await asyncio.sleep(0.3)  # the reput runs, held
        assert replica.get_max_offset("orders", 0) == seen
        link = replica.role.ha_slave
        assert link is not None
        # An agreeing master whose committed offset ends at "seen": the tail stays hidden.
        link.confirm_offset = replica.insides.reput_service.reput_from_offset
        replica.role._agreed()  # what HASlave calls after an agreeing handshake
        await asyncio.sleep(0.3)
        assert replica.get_max_offset("orders", 0) == seen
        link.confirm_offset = replica.commit_log_end()  # the master says all of it is committed
        replica.insides.reput_service.wakeup()
        assert await replica.wait_dispatched()
        assert replica.get_max_offset("orders", 0) == seen + 3
    finally:
        await replica.shutdown()


async def test_a_promotion_lifts_the_hold_on_the_tail(tmp_path: Path) -> None:
    config, seen = await _store_with_an_undispatched_tail(tmp_path)
    replica = MessageStore(config, replication=ReplicaLink(controller=True))
    await replica.start()
    try:
        assert replica.get_max_offset("orders", 0) == seen
        await replica.role.promote(2, sync_master=False)
        assert await replica.wait_dispatched()
        assert replica.get_max_offset("orders", 0) == seen + 3
    finally:
        await replica.shutdown()
    static = MessageStore(config)  # static roles: recovery dispatches the tail itself
    await static.start()
    try:
        assert static.get_max_offset("orders", 0) == seen + 3
    finally:
        await static.shutdown()


async def test_a_replica_reads_only_what_its_master_has_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Committed reads (issue 63, the fault campaign's seed 7719): a record the replica has
    copied and synced but the master has not yet made durable is not readable on the replica
    (a power cut of the master, re-elected, would reuse its offset); once the master's sync
    returns, the replica hears of the committed offset at once (not at the 10 s heartbeat)
    and serves it."""
    master_root = str(tmp_path / "m")
    hold = threading.Event()
    released = threading.Event()
    real = mapped_file.fdatasync

    def held_on_the_master(fd: int) -> None:
        if hold.is_set() and os.readlink(f"/proc/self/fd/{fd}").startswith(master_root):
            released.wait(10)
        real(fd)

    monkeypatch.setattr(mapped_file, "fdatasync", held_on_the_master)
    master = MessageStore(
        small_config(master_root, broker_role="SYNC_MASTER", ha_listen_port=0,
                     flush_disk_type="SYNC_FLUSH", slave_timeout=10_000,
                     ha_send_heartbeat_interval=10_000)
    )  # fmt: skip
    await master.start()
    assert master.ha_master is not None
    replica = MessageStore(
        small_config(tmp_path / "s", broker_role="SLAVE", flush_disk_type="SYNC_FLUSH",
                     ha_master_address=f"127.0.0.1:{master.ha_master.port}",
                     ha_send_heartbeat_interval=10_000)
    )  # fmt: skip
    await replica.start()
    try:
        await until(lambda: len(master.ha_master.replicas()) == 1)  # type: ignore[union-attr]
        assert (await master.put("t", 0, [msg("first")])).status is PutStatus.PUT_OK
        await until(lambda: replica.get_max_offset("t", 0) == 1, within_s=3)
        hold.set()
        put = asyncio.ensure_future(master.put("t", 0, [msg("second")]))
        end = master.commit_log_end()
        await until(lambda: replica.insides.commit_log.flushed_offset >= end)
        await asyncio.sleep(0.3)  # the replica's reput runs
        assert not put.done()
        assert master.get_max_offset("t", 0) == 1
        assert replica.get_max_offset("t", 0) == 1  # copied, synced, not committed
        assert replica.get_messages("t", 0, 1, 8).messages == []
        released.set()
        assert (await put).status is PutStatus.PUT_OK
        await until(lambda: replica.get_max_offset("t", 0) == 2, within_s=3)
        assert [m.body for m in replica.get_messages("t", 0, 0, 8).messages] == [
            b"first",
            b"second",
        ]
    finally:
        released.set()
        await replica.shutdown()
        await master.shutdown()


def test_the_in_sync_rule_judges_the_acked_offset_against_the_log_end_not_traffic() -> None:
    """RocketMQ 5's rule (haMaxTimeSlaveNotCatchup, 15 s): a replica is caught up whenever its
    acknowledged offset reaches the master's log end, so an idle group's replica, reporting
    the end every haSendHeartbeatInterval (5 s), stays in sync for as long as the group is
    idle; one whose acks stay below the end drops out 15 s after it last held it. On fake
    monotonic seconds: 20 s without a write, more than the window."""
    window = 15.0
    caught_up = Replica(1, "a", acked=1000)
    lagging = Replica(2, "b", acked=1000)
    caught_up.note_acked(1000, 100.0)
    lagging.note_acked(1000, 100.0)
    assert caught_up.in_sync(100.0, window) and lagging.in_sync(100.0, window)
    lagging.target, lagging.target_at = 1200, 101.0  # one more record, sent at 101 s ...
    lagging.note_acked(1200, 101.0)  # ... never acknowledged: it reports 1000 from then on
    for now in (105.0, 110.0, 115.0, 120.0):  # no write; every replica reports every 5 s
        caught_up.note_acked(1000, now)
    for now in (105.0, 110.0, 115.0):
        lagging.note_acked(1200, now)
    assert caught_up.in_sync(120.0, window)  # idle 20 s: still in sync
    assert lagging.in_sync(115.0, window)  # held the end at 100 s: in for the window ...
    assert not lagging.in_sync(115.1, window)  # ... and out after it
    # Under load the end moves past every report: the probe says when the replica held the
    # end of the moment a frame reached it (sent at 116 s, acknowledged at 117 s).
    lagging.acked = 1200
    lagging.target, lagging.target_at = 1200, 116.0
    lagging.note_acked(1500, 117.0)
    assert lagging.caught_up_at == 116.0 and lagging.target == -1
    assert lagging.in_sync(131.0, window) and not lagging.in_sync(131.1, window)


async def test_an_idle_caught_up_replica_stays_in_sync_and_a_lagging_one_drops_out(
    tmp_path: Path,
) -> None:
    """The same with a master and a real replica over TCP, on a 1 s window and 0.2 s reports:
    3 s without a write (three windows) and the replica is still in sync (a controller-mode
    master would keep it in the sync-state set, so it could be elected); a replica whose
    reports stay behind the log end leaves the set within the window."""
    master = MessageStore(
        small_config(tmp_path / "m", broker_role="SYNC_MASTER", ha_listen_port=0,
                     slave_timeout=2000, ha_max_time_slave_not_catchup=1000,
                     ha_send_heartbeat_interval=200)
    )  # fmt: skip
    await master.start()
    ha = master.ha_master
    assert ha is not None
    replica = MessageStore(
        small_config(tmp_path / "s", broker_role="SLAVE", ha_send_heartbeat_interval=200,
                     ha_master_address=f"127.0.0.1:{ha.port}")
    )  # fmt: skip
    await replica.start()
    lagging = await FakeReplica.connect(ha.port, master.insides.commit_log.file_size)
    try:
        await until(lambda: len(ha.replicas()) == 2)
        assert (await master.put("t", 0, [msg("first")])).status is PutStatus.PUT_OK
        first_end = master.commit_log_end()
        await until(lambda: lagging.end == first_end)
        await lagging.report()
        await until(lambda: ha.in_sync_ids() == {0, 1})
        # One more record: the real replica acknowledges it, the lagging one never does.
        assert (await master.put("t", 0, [msg("second")])).status is PutStatus.PUT_OK
        for _ in range(15):  # 3 s without a write; the lagging one reports its old end
            await asyncio.sleep(0.2)
            await lagging.report(first_end)
        assert ha.in_sync_ids() == {0}
        by_id = {r.broker_id: r for r in ha.replicas()}
        assert ha.in_sync(by_id[0]) and not ha.in_sync(by_id[1])
        assert ha.confirm_offset() == master.commit_log_end()
    finally:
        await lagging.close()
        await replica.shutdown()
        await master.shutdown()
