"""What the stream-tool tests do with a topic themselves, through confluent-kafka (the test's
own venv): create, produce, read a whole log, and the compaction check every tool's
compacted topic goes through.

The compaction check is Kafka's contract, not a tool's: a compacted topic read from the
beginning holds the latest value of each key, not every version. Kafka never cleans a
partition's active segment, so the check makes the topic cleanable at once
(``COMPACT_NOW``: segments of 100 ms, any dirty ratio, no compaction lag), waits past a
segment's life and writes a roll marker to each partition (Kafka rolls the segment on that
append), then reads the log until every key before the markers appears once, for at most
``timeout`` seconds."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

ROLL_KEY = b"__wharf_roll__"
COMPACT_NOW = {
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
}


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    client = admin(bootstrap)  # held until the answer: a client destroyed cancels its futures
    client.create_topics([NewTopic(name, partitions, 1)], request_timeout=15)[name].result(20)


def producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})


def describe(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's configs as DescribeConfigs answers them."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    client = admin(bootstrap)
    entries = client.describe_configs([resource])[resource].result(20)
    return {name: entry.value for name, entry in entries.items()}


def read_log(bootstrap: str, topic: str, timeout: float = 20.0) -> list[Record]:
    """Every record of every partition, from the log start to the high watermark of the
    moment it starts reading, in (partition, offset) order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "wharf-stream-tools-reader",  # never joined nor committed: assign()
            "enable.auto.commit": False,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            raise KafkaException(meta.error)
        ends = {}
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        left = dict(ends)
        while left:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: read {len(out)} records, ends {ends}")
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.offset() < ends[msg.partition()]:
                out.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value()))
            # Done by the position, not the last record's offset: a transaction's marker or a
            # compacted gap may end the log with an offset no record has.
            for tp in consumer.position([TopicPartition(topic, p) for p in left]):
                if tp.offset >= left[tp.partition]:
                    del left[tp.partition]
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def latest(records: list[Record]) -> dict[bytes | None, bytes | None]:
    """Each key's last value (records in offset order; a key lives in one partition)."""
    return {r.key: r.value for r in records}


@dataclass
class Compaction:
    topic: str
    before: list[Record]  # the log as the tool left it
    after: list[Record]  # the log once compacted (the roll markers left out)
    seconds: float

    def versions(self) -> Counter[bytes | None]:
        return Counter(r.key for r in self.before)

    def report(self) -> str:
        kept = Counter(r.key for r in self.after)
        return (
            f"{self.topic}: {len(self.before)} records, {len(self.versions())} keys before; "
            f"{len(self.after)} records after {self.seconds:.1f} s; keys kept more than once: "
            f"{ {k: n for k, n in kept.items() if n > 1} }"
        )


def _before_marks(records: list[Record], marks: dict[int, int]) -> list[Record]:
    return [r for r in records if r.offset < marks.get(r.partition, 1 << 62)]


def _compacted(records: list[Record]) -> bool:
    return all(n == 1 for n in Counter(r.key for r in records).values())


def compact(bootstrap: str, topic: str, timeout: float = 30.0) -> Compaction:
    """The check described in the module doc: the log before, and after compaction (or as it
    stands when ``timeout`` runs out)."""
    start = time.monotonic()
    before = read_log(bootstrap, topic)
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in COMPACT_NOW.items()
        ],
    )
    client = admin(bootstrap)
    client.incremental_alter_configs([resource])[resource].result(20)
    time.sleep(0.5)  # past segment.ms: the next append rolls the active segment
    marks: dict[int, int] = {}
    partitions = sorted({r.partition for r in before})

    def delivered(err: object, msg: object) -> None:
        if err is None:
            marks[msg.partition()] = msg.offset()  # type: ignore[attr-defined]

    out = producer(bootstrap)
    for p in partitions:
        out.produce(topic, key=ROLL_KEY, value=b"roll", partition=p, on_delivery=delivered)
    out.flush(20)
    assert len(marks) == len(partitions), f"{topic}: roll markers not all written: {marks}"
    while True:
        after = _before_marks(read_log(bootstrap, topic), marks)
        if _compacted(after) or time.monotonic() - start > timeout:
            return Compaction(topic, before, after, time.monotonic() - start)
        time.sleep(1.0)


def assert_compacted(check: Compaction) -> None:
    """Several versions of a key were written, the compacted log holds each key once, with
    its latest value, and nothing else."""
    assert max(check.versions().values()) > 1, (
        f"{check.topic}: no key has two versions, nothing to compact: {check.report()}"
    )
    assert _compacted(check.after), check.report()
    assert latest(check.after) == latest(check.before), check.report()
    assert len(check.after) == len(check.versions()), check.report()
