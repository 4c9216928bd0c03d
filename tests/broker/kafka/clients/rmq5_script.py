"""Run by tests/broker/kafka/test_cross_protocol.py with the OFFICIAL RocketMQ 5.x Python client
(rocketmq-python-client 5.1.2, from .venv-rmq/). Never imported by pytest (its generated
apache.rocketmq.v2 protos clash with wharf.rocketmq.v2 in one process).

    python rmq5_script.py ENDPOINT send TOPIC JSON_MESSAGES   -> {"ids": [...]}
    python rmq5_script.py ENDPOINT receive TOPIC GROUP WANT   -> {"received": [...]}

A message is ``{"body_hex", "tag", "keys", "props"}`` both ways (``id`` too when received).
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


def send(config, topic, messages):
    producer = Producer(config, (topic,))
    producer.startup()
    ids = []
    try:
        for spec in messages:
            msg = Message()
            msg.topic = topic
            msg.body = bytes.fromhex(spec["body_hex"])
            if spec.get("tag"):
                msg.tag = spec["tag"]
            for key in spec.get("keys", ()):
                msg.keys = key  # the setter appends
            for name, value in spec.get("props", {}).items():
                msg.add_property(name, value)
            ids.append(producer.send(msg).message_id)
    finally:
        producer.shutdown()
    return {"ids": ids}


def receive(config, topic, group, want):
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    received = []
    try:
        deadline = time.time() + 20
        while len(received) < want and time.time() < deadline:
            for msg in consumer.receive(32, 30):
                received.append(
                    {
                        "id": msg.message_id,
                        "body_hex": msg.body.hex(),
                        "tag": msg.tag,
                        "keys": list(msg.keys or []),
                        "props": dict(msg.properties or {}),
                    }
                )
                consumer.ack(msg)
    finally:
        consumer.shutdown()
    return {"received": received}


def main():
    endpoint, mode, topic = sys.argv[1:4]
    config = ClientConfiguration(endpoint, Credentials())
    if mode == "send":
        out = send(config, topic, json.loads(sys.argv[4]))
    elif mode == "receive":
        out = receive(config, topic, sys.argv[4], int(sys.argv[5]))
    else:
        raise SystemExit("unknown mode " + mode)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
