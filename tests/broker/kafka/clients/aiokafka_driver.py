"""aiokafka 0.14 (pure Python, asyncio) through the scenario of ``scenario.py``:
``python -m tests.broker.kafka.clients.aiokafka_driver SPEC_JSON``.

``AIOKafkaAdminClient.create_topics``; one producer per codec (none, gzip, snappy, lz4, zstd:
aiokafka's codecs come with cramjam), ``acks="all"``, each send's RecordMetadata gives the
offset; three consumers (A, B, C) in one event loop, ``enable_auto_commit=False``, assignment
seen through a ConsumerRebalanceListener, ``commit({tp: next offset})`` and ``committed(tp)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

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


async def bounded(awaitable: Any, seconds: float, what: str) -> Any:
    """``await awaitable``, failing with ``what`` after ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            return await awaitable
    except TimeoutError:
        raise TimeoutError(f"{what}: no answer in {seconds:g} s") from None


class Member(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, name: str, spec: dict[str, Any], current: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.current = current
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=spec["bootstrap"],
            group_id=spec["group"],
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=20000,
            metadata_max_age_ms=2000,
        )

    async def start(self) -> Member:
        self.consumer.subscribe([self.spec["topic"]], listener=self)
        await bounded(self.consumer.start(), self.spec["timeouts"]["join"], f"{self.name} start")
        return self

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.current["live"][self.name] = []

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.current["live"][self.name] = sorted(tp.partition for tp in assigned)

    async def poll(self) -> None:
        batches = await self.consumer.getmany(timeout_ms=50)
        for msgs in batches.values():
            for msg in msgs:
                self.current["phase"]["records"].append(
                    {
                        "member": self.name,
                        "partition": msg.partition,
                        "offset": msg.offset,
                        "key": hexb(msg.key),
                        "value": hexb(msg.value),
                        "headers": [[n, hexb(v)] for n, v in msg.headers],
                    }
                )

    async def commit(self) -> None:
        offsets = next_offsets(self.current["phase"]["records"], self.name)
        if offsets:
            topic = self.spec["topic"]
            tps = {TopicPartition(topic, p): o for p, o in offsets.items()}
            await bounded(self.consumer.commit(tps), self.spec["timeouts"]["commit"], "commit")

    async def close(self) -> None:
        await bounded(self.consumer.stop(), self.spec["timeouts"]["commit"], f"{self.name} stop")
        self.current["live"].pop(self.name, None)


async def create_topic(spec: dict[str, Any]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=spec["bootstrap"])
    await bounded(admin.start(), spec["timeouts"]["join"], "admin start")
    try:
        topic = NewTopic(spec["topic"], num_partitions=spec["partitions"], replication_factor=1)
        await bounded(admin.create_topics([topic]), spec["timeouts"]["join"], "CreateTopics")
    finally:
        await admin.close()


async def produce(
    spec: dict[str, Any], records: list[dict[str, Any]], result: dict[str, Any]
) -> None:
    for codec in dict.fromkeys(r["codec"] for r in records):
        producer = AIOKafkaProducer(
            bootstrap_servers=spec["bootstrap"],
            acks="all",
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
        )
        await bounded(producer.start(), spec["timeouts"]["join"], "producer start")
        try:
            sends = []
            for rec in (r for r in records if r["codec"] == codec):
                future = await producer.send(
                    spec["topic"],
                    key=unhex(rec["key"]),
                    value=unhex(rec["value"]),
                    partition=rec["partition"],
                    headers=[(n, unhex(v)) for n, v in rec["headers"]],
                )
                sends.append((rec["id"], future))
            for rid, future in sends:
                meta = await bounded(future, spec["timeouts"]["consume"], f"produce {rid}")
                result["delivered"].append(
                    {"id": rid, "partition": meta.partition, "offset": meta.offset}
                )
        finally:
            await producer.stop()


async def wait_split(members: list[Member], names: tuple[str, str], spec: dict[str, Any]) -> None:
    deadline = Deadline(spec["timeouts"]["join"], f"members {names} splitting the partitions")
    live = members[0].current["live"]
    while not split(live, names, spec["partitions"]):
        deadline.check(f"(assignments {live})")
        for m in members:
            await m.poll()
    members[0].current["phase"]["members"] = {n: list(live[n]) for n in names}


async def consume(members: list[Member], want: int, spec: dict[str, Any]) -> None:
    current = members[0].current["phase"]
    deadline = Deadline(spec["timeouts"]["consume"], f"receiving {want} records")
    while len(current["records"]) < want:
        deadline.check(f"(got {len(current['records'])})")
        for m in members:
            await m.poll()
    for _ in range(5):  # a moment more: duplicates would show up now
        for m in members:
            await m.poll()


async def committed(member: Member, spec: dict[str, Any]) -> dict[str, int]:
    out = {}
    for p in range(spec["partitions"]):
        tp = TopicPartition(spec["topic"], p)
        offset = await bounded(
            member.consumer.committed(tp), spec["timeouts"]["commit"], "committed"
        )
        out[str(p)] = -1 if offset is None else offset
    return out


async def scenario(spec: dict[str, Any], result: dict[str, Any]) -> None:
    current: dict[str, Any] = {"phase": phase(), "live": {}}
    members: list[Member] = []
    try:
        await create_topic(spec)
        result["created"] = True
        note("topic created")
        result["phases"].append(current["phase"])
        a = await Member("A", spec, current).start()
        members.append(a)
        b = await Member("B", spec, current).start()
        members.append(b)
        await wait_split(members, ("A", "B"), spec)
        note(f"A and B split the partitions: {current['phase']['members']}")
        await produce(spec, spec["batches"][0], result)
        note("batch 0 produced")
        await consume(members, len(spec["batches"][0]), spec)
        note("batch 0 consumed")
        for m in members:
            await m.commit()
        current["phase"]["committed"] = await committed(a, spec)

        members.remove(b)
        await b.close()
        current["phase"] = phase()
        result["phases"].append(current["phase"])
        members.append(await Member("C", spec, current).start())
        note("B left, C joined")
        await wait_split(members, ("A", "C"), spec)
        note(f"A and C split the partitions: {current['phase']['members']}")
        await produce(spec, spec["batches"][1], result)
        note("batch 1 produced")
        await consume(members, len(spec["batches"][1]), spec)
        note("batch 1 consumed")
        for m in members:
            await m.commit()
        current["phase"]["committed"] = await committed(a, spec)
    finally:
        for m in members:
            with contextlib.suppress(Exception):  # the broker is gone
                await bounded(m.consumer.stop(), 10, "stop")


def main() -> None:
    spec = load_spec()
    result = new_result()
    try:
        asyncio.run(scenario(spec, result))
    except Exception as exc:
        result["error"] = f"{exc!r}\n{traceback.format_exc()}"
    emit(result)


if __name__ == "__main__":
    main()
