"""kill -9 under SYNC_FLUSH load: every acknowledged message is there after restart."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.v1 import common_pb2, messaging_pb2

from tests.broker.daemon_helpers import SMALL_STORE, Client
from tests.harness import Daemons

pytestmark = pytest.mark.slow


def _producer(endpoint: str, worker: int, stop: threading.Event, acked: set[str]) -> None:
    client = Client(endpoint)
    n = 0
    try:
        while not stop.is_set():
            ids = [f"W{worker}-{n + i}" for i in range(16)]
            n += 16
            request = messaging_pb2.SendMessageRequest(
                topic="crash",
                messages=[common_pb2.Message(body=i.encode() * 20, unique_id=i) for i in ids],
            )
            try:
                reply = client.msg.SendMessage(request, timeout=5)
            except grpc.RpcError:
                return  # the broker died mid-call: that batch was never acknowledged
            if all(r.status == messaging_pb2.SEND_OK for r in reply.results):
                acked.update(ids)
    finally:
        client.close()


def _stream_producer(endpoint: str, worker: int, stop: threading.Event, acked: set[str]) -> None:
    """Same load through SendMessageStream: an ack is a reply without error, all SEND_OK."""
    client = Client(endpoint)
    batches: dict[int, list[str]] = {}

    def requests() -> Iterator[messaging_pb2.SendMessageRequest]:
        n = 0
        while not stop.is_set() and n < 100_000:
            ids = [f"S{worker}-{n + i}" for i in range(16)]
            batches[n] = ids
            yield messaging_pb2.SendMessageRequest(
                topic="crash",
                request_id=n,
                messages=[common_pb2.Message(body=i.encode() * 20, unique_id=i) for i in ids],
            )
            n += 16
            time.sleep(0.002)  # keep a few requests in flight, not thousands

    try:
        for reply in client.msg.SendMessageStream(requests(), timeout=30):
            ok = all(r.status == messaging_pb2.SEND_OK for r in reply.results)
            if not reply.HasField("error") and ok and reply.results:
                acked.update(batches[reply.request_id])
    except grpc.RpcError:
        pass  # the broker died: replies not received are not acknowledged
    finally:
        client.close()


def _records_producer(endpoint: str, worker: int, stop: threading.Event, acked: set[str]) -> None:
    """Producer-encoded records (what the SDK sends): an ack is a compact SEND_OK reply."""
    client = Client(endpoint)
    tail = topic_tail("crash")
    n = 0
    try:
        while not stop.is_set():
            ids = [f"R{worker}-{n + i}" for i in range(16)]
            n += 16
            records = b"".join(
                encode_record(tail, i.encode() * 20, f"UNIQ_KEY\x01{i}\x02".encode()) for i in ids
            )
            request = messaging_pb2.SendMessageRequest(topic="crash", records=records)
            try:
                reply = client.msg.SendMessage(request, timeout=5)
            except grpc.RpcError:
                return  # the broker died mid-call: that batch was never acknowledged
            if reply.status == messaging_pb2.SEND_OK and reply.count == len(ids):
                acked.update(ids)
    finally:
        client.close()


def test_kill_9_under_sync_flush_loses_no_acknowledged_message(
    daemons: Daemons,
) -> None:
    settings = {**SMALL_STORE, "flushDiskType": "SYNC_FLUSH"}
    broker = daemons.broker(settings=settings)
    stop = threading.Event()
    acked: set[str] = set()
    producers = [
        _producer,
        _stream_producer,
        _stream_producer,
        _records_producer,
        _records_producer,
    ]
    workers = [
        threading.Thread(target=target, args=(broker.endpoint, w, stop, acked))
        for w, target in enumerate(producers)
    ]
    for worker in workers:
        worker.start()
    time.sleep(2.0)
    broker.kill()  # SIGKILL mid-load: no shutdown hooks
    stop.set()
    for worker in workers:
        worker.join(10)
    assert len(acked) > 100, "the load never got going"
    assert any(i.startswith("S") for i in acked), "the stream producers never got acks"
    assert any(i.startswith("R") for i in acked), "the records producers never got acks"
    assert (broker.store_dir / "abort").exists()  # a crash, not a clean stop

    broker.start()  # abnormal recovery
    client = Client(broker.endpoint)
    seen: set[str] = set()
    for queue_id in range(8):
        offset = 0
        while True:
            reply = client.pull("crash", offset, queue_id=queue_id, max_messages=1024)
            if not reply.messages:
                break
            seen.update(m.msg_id for m in reply.messages)
            offset = reply.next_begin_offset
    client.close()
    assert broker.stop() == 0
    missing = acked - seen
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
