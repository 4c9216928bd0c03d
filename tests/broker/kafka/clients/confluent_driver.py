"""confluent-kafka (bundled librdkafka 2.16) through the scenario of ``scenario.py``:
``python -m tests.broker.kafka.clients.confluent_driver SPEC_JSON``.

Admin ``create_topics``; one Producer per codec (none, gzip, snappy, lz4, zstd), ``acks=all``,
delivery reports give each record's offset; three Consumers (A, B, C) polled in turn from one
thread, ``enable.auto.commit=false``, explicit synchronous commits of the next offset, assignment
seen through ``on_assign``/``on_revoke``; ``committed()`` (OffsetFetch) after each phase.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import traceback
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.kafka.clients.scenario import (
    Deadline,
    emit,
    hexb,
    load_spec,
    new_result,
    next_offsets,
    note,
    phase,
    split,
    unhex,
)


class Member:
    def __init__(self, name: str, spec: dict[str, Any], current: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.current = current  # {"phase": the phase dict records and assignments go to}
        self.consumer = Consumer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "group.id": spec["group"],
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "max.poll.interval.ms": 20000,
                "topic.metadata.refresh.interval.ms": 2000,
            }
        )
        self.consumer.subscribe(
            [spec["topic"]], on_assign=self._on_assign, on_revoke=self._on_revoke
        )

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.current["live"][self.name] = sorted(tp.partition for tp in partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.current["live"][self.name] = []

    def poll(self, timeout: float) -> None:
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error():
            raise KafkaException(msg.error())
        self.current["phase"]["records"].append(
            {
                "member": self.name,
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key": hexb(msg.key()),
                "value": hexb(msg.value()),
                "headers": [[n, hexb(v)] for n, v in (msg.headers() or [])],
            }
        )

    def commit(self) -> None:
        offsets = next_offsets(self.current["phase"]["records"], self.name)
        if offsets:
            topic = self.spec["topic"]
            tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
            self.consumer.commit(offsets=tps, asynchronous=False)

    def close(self) -> None:
        self.consumer.close()
        self.current["live"].pop(self.name, None)


def create_topic(spec: dict[str, Any]) -> None:
    admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})
    futures = admin.create_topics([NewTopic(spec["topic"], spec["partitions"], 1)])
    try:
        futures[spec["topic"]].result(spec["timeouts"]["join"])
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"CreateTopics: no answer in {spec['timeouts']['join']} s") from None
    deadline = Deadline(spec["timeouts"]["join"], "topic metadata")
    while True:
        meta = admin.list_topics(spec["topic"], timeout=5).topics.get(spec["topic"])
        if meta is not None and meta.error is None and len(meta.partitions) == spec["partitions"]:
            return
        deadline.check(str(meta))


def report(err: Any, msg: Any, rid: str, failures: list[str], result: dict[str, Any]) -> None:
    """A delivery report: the record's offset, or why it failed."""
    if err is not None:
        failures.append(f"{rid}: {err}")
    else:
        result["delivered"].append(
            {"id": rid, "partition": msg.partition(), "offset": msg.offset()}
        )


def produce(spec: dict[str, Any], records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    for codec in dict.fromkeys(r["codec"] for r in records):
        producer = Producer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "acks": "all",
                "compression.type": codec,
                "linger.ms": 5,
            }
        )
        failures: list[str] = []
        for rec in (r for r in records if r["codec"] == codec):
            producer.produce(
                spec["topic"],
                key=unhex(rec["key"]),
                value=unhex(rec["value"]),
                partition=rec["partition"],
                headers=[(n, unhex(v)) for n, v in rec["headers"]],
                on_delivery=lambda err, msg, rid=rec["id"], failures=failures: report(
                    err, msg, rid, failures, result
                ),
            )
        left = producer.flush(spec["timeouts"]["consume"])
        if left or failures:
            raise RuntimeError(f"produce ({codec}): {left} undelivered, failures {failures}")


def wait_split(members: list[Member], names: tuple[str, str], spec: dict[str, Any]) -> None:
    deadline = Deadline(spec["timeouts"]["join"], f"members {names} splitting the partitions")
    live = members[0].current["live"]
    while not split(live, names, spec["partitions"]):
        deadline.check(f"(assignments {live})")
        for m in members:
            m.poll(0.05)
    members[0].current["phase"]["members"] = {n: list(live[n]) for n in names}


def consume(members: list[Member], want: int, spec: dict[str, Any]) -> None:
    current = members[0].current["phase"]
    deadline = Deadline(spec["timeouts"]["consume"], f"receiving {want} records")
    while len(current["records"]) < want:
        deadline.check(f"(got {len(current['records'])})")
        for m in members:
            m.poll(0.05)
    for _ in range(5):  # a moment more: duplicates would show up now
        for m in members:
            m.poll(0.05)


def committed(member: Member, spec: dict[str, Any]) -> dict[str, int]:
    tps = [TopicPartition(spec["topic"], p) for p in range(spec["partitions"])]
    got = member.consumer.committed(tps, timeout=spec["timeouts"]["commit"])
    return {str(tp.partition): tp.offset for tp in got}


def main() -> None:
    spec = load_spec()
    result = new_result()
    # "phase": where records go; "live": each member's assignment now (a phase keeps the
    # split it saw before producing).
    current: dict[str, Any] = {"phase": phase(), "live": {}}
    members: list[Member] = []
    try:
        create_topic(spec)
        result["created"] = True
        note("topic created")
        result["phases"].append(current["phase"])
        a, b = Member("A", spec, current), Member("B", spec, current)
        members = [a, b]
        wait_split(members, ("A", "B"), spec)
        note(f"A and B split the partitions: {current['phase']['members']}")
        produce(spec, spec["batches"][0], result)
        note("batch 0 produced")
        consume(members, len(spec["batches"][0]), spec)
        note("batch 0 consumed")
        for m in members:
            m.commit()
        current["phase"]["committed"] = committed(a, spec)

        b.close()
        members.remove(b)
        current["phase"] = phase()
        result["phases"].append(current["phase"])
        members.append(Member("C", spec, current))
        note("B left, C joined")
        wait_split(members, ("A", "C"), spec)
        note(f"A and C split the partitions: {current['phase']['members']}")
        produce(spec, spec["batches"][1], result)
        note("batch 1 produced")
        consume(members, len(spec["batches"][1]), spec)
        note("batch 1 consumed")
        for m in members:
            m.commit()
        current["phase"]["committed"] = committed(a, spec)
    except Exception as exc:
        result["error"] = f"{exc!r}\n{traceback.format_exc()}"
    finally:
        for m in members:
            with contextlib.suppress(Exception):  # closed already, or the broker is gone
                m.consumer.close()
    emit(result)


if __name__ == "__main__":
    main()
