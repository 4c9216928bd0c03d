"""Kafka transactions against the daemon with a real client (confluent-kafka / librdkafka):
exactly-once read-process-write with send_offsets_to_transaction, committed and aborted
transactions interleaved and read back by read_committed and read_uncommitted consumers; a
kill -9 in the middle of open transactions; zombie fencing; late aborts (an abort marker after
later committed records of the same partition)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from wharf.client import sync
from wharf.client.message import MessageQueue

from tests.broker.kafka.test_cross_protocol import run_rmq5
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared(module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    """One daemon for the tests that do not restart it (each uses its own topics and ids):
    a daemon start each cost ~3-5 s of CI."""
    return module_daemons.broker(
        tmp_path_factory.mktemp("shared"), extra_args=["--kafka-listen", "127.0.0.1:0"],
        settings={"kafkaGroupInitialRebalanceDelayMs": 0},
    )  # fmt: skip


def _topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _name, future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).items():
        future.result(15)


def _txn_producer(bootstrap: str, tid: str, timeout_ms: int = 60_000) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": tid,
        "transaction.timeout.ms": timeout_ms, "linger.ms": 5,
    })  # fmt: skip
    producer.init_transactions(15)
    return producer


def _read_all(bootstrap: str, topic: str, isolation: str, expect: int | None = None,
              wait_s: float = 6.0, partitions: int = 2) -> list[tuple[int, int, bytes]]:  # fmt: skip
    """Every record of ``topic`` as (partition, offset, value), read from the start (no
    group: assigned, so no rebalance delay)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": isolation,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and (expect is None or len(out) < expect):
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def _values(rows: list[tuple[int, int, bytes]]) -> set[bytes]:
    return {v for _, _, v in rows}


def test_committed_and_aborted_transactions_interleaved(shared: BrokerProcess) -> None:
    broker = shared
    bootstrap = broker.kafka_endpoint
    _topics(bootstrap, "tx-out")
    producer = _txn_producer(bootstrap, "tx-interleaved")
    plain = Producer({"bootstrap.servers": bootstrap})
    committed, aborted = set(), set()
    for n in range(6):
        producer.begin_transaction()
        values = {f"t{n}-{i}".encode() for i in range(5)}
        for i, value in enumerate(sorted(values)):
            producer.produce("tx-out", value, partition=i % 2)
        plain.produce("tx-out", f"plain-{n}".encode(), partition=n % 2)
        plain.flush(10)
        if n % 2:
            producer.flush(10)  # stored, then aborted (an abort purges what is unsent)
            producer.abort_transaction(15)
            aborted |= values
        else:
            producer.commit_transaction(15)
            committed |= values
    plains = {f"plain-{n}".encode() for n in range(6)}
    rc = _read_all(bootstrap, "tx-out", "read_committed", expect=len(committed) + 6)
    assert _values(rc) == committed | plains
    ru = _read_all(bootstrap, "tx-out", "read_uncommitted", expect=36)
    assert _values(ru) == committed | aborted | plains
    # Markers take offsets: the offsets read_uncommitted sees have gaps (one per partition
    # per transaction), and every offset is read once.
    assert len({(p, o) for p, o, _ in ru}) == len(ru)


def _sdk_read(endpoint: str, topic: str, queue: int, until: int, wait_s: float = 5.0) -> list:
    """What Wharf's SDK pulls from ``queue`` from 0 on (for ``wait_s`` at most, or until its
    next offset reaches ``until``)."""
    got: list = []
    offset = 0
    deadline = time.monotonic() + wait_s
    with sync.PullConsumer(endpoint, group=f"sdk-{uuid.uuid4().hex[:8]}") as consumer:
        while offset < until and time.monotonic() < deadline:
            result = consumer.pull(MessageQueue(topic, queue), offset, max_messages=32,
                                   max_wait_ms=300)  # fmt: skip
            got += result.messages
            offset = max(offset, result.next_begin_offset)
    return got


def test_other_protocols_see_committed_records_only(shared: BrokerProcess, tmp_path: Path) -> None:
    """The SDK (and every protocol but Kafka's) reads no marker, no aborted record, and
    nothing at or after the first record of an open transaction (the LSO)."""
    broker = shared
    bootstrap = broker.kafka_endpoint
    _topics(bootstrap, "tx-sdk", partitions=1)
    producer = _txn_producer(bootstrap, "tx-sdk")
    plain = Producer({"bootstrap.servers": bootstrap})
    for n, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("tx-sdk", f"t{n}-{i}".encode(), partition=0)
        producer.flush(10)
        producer.commit_transaction(15) if commit else producer.abort_transaction(15)
    producer.begin_transaction()  # open: what follows stays unseen until it commits
    producer.produce("tx-sdk", b"open-0", partition=0)
    producer.flush(10)
    plain.produce("tx-sdk", b"after-open", partition=0)
    plain.flush(10)
    # 0-2 t0, 3 marker, 4-6 t1 (aborted), 7 marker, 8-10 t2, 11 marker, 12 open-0, 13 plain
    bodies = [m.body for m in _sdk_read(broker.endpoint, "tx-sdk", 0, until=14, wait_s=3)]
    assert bodies == [b"t0-0", b"t0-1", b"t0-2", b"t2-0", b"t2-1", b"t2-2"]
    rc = _read_all(bootstrap, "tx-sdk", "read_committed", expect=7, wait_s=3, partitions=1)
    assert [v for _, _, v in rc] == bodies
    # The official RocketMQ 5 client (SimpleConsumer: the store's pop) sees the same six.
    out = run_rmq5(broker, tmp_path / "home", "receive", "tx-sdk", "rmq5-tx", "6")
    assert sorted(bytes.fromhex(m["body_hex"]) for m in out["received"]) == sorted(bodies)
    producer.commit_transaction(15)
    bodies = [m.body for m in _sdk_read(broker.endpoint, "tx-sdk", 0, until=15)]
    assert bodies[6:] == [b"open-0", b"after-open"]
    rc = _read_all(bootstrap, "tx-sdk", "read_committed", expect=8, partitions=1)
    assert [(o, v) for _, o, v in rc][6:] == [(12, b"open-0"), (13, b"after-open")]


def test_read_process_write_exactly_once(shared: BrokerProcess) -> None:
    """A consumer group's records transformed into another topic with their offsets committed
    by the transaction (send_offsets_to_transaction, KIP-447's group metadata): an aborted
    round is redone from the committed offsets, each input lands in the output once."""
    bootstrap = shared.kafka_endpoint
    _topics(bootstrap, "rpw-in", "rpw-out")
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        plain.produce("rpw-in", f"in-{i}".encode(), partition=i % 2)
    plain.flush(10)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "rpw", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe(["rpw-in"])
    producer = _txn_producer(bootstrap, "rpw-app")
    done = 0
    rounds = 0
    deadline = time.monotonic() + 40
    try:
        while done < 40 and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10, 1.0) if m.error() is None]
            if not batch:
                continue
            rounds += 1
            producer.begin_transaction()
            for m in batch:
                producer.produce("rpw-out", m.value().replace(b"in-", b"out-"), partition=0)
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 15)
            if rounds % 3 == 0:  # this round fails: redo it from the committed offsets
                producer.flush(10)
                producer.abort_transaction(15)
                for tp in consumer.committed(consumer.assignment(), 15):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else 0))  # fmt: skip
                continue
            producer.commit_transaction(15)
            done += len(batch)
    finally:
        consumer.close()
    assert done == 40 and rounds >= 4
    out = _read_all(bootstrap, "rpw-out", "read_committed", expect=40, partitions=1)
    assert sorted(v for _, _, v in out) == sorted(f"out-{i}".encode() for i in range(40))
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "rpw"})
    committed = check.committed([TopicPartition("rpw-in", p) for p in range(2)], 15)
    check.close()
    assert [tp.offset for tp in committed] == [20, 20]


def test_open_transactions_across_a_kill_9(daemons: Daemons, tmp_path: Path) -> None:
    """kill -9 with two transactions open: after the restart neither is ever visible to
    read_committed (one aborted by its timeout, the other by the fencing init of its id's
    next producer), the committed one beside them is, and read_uncommitted sees all."""
    broker = daemons.broker(tmp_path, extra_args=["--kafka-listen", "127.0.0.1:0"])
    bootstrap = broker.kafka_endpoint
    _topics(bootstrap, "k9")
    by_timeout = _txn_producer(bootstrap, "k9-timeout", timeout_ms=3000)
    by_fence = _txn_producer(bootstrap, "k9-fence")
    done = _txn_producer(bootstrap, "k9-done")
    for producer, name in ((by_timeout, "late"), (by_fence, "fenced")):
        producer.begin_transaction()
        for i in range(4):
            producer.produce("k9", f"{name}-{i}".encode(), partition=i % 2)
        producer.flush(10)
    done.begin_transaction()
    for i in range(4):
        done.produce("k9", f"done-{i}".encode(), partition=i % 2)
    done.commit_transaction(15)
    broker.kill()
    broker.start()
    bootstrap = broker.kafka_endpoint
    # Open: the LSO holds read_committed below the first open record of each partition.
    assert _read_all(bootstrap, "k9", "read_committed", wait_s=1.5) == []
    _txn_producer(bootstrap, "k9-fence")  # fences the old producer: its transaction aborts
    time.sleep(4.5)  # k9-timeout's 3 s (counted from its start) + the 1 s check
    committed = {f"done-{i}".encode() for i in range(4)}
    assert _values(_read_all(bootstrap, "k9", "read_committed", expect=4)) == committed
    everything = _values(_read_all(bootstrap, "k9", "read_uncommitted", expect=12))
    assert everything == committed | {f"{n}-{i}".encode() for n in ("late", "fenced")
                                      for i in range(4)}  # fmt: skip


def test_a_zombie_producer_is_fenced(shared: BrokerProcess) -> None:
    bootstrap = shared.kafka_endpoint
    _topics(bootstrap, "zombie")
    old = _txn_producer(bootstrap, "zombie-app")
    old.begin_transaction()
    old.produce("zombie", b"old-0", partition=0)
    old.flush(10)
    new = _txn_producer(bootstrap, "zombie-app")  # the same id: the old one is fenced
    new.begin_transaction()
    new.produce("zombie", b"new-0", partition=0)
    new.commit_transaction(15)
    with pytest.raises(KafkaException) as info:
        old.produce("zombie", b"old-1", partition=0)
        old.flush(5)
        old.commit_transaction(10)
    error = info.value.args[0]
    assert error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert _values(_read_all(bootstrap, "zombie", "read_committed", expect=1, partitions=1)) == {
        b"new-0"
    }


def test_a_late_abort_after_later_committed_records(shared: BrokerProcess) -> None:
    """An abort marker written after other producers' committed records in the same
    partition (the bug two Kafka-compatible brokers shipped): those stay, the aborted go."""
    broker = shared
    bootstrap = broker.kafka_endpoint
    _topics(bootstrap, "late", partitions=1)
    slow = _txn_producer(bootstrap, "late-slow")
    quick = _txn_producer(bootstrap, "late-quick")
    plain = Producer({"bootstrap.servers": bootstrap})
    slow.begin_transaction()
    for i in range(3):
        slow.produce("late", f"aborted-{i}".encode(), partition=0)
    slow.flush(10)
    for i in range(3):
        plain.produce("late", f"plain-{i}".encode(), partition=0)
        plain.flush(10)
        quick.begin_transaction()
        quick.produce("late", f"quick-{i}".encode(), partition=0)
        quick.commit_transaction(15)
    # Everything after the slow transaction's first record waits for it (the LSO).
    assert _read_all(bootstrap, "late", "read_committed", wait_s=1.5, partitions=1) == []
    slow.abort_transaction(15)  # its marker lands after all of the above
    wanted = [f"{k}-{i}".encode() for i in range(3) for k in ("plain", "quick")]
    rc = _read_all(bootstrap, "late", "read_committed", expect=6, partitions=1)
    assert [v for _, _, v in rc] == wanted
    ru = _read_all(bootstrap, "late", "read_uncommitted", expect=9, partitions=1)
    assert [v for _, _, v in ru] == [f"aborted-{i}".encode() for i in range(3)] + wanted
    bodies = [m.body for m in _sdk_read(broker.endpoint, "late", 0, until=13)]
    assert bodies == wanted


async def test_aiokafka_transactions(shared: BrokerProcess) -> None:
    """A second client's own protocol code (aiokafka: AddPartitionsToTxn, EndTxn v0, its own
    control-batch reader): a committed and an aborted transaction, read back by its
    read_committed and read_uncommitted consumers."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioPartition

    bootstrap = shared.kafka_endpoint
    _topics(bootstrap, "aio-tx", partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx")
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(3):
                await producer.send_and_wait("aio-tx", f"kept-{i}".encode(), partition=0)
        await producer.begin_transaction()
        for i in range(3):
            await producer.send_and_wait("aio-tx", f"dropped-{i}".encode(), partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait("aio-tx", b"last", partition=0)
    finally:
        await producer.stop()

    async def read(isolation: str, want: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False)  # fmt: skip
        await consumer.start()
        got: list[bytes] = []
        try:
            consumer.assign([AioPartition("aio-tx", 0)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 10
            while len(got) < want and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                got += [m.value for ms in batch.values() for m in ms]
        finally:
            await consumer.stop()
        return got

    kept = [b"kept-0", b"kept-1", b"kept-2", b"last"]
    assert await read("read_committed", 4) == kept
    dropped = [f"dropped-{i}".encode() for i in range(3)]
    assert await read("read_uncommitted", 7) == kept[:3] + dropped + kept[3:]


def test_the_java_client_transactions_and_admin(shared: BrokerProcess, tmp_path: Path) -> None:
    """Kafka's own Java client (kafka-clients 4.4, tests/java KafkaTxnScenarios): commit,
    abort and commit, the Admin client describing and listing the open transaction, then
    its read_committed and read_uncommitted consumers."""
    from tests import javaclients

    proc = javaclients.run(tmp_path / "home", "dev.wharf.javatests.KafkaTxnScenarios",
                           shared.kafka_endpoint, "txn", timeout=150)  # fmt: skip
    out = javaclients.scenario(javaclients.results(proc, 0), "txn")
    assert (out["described_state"], out["described_partitions"]) == ("Ongoing", 1), out
    assert out["listed"] >= 1
    kept = ["kept-0", "kept-1", "kept-2", "last"]
    assert out["committed"] == kept
    assert out["uncommitted"] == kept[:3] + [f"dropped-{i}" for i in range(3)] + ["last"]
