"""Run by tests/broker/v2/test_acl_v2.py with the OFFICIAL RocketMQ Python client (5.1.2, from
.venv-rmq/): a Producer sends 3 messages and a SimpleConsumer receives and acks them, signed
with the given credentials (``Credentials(ak, sk)``: the client's own signature code). A step
that fails is reported with the client's exception, not raised. Never imported by pytest.

    python rmq_acl_script.py ENDPOINT TOPIC GROUP AK SK  -> one JSON object on stdout
"""

import contextlib
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


def error(exc):
    return {"type": type(exc).__name__, "message": str(exc), "code": getattr(exc, "code", None)}


def main():
    endpoint, topic, group, ak, sk = sys.argv[1:6]
    config = ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=3)
    out = {"sent": [], "received": [], "send_error": None, "receive_error": None}
    producer = Producer(config, (topic,))
    try:
        producer.startup()
        for i in range(3):
            msg = Message()
            msg.topic = topic
            msg.body = f"acl-{i}".encode()
            out["sent"].append(producer.send(msg).message_id)
    except Exception as exc:
        out["send_error"] = error(exc)
    finally:
        with contextlib.suppress(Exception):
            producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=3)
    try:
        consumer.startup()
        deadline = time.time() + 20
        while len(out["received"]) < len(out["sent"]) and time.time() < deadline:
            for m in consumer.receive(16, 30):
                consumer.ack(m)
                out["received"].append(m.body.decode())
        if not out["sent"]:
            consumer.receive(16, 30)
    except Exception as exc:
        out["receive_error"] = error(exc)
    finally:
        with contextlib.suppress(Exception):
            consumer.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
