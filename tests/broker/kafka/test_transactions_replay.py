"""The transaction coordinator's replay (at start, and when a replica becomes master) and its
index, at the byte level against an in-process broker: what replay rebuilds equals what the
running coordinator held (states, open transactions and the LSO, aborted runs); a replica
answers NOT_COORDINATOR and writes nothing until it leads, then replays first; the index's
cutting of raw records around markers and aborted runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from wharf.broker.core.read import visible_reads
from wharf.broker.core.txn_index import CONTROL, TxnIndex, marker_value
from wharf.broker.frontends.kafka.env import KAFKA_REQUEST
from wharf.broker.frontends.kafka.records import TRANSACTIONAL, Record, encode_batch
from wharf.broker.frontends.kafka.txn.state import TxnState
from wharf.store.codec.records import encode_batch as encode_stored
from wharf.store.model import GetStatus, MessageInput

from tests.broker.kafka.kafka_helpers import KafkaClient, start_kafka
from tests.inproc import InProcFactory

PRODUCE, INIT_PID, ADD_PARTITIONS, END_TXN = 0, 22, 24, 26
TOPIC = "txr"


def _txn_batch(pid: int, epoch: int, sequence: int, *values: bytes) -> bytes:
    records = [Record(i, 5_000, None, v, []) for i, v in enumerate(values)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                        attributes=TRANSACTIONAL)  # fmt: skip


async def _init(client: KafkaClient, tid: str) -> tuple[int, int]:
    reply = await client.call(
        INIT_PID, 1, {"transactional_id": tid, "transaction_timeout_ms": 60_000}
    )
    assert reply["error_code"] == 0, reply
    return reply["producer_id"], reply["producer_epoch"]


async def _write(
    client: KafkaClient, tid: str, pid: int, epoch: int, seq: int, *values: bytes
) -> int:
    ids = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
    added = await client.call(
        ADD_PARTITIONS, 1, {**ids, "topics": [{"name": TOPIC, "partitions": [0]}]}
    )
    assert added["results"][0]["results"][0]["partition_error_code"] == 0, added
    reply = await client.call(PRODUCE, 7, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": 0, "records": _txn_batch(pid, epoch, seq, *values)}]}],
    })  # fmt: skip
    row = reply["responses"][0]["partition_responses"][0]
    assert row["error_code"] == 0, row
    return int(row["base_offset"])


async def _end(client: KafkaClient, tid: str, pid: int, epoch: int, commit: bool) -> int:
    body = {
        "transactional_id": tid,
        "producer_id": pid,
        "producer_epoch": epoch,
        "committed": commit,
    }
    return int((await client.call(END_TXN, 1, body))["error_code"])


def _snapshot(index: TxnIndex) -> Any:
    queue = index.queue(TOPIC, 0)
    assert queue is not None
    return dict(queue.open), list(queue.firsts), list(queue.lasts)


async def test_replay_rebuilds_states_open_transactions_and_aborted_runs(
    inproc_broker: InProcFactory,
) -> None:
    kafka = await start_kafka(inproc_broker)
    handlers = kafka.part.handlers
    assert handlers is not None
    coordinator = handlers.txn_coordinator
    index = coordinator.index
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    a = await _init(client, "ta")
    b = await _init(client, "tb")
    c = await _init(client, "tc")
    assert await _write(client, "ta", *a, 0, b"a0", b"a1") == 0  # committed
    assert await _write(client, "tb", *b, 0, b"b0") == 2  # aborted, after others' records
    assert await _write(client, "tc", *c, 0, b"c0", b"c1") == 3  # left open
    assert await _end(client, "ta", *a, True) == 0
    assert await _end(client, "tb", *b, False) == 0
    assert await _end(client, "tb", *b, False) == 0  # a retry: answered, nothing written
    # offsets: 0-1 a, 2 b, 3-4 c, 5 a's marker, 6 b's marker
    assert index.lso(TOPIC, 0, 7) == 3
    before = (_snapshot(index), dict(coordinator.metas))
    assert before[0] == ({c[0]: [[3, 4]]}, [2], [2])
    await coordinator.replay()  # what a restart or a new master does
    assert (_snapshot(index), dict(coordinator.metas)) == before
    assert coordinator.metas["tc"].state is TxnState.ONGOING
    # c goes on after the replay, then commits: the LSO is released
    assert await _write(client, "tc", *c, 2, b"c2") == 7
    assert await _end(client, "tc", *c, True) == 0
    assert index.lso(TOPIC, 0, 9) == 9 and index.queue(TOPIC, 0).open == {}
    await client.close()
    await kafka.close()


async def test_a_replica_coordinates_nothing_until_it_leads(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    handlers = kafka.part.handlers
    assert handlers is not None
    coordinator = handlers.txn_coordinator
    leads = False
    coordinator._leading = lambda: leads  # a replica, as controller mode's election says
    coordinator._replayed_leading = False
    client = await kafka.client()
    reply = await client.call(
        INIT_PID, 1, {"transactional_id": "r", "transaction_timeout_ms": 1000}
    )
    assert reply["error_code"] == 16  # NOT_COORDINATOR: the client looks for the coordinator again
    leads = True  # elected and promoted: the next tick replays, then it serves
    for _ in range(40):
        if coordinator._replayed_leading:
            break
        await asyncio.sleep(0.1)
    assert (await _init(client, "r"))[1] == 0
    await client.close()
    await kafka.close()


def test_index_cuts_raw_records_around_markers_and_aborted_runs() -> None:
    """split_raw on stored records (the store's codec): markers alone, aborted runs dropped
    for read_committed and kept for read_uncommitted, and None when nothing is cut."""
    messages = [MessageInput(f"v{i}".encode()) for i in range(6)]
    messages[4] = MessageInput(b"\x00", {CONTROL: marker_value(0, 7, 0)})
    raw = encode_stored("t", 0, 0, messages, 0, 1_000, "127.0.0.1:1", 1 << 20).data
    index = TxnIndex()
    assert index.split_raw("t", 0, raw[: _size_of(raw, 4)], 4) is None  # no marker, no run
    index.append("t", 0, 7, 1, 2)
    index.end("t", 0, 7, commit=False)  # offsets 1-2 aborted
    parts = index.split_raw("t", 0, raw, 6)
    assert [(n, marker) for _, n, marker in parts] == [
        (1, False),
        (1, False),
        (1, True),
        (1, False),
    ]
    kept = index.split_raw("t", 0, raw, 6, aborted=True)
    assert [(n, marker) for _, n, marker in kept] == [(4, False), (1, True), (1, False)]
    assert index.skip_aborted("t", 0, 1) == 3 and index.skip_aborted("t", 0, 3) == 3


def _size_of(raw: bytes, count: int) -> int:
    pos = 0
    for _ in range(count):
        pos += int.from_bytes(raw[pos : pos + 4], "big")
    return pos


def test_no_client_sends_a_marker() -> None:
    """The marker's property is the coordinator's: a send carrying it is refused, and a
    stored value it did not write reads as an abort of no producer instead of failing."""
    import pytest
    from wharf.broker.core.errors import InvalidSend
    from wharf.broker.core.txn_index import parse_marker
    from wharf.broker.core.validate import check_properties

    with pytest.raises(InvalidSend):
        check_properties({CONTROL: "1:7:0:0"})
    assert parse_marker("not a marker") == (0, -1, -1, 0)


async def test_offsets_of_an_open_transaction_are_unstable(inproc_broker: InProcFactory) -> None:
    """KIP-447: OffsetFetch v7 with require_stable answers UNSTABLE_OFFSET_COMMIT (88) for a
    partition an open transaction holds an offset for; the offset applies on commit only."""
    kafka = await start_kafka(inproc_broker)
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    pid, epoch = await _init(client, "to")
    ids = {"transactional_id": "to", "producer_id": pid, "producer_epoch": epoch}
    assert (await client.call(25, 1, {**ids, "group_id": "g"}))["error_code"] == 0
    commit = {**ids, "group_id": "g", "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}]}  # fmt: skip
    reply = await client.call(28, 2, commit)
    assert reply["topics"][0]["partitions"][0]["error_code"] == 0

    async def fetched(version: int, stable: bool) -> tuple[int, int]:
        body = {"group_id": "g", "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                "require_stable": stable}  # fmt: skip
        row = (await client.call(9, version, body))["topics"][0]["partitions"][0]
        return row["error_code"], row["committed_offset"]

    assert await fetched(7, True) == (88, -1)
    assert await fetched(5, False) == (0, -1)  # not applied while open
    assert await _end(client, "to", pid, epoch, True) == 0
    assert await fetched(7, True) == (0, 5)
    await client.close()
    await kafka.close()


async def test_operators_describe_and_list_transactions(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    pid, epoch = await _init(client, "ops")
    await _write(client, "ops", pid, epoch, 0, b"x")
    described = await client.call(65, 0, {"transactional_ids": ["ops", "nobody"]})
    ops, nobody = described["transaction_states"]
    assert (ops["error_code"], ops["transaction_state"], ops["producer_id"]) == (0, "Ongoing", pid)
    assert ops["topics"] == [{"topic": TOPIC, "partitions": [0]}]
    assert ops["transaction_timeout_ms"] == 60_000 and ops["transaction_start_time_ms"] > 0
    assert nobody["error_code"] == 105  # TRANSACTIONAL_ID_NOT_FOUND
    listed = await client.call(66, 0, {"state_filters": ["Ongoing"], "producer_id_filters": []})
    assert [(t["transactional_id"], t["producer_id"]) for t in listed["transaction_states"]] == [
        ("ops", pid)
    ]
    assert await _end(client, "ops", pid, epoch, False) == 0
    listed = await client.call(
        66, 0, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": []}
    )
    assert (listed["transaction_states"], listed["unknown_state_filters"]) == ([], ["Bogus"])
    await client.close()
    await kafka.close()


async def test_a_prepared_end_found_at_replay_is_finished(inproc_broker: InProcFactory) -> None:
    """A crash after PREPARE_COMMIT was written, before the markers: the replay holds the
    LSO, the next tick writes the markers and completes, and the records become visible."""
    from wharf.broker.frontends.kafka.txn import state

    kafka = await start_kafka(inproc_broker)
    handlers = kafka.part.handlers
    assert handlers is not None
    coordinator = handlers.txn_coordinator
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    pid, epoch = await _init(client, "crash")
    assert await _write(client, "crash", pid, epoch, 0, b"p0", b"p1") == 0
    prepared = state.end_txn(coordinator.metas["crash"], pid, epoch, True, 1)
    assert prepared is not None
    await coordinator.log.write(prepared)  # ... and the broker dies here
    await coordinator.replay()
    assert coordinator.metas["crash"].state is TxnState.PREPARE_COMMIT
    assert coordinator.index.lso(TOPIC, 0, 2) == 0  # still held
    await coordinator.tick(10**13)
    assert coordinator.metas["crash"].state is TxnState.COMPLETE_COMMIT
    assert coordinator.index.lso(TOPIC, 0, 3) == 3  # the marker at 2 released it
    assert await _end(client, "crash", pid, epoch, True) == 0  # the client's retry: done
    await client.close()
    await kafka.close()


async def test_an_abort_after_an_epoch_overflow_survives_a_crash(
    inproc_broker: InProcFactory,
) -> None:
    """A transaction open at epoch 32767 times out: its abort takes a new producer id (Kafka's
    overflow rule) while its records carry the old one. A crash after PREPARE_ABORT was
    written: the replay must still hold the LSO at those records and the tick must hide them
    (before, the replay looked for the new id's records: nothing held, the aborted records
    read as committed)."""
    from dataclasses import replace

    from wharf.broker.frontends.kafka.txn import state

    kafka = await start_kafka(inproc_broker)
    handlers = kafka.part.handlers
    assert handlers is not None
    coordinator = handlers.txn_coordinator
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    pid, epoch = await _init(client, "ovf")
    assert await _write(client, "ovf", pid, epoch, 0, b"x0", b"x1") == 0
    old = replace(coordinator.metas["ovf"], producer_epoch=state.MAX_EPOCH)
    aborted = state.expired(old, 10**13, 987_654)
    assert aborted is not None and aborted.producer_id == 987_654
    assert aborted.last_producer_id == pid
    await coordinator.log.write(aborted)  # ... and the broker dies here
    await coordinator.replay()
    assert coordinator.index.lso(TOPIC, 0, 2) == 0  # the old id's records still held
    await coordinator.tick(10**13)
    assert coordinator.metas["ovf"].state is TxnState.COMPLETE_ABORT
    assert coordinator.index.lso(TOPIC, 0, 3) == 3
    assert coordinator.index.skip_aborted(TOPIC, 0, 0) == 2  # hidden from every reader
    await coordinator.replay()  # and again after a restart (the aborted-runs record)
    assert coordinator.index.skip_aborted(TOPIC, 0, 0) == 2
    await client.close()
    await kafka.close()


async def test_markers_stay_hidden_after_a_replay(inproc_broker: InProcFactory) -> None:
    """A partition that only ever saw committed transactions has nothing open and no aborted
    run, but its markers must stay hidden from the other protocols after a restart: the
    replay marks every partition the log names."""
    from wharf.store.model import TagFilter

    kafka = await start_kafka(inproc_broker)
    handlers = kafka.part.handlers
    assert handlers is not None
    coordinator = handlers.txn_coordinator
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    pid, epoch = await _init(client, "only-commits")
    assert await _write(client, "only-commits", pid, epoch, 0, b"c0") == 0
    assert await _end(client, "only-commits", pid, epoch, True) == 0  # its marker at 1
    coordinator.index.clear()  # what a restarted broker starts from
    await coordinator.replay()
    port = kafka.controller.ctx.port
    await port.wait_own_writes(KAFKA_REQUEST)
    read = await port.read.read_waiting(TOPIC, 0, 0, 10, TagFilter(frozenset(), frozenset()), 0)
    assert [m.body for m in read.result.messages] == [b"c0"]
    await client.close()
    await kafka.close()


def test_aborted_runs_below_the_log_start_are_let_go() -> None:
    index = TxnIndex()
    for pid, first in ((1, 0), (2, 10), (3, 20)):
        index.append("t", 0, pid, first, 5)
        index.end("t", 0, pid, commit=False)
    assert index.prune(lambda topic, queue: 12) == 1  # 0-4 gone; 10-14 still partly there
    queue = index.queue("t", 0)
    assert queue is not None and (queue.firsts, queue.lasts) == ([10, 20], [14, 24])
    assert index.skip_aborted("t", 0, 10) == 15


async def test_a_replay_starts_at_the_last_checkpoint(inproc_broker: InProcFactory) -> None:
    """A checkpoint writes every live id again and names where that began: a replay reads
    from there (not the whole log) and rebuilds the same states, open transactions, aborted
    runs and touched partitions."""
    kafka = await start_kafka(inproc_broker)
    handlers = kafka.part.handlers
    assert handlers is not None
    coordinator = handlers.txn_coordinator
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    ids = {t: await _init(client, t) for t in ("k1", "k2", "k3")}
    for round_ in range(5):  # many records before the checkpoint
        for tid, (pid, epoch) in ids.items():
            await _write(client, tid, pid, epoch, round_, f"{tid}-{round_}".encode())
            assert await _end(client, tid, pid, epoch, tid != "k2") == 0
    before_checkpoint = coordinator.log.written
    await coordinator.checkpoint()
    pid, epoch = ids["k3"]
    await _write(client, "k3", pid, epoch, 5, b"open")  # open across the replay
    expected = (_snapshot(coordinator.index), dict(coordinator.metas), set(coordinator.touched))
    # A replay reads the log as dispatched (at start and on leading everything is): acks
    # precede the dispatch, which lagged under load (the open batch at 30 unseen).
    assert await kafka.controller.ctx.store.wait_dispatched(5)
    await coordinator.replay()
    got = (_snapshot(coordinator.index), dict(coordinator.metas), set(coordinator.touched))
    assert got == expected
    # read: the 3 rewritten ids, then k3's AddPartitions; not the ~30 records before
    assert coordinator.log.written == 4 < before_checkpoint
    await client.close()
    await kafka.close()


async def test_a_replay_on_leading_shows_no_half_built_index(
    inproc_broker: InProcFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica just promoted replays while its other protocols already serve: until the
    replay's index is adopted whole, every read through the index answers nothing new (not
    the records of an index being cleared and refilled: markers and open transactions'
    records showed); the old index is never cleared under a reader."""
    kafka = await start_kafka(inproc_broker)
    handlers = kafka.part.handlers
    assert handlers is not None
    coordinator = handlers.txn_coordinator
    index = coordinator.index
    store = kafka.controller.ctx.store
    client = await kafka.client()
    await client.call(3, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    a = await _init(client, "ta")
    assert await _write(client, "ta", *a, 0, b"a0") == 0
    assert await _end(client, "ta", *a, True) == 0  # its marker at 1
    await coordinator.port.wait_own_writes(KAFKA_REQUEST)  # dispatched: readable
    read = visible_reads(index, store.get_messages)
    assert [m.body for m in read(TOPIC, 0, 0, 32, None).messages] == [b"a0"]
    gate = asyncio.Event()
    real = coordinator.log.replay

    async def slow() -> Any:
        await gate.wait()
        return await real()

    monkeypatch.setattr(coordinator.log, "replay", slow)
    replay = asyncio.create_task(coordinator.replay())
    await asyncio.sleep(0.05)
    assert index.loading and index.queue(TOPIC, 0) is not None  # not cleared meanwhile
    assert read(TOPIC, 0, 0, 32, None).status is GetStatus.OFFSET_OVERFLOW_ONE  # nothing yet
    gate.set()
    await replay
    assert not index.loading
    assert [m.body for m in read(TOPIC, 0, 0, 32, None).messages] == [b"a0"]
    await client.close()
    await kafka.close()
