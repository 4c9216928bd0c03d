"""Kafka transactions over two broker groups (a ``wharf-namesrv``, broker-a and broker-b of
cluster C, masters only, each a Kafka leader for its own queues): the topic ``orders`` has 2
queues on each group, partitions 0-1 on broker-a, 2-3 on broker-b; the transactional id is
one broker-a coordinates, so broker-b's partitions get their markers by WriteTxnMarkers.

- confluent-kafka's transactional producer writes to all 4 partitions, commits and aborts
  interleaved; read_committed from both groups sees the committed records only,
  read_uncommitted all of them.
- broker-b is killed (kill -9) with the transaction's records stored, then the commit
  decided (PREPARE_COMMIT, broker-b's markers pending), then broker-a killed -9 in that
  state; both started again: the replayed coordinator sends the markers, the transaction is
  CompleteCommit, read_committed shows it whole on both groups and an aborted one nowhere.
- read-process-write with send_offsets_to_transaction whose consumer group another broker
  coordinates than the transactional id (and, for contrast, the same one), offsets of
  partitions on both groups: pending at the group's coordinator (require_stable OffsetFetch
  answers UNSTABLE_OFFSET_COMMIT), applied by a commit, dropped by an abort and by the abort
  that fences the producer; and kept pending across a kill -9 of the group's coordinator,
  then applied by the commit after its restart.
- KIP-890's verification at the partition leader (raw requests): a transactional batch to
  broker-b's partition that was never added to the transaction (or comes after it ended) is
  refused INVALID_TXN_STATE and holds no LSO; one of an unknown transactional id
  INVALID_PRODUCER_ID_MAPPING; with the coordinator killed, NOT_ENOUGH_REPLICAS (retriable,
  nothing admitted), then admitted once it is back; an added one held until its commit.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from wharf.broker.frontends.kafka.cluster import coordinator_of, master_node_id
from wharf.broker.frontends.kafka.records import TRANSACTIONAL, Record, encode_batch
from wharf.client.admin import Admin

from tests.broker.kafka.kafka_helpers import KafkaClient, kafka_groups
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow


def _master(brokers: dict[str, BrokerProcess], name: str) -> int:
    """The node id of group ``name``'s master (its Kafka address's: cluster.py)."""
    return master_node_id(name, brokers[name].kafka_endpoint)


TOPIC = "orders"
OUT = "processed"  # read-process-write's output: 1 queue on each group
PARTITIONS = 4
UNSTABLE_OFFSET_COMMIT = 88
SILENCE_MS = 2000


def _tid(coordinator: str = "broker-a", prefix: str = "tx") -> str:
    """An id (transactional or group) ``coordinator`` coordinates while both groups live."""
    while True:
        tid = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if coordinator_of(tid, ["broker-a", "broker-b"]) == coordinator:
            return tid


@pytest.fixture
def groups(daemons: Daemons, tmp_path: Path) -> dict[str, BrokerProcess]:
    ns = daemons.namesrv(tmp_path / "ns", settings={"brokerNotActiveTimeoutMillis": SILENCE_MS})
    brokers = kafka_groups(
        daemons,
        tmp_path,
        ns.endpoint,
        flushDiskType="SYNC_FLUSH",
        kafkaGroupInitialRebalanceDelayMs=0,
    )
    ns.wait_registered(list(brokers.values()))
    asyncio.run(_create_topic(ns.endpoint, brokers))
    return brokers


async def _leaders(broker: BrokerProcess, topic: str = TOPIC) -> dict[int, int]:
    host, _, port = broker.kafka_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    client = KafkaClient(reader, writer)
    try:
        meta = await client.call(3, 1, {"topics": [{"name": topic}]})
    finally:
        await client.close()
    return {p["partition_index"]: p["leader_id"] for p in meta["topics"][0]["partitions"]}


async def _create_topic(ns: str, brokers: dict[str, BrokerProcess]) -> None:
    async with Admin(namesrv=ns) as admin:
        await admin.create_topic(TOPIC, queue_nums=2)
        await admin.create_topic(OUT, queue_nums=1)
    a, b = (
        _master(brokers, "broker-a"),
        _master(brokers, "broker-b"),
    )
    want = {0: a, 1: a, 2: b, 3: b}
    out = {0: a, 1: b}
    deadline = time.monotonic() + 15
    while [await _leaders(broker) for broker in brokers.values()] != [want, want] or [
        await _leaders(broker, OUT) for broker in brokers.values()
    ] != [out, out]:
        assert time.monotonic() < deadline, "the two groups' partitions never showed"
        await asyncio.sleep(0.2)


async def _describe(broker: BrokerProcess, tid: str) -> dict:
    host, _, port = broker.kafka_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    client = KafkaClient(reader, writer)
    try:
        reply = await client.call(65, 0, {"transactional_ids": [tid]})
    finally:
        await client.close()
    return dict(reply["transaction_states"][0])


def _producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": tid,
        "transaction.timeout.ms": 60_000, "linger.ms": 5,
    })  # fmt: skip
    producer.init_transactions(20)
    return producer


def _round(producer: Producer, tag: str, commit: bool | None) -> set[bytes]:
    """One transaction writing ``tag-p<n>`` to every partition; committed, aborted, or
    (None) left open after a flush. Its values."""
    producer.begin_transaction()
    values = set()
    for p in range(PARTITIONS):
        value = f"{tag}-p{p}".encode()
        producer.produce(TOPIC, value=value, partition=p)
        values.add(value)
    producer.flush(20)
    if commit is True:
        producer.commit_transaction(20)
    elif commit is False:
        producer.abort_transaction(20)
    return values


def _read(bootstrap: str, isolation: str, expect: int, wait_s: float = 10.0) -> list[tuple]:
    """Every record of the 4 partitions as (partition, value), from the start."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": isolation,
    })  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: list[tuple] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and len(out) < expect:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.value()))
        end = time.monotonic() + 1.0  # anything more that would come
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.value()))
    finally:
        consumer.close()
    return out


def _by_partition(values: set[bytes]) -> set[tuple[int, bytes]]:
    return {(int(v.rsplit(b"-p", 1)[1]), v) for v in values}


def test_commit_and_abort_interleaved_across_two_groups(groups) -> None:  # type: ignore[no-untyped-def]
    a, b = groups["broker-a"], groups["broker-b"]
    producer = _producer(a.kafka_endpoint, _tid())
    committed = _round(producer, "c1", True)
    aborted = _round(producer, "a2", False)
    committed |= _round(producer, "c3", True)
    aborted |= _round(producer, "a4", False)
    open_values = _round(producer, "o5", None)  # open: below the LSO on both groups
    for bootstrap in (a.kafka_endpoint, b.kafka_endpoint):
        got = _read(bootstrap, "read_committed", len(committed))
        assert sorted(got) == sorted(_by_partition(committed)), got
        got = _read(bootstrap, "read_uncommitted", len(committed | aborted | open_values))
        assert set(got) == _by_partition(committed | aborted | open_values)
        assert len(got) == 5 * PARTITIONS
    producer.commit_transaction(20)
    committed |= open_values
    got = _read(b.kafka_endpoint, "read_committed", len(committed))
    assert sorted(got) == sorted(_by_partition(committed))


def test_coordinator_killed_between_prepare_and_complete(groups) -> None:  # type: ignore[no-untyped-def]
    a, b = groups["broker-a"], groups["broker-b"]
    tid = _tid()
    producer = _producer(a.kafka_endpoint, tid)
    committed = _round(producer, "c1", True)
    aborted = _round(producer, "a2", False)
    pending = _round(producer, "c3", None)  # stored on both groups, not ended
    b.kill()  # broker-b's markers cannot be written now
    with pytest.raises(KafkaException):
        producer.commit_transaction(8)  # decided: PREPARE_COMMIT, broker-b's markers pending
    state = asyncio.run(_describe(a, tid))
    assert state["transaction_state"] == "PrepareCommit", state
    a.kill()  # kill -9 between PREPARE and COMPLETE
    b.start()
    a.start()
    committed |= pending
    deadline = time.monotonic() + 30
    while (state := asyncio.run(_describe(a, tid)))["transaction_state"] != "CompleteCommit":
        assert time.monotonic() < deadline, state
        time.sleep(0.5)
    for bootstrap in (a.kafka_endpoint, b.kafka_endpoint):
        got = _read(bootstrap, "read_committed", len(committed))
        assert sorted(got) == sorted(_by_partition(committed)), got
    got = _read(b.kafka_endpoint, "read_uncommitted", len(committed | aborted))
    assert set(got) == _by_partition(committed | aborted)


# --- TxnOffsetCommit across broker groups --------------------------------------------------------
def _offsets(broker: BrokerProcess, group: str) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7 with require_stable at ``broker`` (the group's coordinator): partition
    -> (committed offset, error code) of the input's 4 partitions."""

    async def fetch() -> dict:
        host, _, port = broker.kafka_endpoint.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        client = KafkaClient(reader, writer)
        try:
            return await client.call(9, 7, {
                "group_id": group, "require_stable": True,
                "topics": [{"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}],
            })  # fmt: skip
        finally:
            await client.close()

    reply = asyncio.run(fetch())
    assert reply["error_code"] == 0, reply
    rows = reply["topics"][0]["partitions"]
    return {r["partition_index"]: (r["committed_offset"], r["error_code"]) for r in rows}


def _fill(bootstrap: str, per_partition: int, start: int) -> None:
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + per_partition):
        for p in range(PARTITIONS):
            plain.produce(TOPIC, f"in-{i}-p{p}".encode(), partition=p)
    plain.flush(15)


def _process(consumer: Consumer, producer: Producer, want: int) -> dict[int, int]:
    """Read ``want`` records from the group's assignment and write them to ``OUT`` in an
    open transaction, their positions sent to it (send_offsets_to_transaction). The
    positions."""
    got = 0
    deadline = time.monotonic() + 40
    producer.begin_transaction()
    while got < want:
        assert time.monotonic() < deadline, f"read {got} of {want}"
        for m in consumer.consume(50, 0.5):
            if m.error() is None:
                producer.produce(OUT, m.value().replace(b"in-", b"out-"), partition=got % 2)
                got += 1
    producer.flush(15)
    positions = consumer.position(consumer.assignment())
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 15)
    return {tp.partition: tp.offset for tp in positions}


def _consumer(bootstrap: str, group: str) -> Consumer:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe([TOPIC])
    return consumer


def _commit(producer: Producer, wait_s: float = 40.0) -> None:
    """commit_transaction, again while it fails retriably (a marker's group restarting)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            producer.commit_transaction(10)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise


@pytest.mark.parametrize("group_at", ["broker-b", "broker-a"])
def test_offsets_in_a_transaction_with_the_group_anywhere(groups, group_at: str) -> None:  # type: ignore[no-untyped-def]
    """The transactional id is broker-a's; the group broker-b's (pending offsets there, ended
    by broker-a's marker) or broker-a's too. Partitions 0-1 are broker-a's, 2-3 broker-b's."""
    a = groups["broker-a"]
    coordinator = groups[group_at]
    group = _tid(group_at, "rpw")
    _fill(a.kafka_endpoint, 10, 0)
    consumer = _consumer(a.kafka_endpoint, group)
    tid = _tid()
    producer = _producer(a.kafka_endpoint, tid)
    try:
        positions = _process(consumer, producer, 10 * PARTITIONS)
        assert positions == dict.fromkeys(range(PARTITIONS), 10)
        # pending at the group's coordinator until the marker
        assert _offsets(coordinator, group) == dict.fromkeys(
            range(PARTITIONS), (-1, UNSTABLE_OFFSET_COMMIT)
        )
        _commit(producer)
        assert _offsets(coordinator, group) == dict.fromkeys(range(PARTITIONS), (10, 0))
        # an aborted round: its offsets never applied
        _fill(a.kafka_endpoint, 5, 10)
        assert _process(consumer, producer, 5 * PARTITIONS) == dict.fromkeys(range(4), 15)
        producer.abort_transaction(15)
        assert _offsets(coordinator, group) == dict.fromkeys(range(PARTITIONS), (10, 0))
        # a round left open, then its producer fenced by the next with the same id: the
        # fencing abort ends the offsets pending at the group's coordinator too
        for tp in consumer.committed(consumer.assignment(), 15):
            consumer.seek(tp)
        assert _process(consumer, producer, 5 * PARTITIONS) == dict.fromkeys(range(4), 15)
        assert _offsets(coordinator, group) == dict.fromkeys(
            range(PARTITIONS), (-1, UNSTABLE_OFFSET_COMMIT)
        )
        _producer(a.kafka_endpoint, tid)  # InitProducerId: the open transaction aborted
        assert _offsets(coordinator, group) == dict.fromkeys(range(PARTITIONS), (10, 0))
    finally:
        consumer.close()


def test_pending_offsets_survive_a_kill_9_of_the_group_coordinator(groups) -> None:  # type: ignore[no-untyped-def]
    """TxnOffsetCommit answered by broker-b (the group's coordinator; broker-a coordinates the
    transactional id), broker-b killed -9 and started again before EndTxn: the offsets are
    still pending there, and the commit applies them (broker-b's partitions to its table,
    broker-a's to broker-a's)."""
    a, b = groups["broker-a"], groups["broker-b"]
    group = _tid("broker-b", "rpw")
    _fill(a.kafka_endpoint, 10, 0)
    consumer = _consumer(a.kafka_endpoint, group)
    producer = _producer(a.kafka_endpoint, _tid())
    try:
        assert _process(consumer, producer, 10 * PARTITIONS) == dict.fromkeys(range(4), 10)
    finally:
        consumer.close()
    b.kill()
    b.start()
    deadline = time.monotonic() + 30
    while True:  # broker-b coordinates the group again once the NameServer lists it
        try:
            found = _offsets(b, group)
            break
        except AssertionError:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    assert found == dict.fromkeys(range(PARTITIONS), (-1, UNSTABLE_OFFSET_COMMIT))
    _commit(producer)
    assert _offsets(b, group) == dict.fromkeys(range(PARTITIONS), (10, 0))


# --- KIP-890: the partition leader verifies a foreign transaction's first batch ---------------
PRODUCE, LIST_OFFSETS, INIT_PID, ADD_PARTITIONS, END_TXN = 0, 2, 22, 24, 26
NOT_ENOUGH_REPLICAS, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 19, 48, 49


async def _client(broker: BrokerProcess) -> KafkaClient:
    host, _, port = broker.kafka_endpoint.rpartition(":")
    return KafkaClient(*await asyncio.open_connection(host, int(port)))


async def _produce(
    client: KafkaClient, tid: str, ids: tuple[int, int], partition: int, seq: int
) -> int:
    """A transactional batch of one record to ``partition``: its error code."""
    batch = encode_batch(
        [Record(0, 5_000, None, f"v{seq}".encode(), [])], producer_id=ids[0],
        producer_epoch=ids[1], base_sequence=seq, attributes=TRANSACTIONAL,
    )  # fmt: skip
    reply = await client.call(PRODUCE, 7, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": partition, "records": batch}]}],
    })  # fmt: skip
    return int(reply["responses"][0]["partition_responses"][0]["error_code"])


async def _held(client: KafkaClient, partition: int) -> int:
    """How many offsets the partition's LSO holds back: latest (isolation 0) - stable (1)."""
    ends = []
    for isolation in (0, 1):
        reply = await client.call(LIST_OFFSETS, 2, {
            "replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": partition, "timestamp": -1}]}],
        })  # fmt: skip
        ends.append(reply["topics"][0]["partitions"][0]["offset"])
    return int(ends[0] - ends[1])


async def _add(client: KafkaClient, tid: str, ids: tuple[int, int], partition: int) -> None:
    added = await client.call(ADD_PARTITIONS, 1, {
        "transactional_id": tid, "producer_id": ids[0], "producer_epoch": ids[1],
        "topics": [{"name": TOPIC, "partitions": [partition]}],
    })  # fmt: skip
    assert added["results"][0]["results"][0]["partition_error_code"] == 0, added


async def _end(client: KafkaClient, tid: str, ids: tuple[int, int]) -> None:
    body = {"transactional_id": tid, "producer_id": ids[0], "producer_epoch": ids[1]}
    deadline = time.monotonic() + 20
    while code := (await client.call(END_TXN, 1, {**body, "committed": True}))["error_code"]:
        assert time.monotonic() < deadline, code  # markers pending: retried
        await asyncio.sleep(0.3)


async def _unverified(groups: dict[str, BrokerProcess]) -> None:
    a, b = groups["broker-a"], groups["broker-b"]
    tid = _tid()  # broker-a coordinates it; partitions 2 and 3 are broker-b's
    ca, cb = await _client(a), await _client(b)
    init = await ca.call(INIT_PID, 1, {"transactional_id": tid, "transaction_timeout_ms": 60_000})
    ids = (init["producer_id"], init["producer_epoch"])
    await _add(ca, tid, ids, 0)
    # never added: refused, nothing written, the LSO not held (it was held for ever before)
    assert await _produce(cb, tid, ids, 2, 0) == INVALID_TXN_STATE
    assert await _held(cb, 2) == 0
    assert await _produce(cb, _tid(), ids, 2, 0) == INVALID_PRODUCER_ID_MAPPING
    # added: verified, admitted, held below the LSO until the commit's marker
    await _add(ca, tid, ids, 2)
    assert await _produce(cb, tid, ids, 2, 0) == 0
    assert await _produce(cb, tid, ids, 2, 1) == 0  # registered: no question asked
    assert await _held(cb, 2) == 2
    await _end(ca, tid, ids)
    assert await _held(cb, 2) == 0
    # late, after the transaction ended: refused, not held
    assert await _produce(cb, tid, ids, 2, 2) == INVALID_TXN_STATE
    assert await _held(cb, 2) == 0
    # the coordinator down: retriable, nothing admitted; admitted once it is back
    await _add(ca, tid, ids, 3)
    await ca.close()
    a.kill()
    assert await _produce(cb, tid, ids, 3, 0) == NOT_ENOUGH_REPLICAS
    await asyncio.sleep(SILENCE_MS / 1000 + 1.5)  # gone from the NameServer: ids hash to b
    assert await _produce(cb, tid, ids, 3, 0) == NOT_ENOUGH_REPLICAS
    assert await _held(cb, 3) == 0
    a.start()
    deadline = time.monotonic() + 20
    while (code := await _produce(cb, tid, ids, 3, 0)) != 0:
        assert code == NOT_ENOUGH_REPLICAS and time.monotonic() < deadline, code
        await asyncio.sleep(0.3)
    assert await _held(cb, 3) == 1
    ca = await _client(a)
    await _end(ca, tid, ids)
    assert await _held(cb, 3) == 0
    await ca.close()
    await cb.close()


def test_the_partition_leader_verifies_a_foreign_transaction(groups) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(_unverified(groups))
