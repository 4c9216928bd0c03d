"""Run by tests/broker/v2/test_official_client.py with the OFFICIAL RocketMQ Python client
(rocketmq-python-client 5.1.2, from .venv-rmq/): a Producer sends, a SimpleConsumer receives,
acks, changes an invisible duration and waits for redeliveries. Never imported by pytest (its
generated protos clash with wharf.rocketmq.v2 in one process).

    python rmq_consumer_script.py ENDPOINT TOPIC GROUP  -> one JSON object on stdout
"""

import json
import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def view(msg):
    return {
        "id": msg.message_id,
        "body": msg.body.decode(),
        "tag": msg.tag,
        "keys": sorted(msg.keys or []),
        "props": dict(msg.properties or {}),
        "attempt": msg.delivery_attempt,
        "corrupted": bool(getattr(msg, "corrupted", False)),
    }


def receive_until(consumer, want, invisible_s, deadline_s):
    """Receive until ``want`` messages came back (or the time runs out)."""
    got = []
    deadline = time.time() + deadline_s
    while len(got) < want and time.time() < deadline:
        got.extend(consumer.receive(32, invisible_s))
    return got


def main():
    endpoint, topic, group = sys.argv[1:4]
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()
    sent = []
    for i in range(6):
        msg = Message()
        msg.topic = topic
        msg.body = f"pop-{i}".encode()
        msg.tag = "TagA" if i % 2 == 0 else "TagB"
        msg.keys = f"key-{i}"
        msg.add_property("n", str(i))
        sent.append(producer.send(msg).message_id)
    producer.shutdown()

    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    out = {"sent": sent}
    try:
        first = receive_until(consumer, 6, 30, 30)
        out["first"] = [view(m) for m in first]
        by_body = {m.body.decode(): m for m in first}
        # pop-0 and pop-1 are acked; pop-2 gets 2 s more and is not acked; pop-3 is left to
        # its 30 s: it must not come back during this run; pop-4 and pop-5 are acked later.
        consumer.ack(by_body["pop-0"])
        consumer.ack(by_body["pop-1"])
        stale = by_body["pop-2"].receipt_handle
        consumer.change_invisible_duration(by_body["pop-2"], 2)
        out["handle_changed"] = by_body["pop-2"].receipt_handle != stale
        consumer.ack(by_body["pop-4"])
        consumer.ack(by_body["pop-5"])
        again = receive_until(consumer, 1, 30, 15)
        out["again"] = [view(m) for m in again]
        for m in again:
            consumer.ack(m)
        # an ack with the handle of the delivery before the change is refused
        by_body["pop-2"].receipt_handle = stale
        try:
            consumer.ack(by_body["pop-2"])
            out["stale_ack"] = None
        except Exception as exc:
            out["stale_ack"] = {"type": type(exc).__name__, "code": getattr(exc, "code", None)}
        out["after"] = [view(m) for m in consumer.receive(32, 30)]
    finally:
        consumer.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
