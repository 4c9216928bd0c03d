"""One phase of tests/bench/v2_clients.py with the OFFICIAL RocketMQ Python client
(rocketmq-python-client 5.1.2, run with .venv-rmq/bin/python; never imported by the project:
its generated apache.rocketmq.v2 protos clash with wharf.rocketmq.v2 in one process).

    python rmq_v2_client_script.py ENDPOINT PHASE TOPIC GROUP COUNT SIZE INFLIGHT

PHASE is ``sync`` (``Producer.send`` one after another), ``async`` (``send_async`` with at most
INFLIGHT futures pending), ``receive`` (``SimpleConsumer.receive(32, 30 s)`` until COUNT
messages came, each acked; ``ack_async`` returns no future in 5.1.2, so acks run on INFLIGHT
threads) or ``receive_only`` (the same receives, nothing acked: the ReceiveMessage calls alone,
while the 30 s invisible time keeps every message from coming twice). The client starts first, then the script prints ``READY`` and waits for a line on
stdin, so the caller can read the broker's CPU counters right before the timed part; it ends
with one JSON line ``{"phase", "count", "seconds"}`` before shutting the client down.
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def message(topic, body):
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def go():
    print("READY", flush=True)
    sys.stdin.readline()
    return time.perf_counter()


def report(phase, count, seconds):
    print(json.dumps({"phase": phase, "count": count, "seconds": seconds}), flush=True)


def send(endpoint, phase, topic, count, size, inflight):
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    body = b"x" * size
    try:
        producer.send(message(topic, body))  # warm-up: route and first stream, not counted
        started = go()
        if phase == "sync":
            for _ in range(count):
                producer.send(message(topic, body))
        else:
            pending = []
            for _ in range(count):
                if len(pending) >= inflight:
                    pending.pop(0).result(timeout=30)
                pending.append(producer.send_async(message(topic, body)))
            for future in pending:
                future.result(timeout=30)
        report(phase, count, time.perf_counter() - started)
    finally:
        producer.shutdown()


def receive(endpoint, topic, group, count, inflight, ack=True):
    config = ClientConfiguration(endpoint, Credentials())
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    got = 0
    try:
        with ThreadPoolExecutor(inflight) as pool:
            started = go()
            deadline = time.monotonic() + 600
            while got < count and time.monotonic() < deadline:
                batch = consumer.receive(32, 30)
                if ack:
                    for done in wait([pool.submit(consumer.ack, m) for m in batch]).done:
                        done.result()
                got += len(batch)
            if got < count:
                raise SystemExit(f"received {got} of {count}")
            report("receive" if ack else "receive_only", count, time.perf_counter() - started)
    finally:
        consumer.shutdown()


def main():
    endpoint, phase, topic, group = sys.argv[1:5]
    count, size, inflight = (int(a) for a in sys.argv[5:8])
    if phase in ("receive", "receive_only"):
        receive(endpoint, topic, group, count, inflight, ack=phase == "receive")
    else:
        send(endpoint, phase, topic, count, size, inflight)


if __name__ == "__main__":
    main()
