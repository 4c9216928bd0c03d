"""Run by tests/broker/v2/test_official_client.py with the OFFICIAL RocketMQ Python client
(rocketmq-python-client 5.1.2, from .venv-rmq/): never imported by pytest (its generated
apache.rocketmq.v2 protos clash with wharf.rocketmq.v2 in one process).

    python rmq_producer_script.py ENDPOINT TOPIC FIFO_TOPIC  -> one JSON object on stdout
"""

import json
import sys
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
)


class Listener(MessageListener):
    def consume(self, message):
        return ConsumeResult.SUCCESS


def new_message(topic, body, tag=None, keys=(), props=None, group=None):
    msg = Message()
    msg.topic = topic
    msg.body = body
    if tag:
        msg.tag = tag
    for key in keys:
        msg.keys = key
    for name, value in (props or {}).items():
        msg.add_property(name, value)
    if group:
        msg.message_group = group
    return msg


def error_of(call):
    try:
        call()
    except Exception as exc:  # the client's own exception types
        return {"type": type(exc).__name__, "message": str(exc), "code": getattr(exc, "code", None)}
    return None


def main():
    endpoint, topic, fifo_topic = sys.argv[1:4]
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic, fifo_topic))
    producer.startup()
    out = {"sent": [], "fifo": []}
    # The Telemetry settings reply sets the producer's body limit (not awaited by startup).
    deadline = time.time() + 10
    while time.time() < deadline and producer._Producer__max_body_size == 4 * 1024 * 1024:
        time.sleep(0.05)
    out["max_body_size"] = producer._Producer__max_body_size
    try:
        for i in range(5):
            props = {"order": str(i), "region": "eu-1"}
            msg = new_message(topic, f"sync-{i}".encode(), "TagA", (f"k{i}", "shared"), props)
            receipt = producer.send(msg)
            out["sent"].append(
                {
                    "id": receipt.message_id,
                    "body": f"sync-{i}",
                    "tag": "TagA",
                    "keys": [f"k{i}", "shared"],
                    "props": props,
                }
            )
        futures = []
        for i in range(5):
            props = {"async": "yes", "n": str(i)}
            msg = new_message(topic, f"async-{i}".encode(), "TagB", (f"a{i}",), props)
            futures.append((i, props, producer.send_async(msg)))
        for i, props, future in futures:
            receipt = future.result(timeout=10)
            out["sent"].append(
                {
                    "id": receipt.message_id,
                    "body": f"async-{i}",
                    "tag": "TagB",
                    "keys": [f"a{i}"],
                    "props": props,
                }
            )
        for i in range(12):
            group = f"group-{i % 3}"
            msg = new_message(fifo_topic, f"fifo-{i}".encode(), "F", (), None, group)
            receipt = producer.send(msg)
            out["fifo"].append({"id": receipt.message_id, "body": f"fifo-{i}", "group": group})
        big = out["max_body_size"] + 1
        # The client refuses locally with the broker's limit from the settings reply...
        out["too_large_client"] = error_of(lambda: producer.send(new_message(topic, b"x" * big)))
        # ... and a client that ignores it gets the broker's MESSAGE_BODY_TOO_LARGE.
        producer._Producer__max_body_size = 1 << 30
        out["too_large_server"] = error_of(lambda: producer.send(new_message(topic, b"x" * big)))
    finally:
        producer.shutdown()
    # A PushConsumer starts: it waits for its settings reply, then asks QueryAssignment.
    # (Consuming needs ReceiveMessage, not implemented yet.)
    config = ClientConfiguration(endpoint, Credentials())
    consumer = PushConsumer(config, "push-group", Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    out["push_consumer_started"] = consumer.is_running
    consumer.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
