"""kafka-python 3.0 (pure Python) through the scenario of ``scenario.py``:
``python -m tests.broker.kafka.clients.kafka_python_driver SPEC_JSON``.

``KafkaAdminClient.create_topics``; producers with their defaults, so **idempotence on**
(InitProducerId, then producer id, epoch and sequence numbers in every batch) and ``acks="all"``,
one per codec the spec lists (kafka-python brings only gzip: snappy, lz4 and zstd need the
python-snappy, lz4 and zstandard packages), each send's RecordMetadata gives the offset; three
KafkaConsumers (A, B, C), each polled in its own thread, ``enable_auto_commit=False``, assignment through a ConsumerRebalanceListener,
``commit({tp: OffsetAndMetadata})`` and ``committed(tp)``.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import threading
import traceback
from concurrent.futures import Future
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from tests.broker.kafka.clients.scenario import (
    consume_threaded,
    emit,
    hexb,
    load_spec,
    new_result,
    next_offsets,
    note,
    phase,
    unhex,
    wait_split_threaded,
)


class Member(ConsumerRebalanceListener):  # type: ignore[misc]
    """A KafkaConsumer in its own thread (a KafkaConsumer belongs to one thread, and its
    ``poll`` blocks through a join: two polled in turn from one thread hold each other's
    rebalance up); ``call`` runs a function on it in that thread."""

    def __init__(self, name: str, spec: dict[str, Any], current: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.current = current
        self.lock = current["lock"]
        self.calls: queue.Queue[tuple[Any, Future[Any]]] = queue.Queue()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.consumer = KafkaConsumer(
            bootstrap_servers=spec["bootstrap"],
            group_id=spec["group"],
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=20000,
            metadata_max_age_ms=2000,
        )
        self.consumer.subscribe([spec["topic"]], listener=self)
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                while not self.calls.empty():
                    fn, future = self.calls.get()
                    try:
                        future.set_result(fn())
                    except BaseException as exc:
                        future.set_exception(exc)
                self._poll()
        except BaseException as exc:
            self.failure = exc
        finally:
            with contextlib.suppress(Exception):
                self.consumer.close(autocommit=False)  # LeaveGroup
            with self.lock:
                self.current["live"].pop(self.name, None)

    def call(self, fn: Any, timeout: float) -> Any:
        future: Future[Any] = Future()
        self.calls.put((fn, future))
        return future.result(timeout)

    def on_partitions_revoked(self, revoked: Any) -> None:
        with self.lock:
            self.current["live"][self.name] = []

    def on_partitions_assigned(self, assigned: Any) -> None:
        with self.lock:
            self.current["live"][self.name] = sorted(tp.partition for tp in assigned)

    def _poll(self) -> None:
        for msgs in self.consumer.poll(timeout_ms=100).values():
            for msg in msgs:
                with self.lock:
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

    def check(self) -> None:
        if self.failure is not None:
            raise RuntimeError(f"member {self.name} failed: {self.failure!r}") from self.failure

    def commit(self) -> None:
        with self.lock:
            consumed = next_offsets(self.current["phase"]["records"], self.name)
        topic = self.spec["topic"]
        offsets = {
            TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in consumed.items()
        }
        if offsets:
            self.call(lambda: self.consumer.commit(offsets), self.spec["timeouts"]["commit"])

    def committed(self) -> dict[str, int]:
        def fetch() -> dict[str, int]:
            out = {}
            for p in range(self.spec["partitions"]):
                offset = self.consumer.committed(TopicPartition(self.spec["topic"], p))
                out[str(p)] = -1 if offset is None else offset
            return out

        return dict(self.call(fetch, self.spec["timeouts"]["commit"]))

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(15)


def create_topic(spec: dict[str, Any]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=spec["bootstrap"])
    try:
        admin.create_topics(
            [NewTopic(spec["topic"], num_partitions=spec["partitions"], replication_factor=1)]
        )
    finally:
        admin.close()


def produce(spec: dict[str, Any], records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    for codec in dict.fromkeys(r["codec"] for r in records):
        producer = KafkaProducer(
            bootstrap_servers=spec["bootstrap"],
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
            max_block_ms=int(spec["timeouts"]["join"] * 1000),
        )
        assert producer.config["enable_idempotence"], "kafka-python's default changed"
        try:
            sends = []
            for rec in (r for r in records if r["codec"] == codec):
                future = producer.send(
                    spec["topic"],
                    key=unhex(rec["key"]),
                    value=unhex(rec["value"]),
                    partition=rec["partition"],
                    headers=[(n, unhex(v)) for n, v in rec["headers"]],
                )
                sends.append((rec["id"], future))
            producer.flush(spec["timeouts"]["consume"])
            # The id InitProducerId granted (-1: none), stamped on every batch with a sequence.
            pid = producer._transaction_manager.producer_id_and_epoch
            result.setdefault("producer_ids", []).append([pid.producer_id, pid.epoch])
            for rid, future in sends:
                meta = future.get(timeout=spec["timeouts"]["consume"])
                result["delivered"].append(
                    {"id": rid, "partition": meta.partition, "offset": meta.offset}
                )
        finally:
            producer.close(timeout=5)


def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    spec = load_spec()
    result = new_result()
    current: dict[str, Any] = {"phase": phase(), "live": {}, "lock": threading.Lock()}
    members: list[Member] = []
    try:
        create_topic(spec)
        result["created"] = True
        note("topic created")
        result["phases"].append(current["phase"])
        a, b = Member("A", spec, current), Member("B", spec, current)
        members = [a, b]
        wait_split_threaded(members, ("A", "B"), spec)
        note(f"A and B split the partitions: {current['phase']['members']}")
        produce(spec, spec["batches"][0], result)
        note("batch 0 produced")
        consume_threaded(members, len(spec["batches"][0]), spec)
        note("batch 0 consumed")
        for m in members:
            m.commit()
        current["phase"]["committed"] = a.committed()

        members.remove(b)
        b.close()
        current["phase"] = phase()
        result["phases"].append(current["phase"])
        members.append(Member("C", spec, current))
        note("B left, C joined")
        wait_split_threaded(members, ("A", "C"), spec)
        note(f"A and C split the partitions: {current['phase']['members']}")
        produce(spec, spec["batches"][1], result)
        note("batch 1 produced")
        consume_threaded(members, len(spec["batches"][1]), spec)
        note("batch 1 consumed")
        for m in members:
            m.commit()
        current["phase"]["committed"] = a.committed()
    except Exception as exc:
        result["error"] = f"{exc!r}\n{traceback.format_exc()}"
    finally:
        for m in members:
            m.close()
    emit(result)


if __name__ == "__main__":
    main()
