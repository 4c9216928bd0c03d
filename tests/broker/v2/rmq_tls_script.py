"""Run by tests/broker/v2/test_official_client_tls.py with the OFFICIAL RocketMQ Python client
(rocketmq-python-client 5.1.2, from .venv-rmq/) over TLS: ``tls_enable=True`` on a Producer and
a SimpleConsumer, the broker's certificate trusted through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (the
client passes no CA of its own: ``grpc.ssl_channel_credentials()``, the system roots). Never
imported by pytest (its generated protos clash with wharf.rocketmq.v2 in one process).

    python rmq_tls_script.py ENDPOINT TOPIC GROUP  -> one JSON object on stdout
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

COUNT = 5


def main():
    endpoint, topic, group = sys.argv[1:4]
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,), tls_enable=True)
    producer.startup()
    sent = []
    for i in range(COUNT):
        msg = Message()
        msg.topic = topic
        msg.body = f"tls-{i}".encode()
        msg.tag = "TLS"
        sent.append(producer.send(msg).message_id)
    producer.shutdown()

    consumer = SimpleConsumer(
        config, group, {topic: FilterExpression("*")}, await_duration=5, tls_enable=True
    )
    consumer.startup()
    received = []
    try:
        deadline = time.time() + 30
        while len(received) < COUNT and time.time() < deadline:
            for m in consumer.receive(32, 30):
                consumer.ack(m)
                received.append({"id": m.message_id, "body": m.body.decode(), "tag": m.tag})
    finally:
        consumer.shutdown()
    print(json.dumps({"sent": sent, "received": received}))


if __name__ == "__main__":
    main()
