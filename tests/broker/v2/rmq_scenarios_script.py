"""Run by tests/broker/v2/test_official_scenarios.py with the OFFICIAL RocketMQ Python client
(rocketmq-python-client 5.1.2, from .venv-rmq/): FIFO order, dead letters, the PushConsumer,
and the two halves of a broker restart between receive and ack. Never imported by pytest (its
generated protos clash with wharf.rocketmq.v2 in one process).

    python rmq_scenarios_script.py ENDPOINT SCENARIO TOPIC GROUP [ARG]  -> one JSON object
"""

import json
import sys
import threading
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
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


def send(config, topic, bodies, group_of=None):
    """Send each body (FIFO when ``group_of(body)`` names a message group); their ids."""
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        ids = []
        for body in bodies:
            msg = Message()
            msg.topic = topic
            msg.body = body.encode()
            if group_of is not None:
                msg.message_group = group_of(body)
            ids.append(producer.send(msg).message_id)
        return ids
    finally:
        producer.shutdown()


def simple(config, topic, group):
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=3)
    consumer.startup()
    return consumer


def fifo(config, topic, group, _):
    """3 message groups x 4 messages; each receive may hold at most one message of a group
    (the next waits for the ack of the one in flight); returns every batch as received."""
    bodies = [f"{g}-{i}" for i in range(4) for g in ("a", "b", "c")]
    sent = send(config, topic, bodies, group_of=lambda body: body.split("-")[0])
    consumer = simple(config, topic, group)
    batches = []
    try:
        deadline = time.time() + 60
        while sum(len(b) for b in batches) < len(bodies) and time.time() < deadline:
            got = consumer.receive(32, 30)
            if not got:
                continue
            batches.append([[m.message_group, m.body.decode(), m.delivery_attempt] for m in got])
            for m in got:
                consumer.ack(m)
    finally:
        consumer.shutdown()
    return {"sent": sent, "batches": batches}


def simple_dlq(config, topic, group, _):
    """A message never acked: delivered max-attempts times (the group's retryMaxTimes + 1 = 2),
    then gone from the group (the broker moved it to %DLQ%<group>)."""
    sent = send(config, topic, ["poison"])
    consumer = simple(config, topic, group)
    attempts = []
    try:
        deadline = time.time() + 30
        while len(attempts) < 2 and time.time() < deadline:
            attempts.extend(m.delivery_attempt for m in consumer.receive(32, 1))
        time.sleep(1.5)  # the second delivery's invisible time passes
        after = [m.body.decode() for m in consumer.receive(32, 1)]
    finally:
        consumer.shutdown()
    return {"sent": sent, "attempts": attempts, "after": after}


class Recorder(MessageListener):
    def __init__(self, fail=()):
        self.seen = []
        self.fail = set(fail)
        self.lock = threading.Lock()

    def consume(self, message):
        body = message.body.decode()
        with self.lock:
            self.seen.append([body, message.delivery_attempt])
        return ConsumeResult.FAILURE if body in self.fail else ConsumeResult.SUCCESS

    def count(self, body):
        with self.lock:
            return sum(1 for b, _ in self.seen if b == body)


def push(config, topic, group, count):
    """A PushConsumer started before the sends consumes every message once."""
    bodies = [f"push-{i}" for i in range(int(count))]
    recorder = Recorder()
    consumer = PushConsumer(config, group, recorder, {topic: FilterExpression("*")})
    consumer.startup()
    try:
        sent = send(config, topic, bodies)
        deadline = time.time() + 30
        while len({b for b, _ in recorder.seen}) < len(bodies) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # acked messages must not come again
    finally:
        consumer.shutdown()
    return {"sent": sent, "seen": recorder.seen}


def push_fifo_dlq(config, topic, group, _):
    """A FIFO PushConsumer whose listener fails one message: the client retries it locally
    (max attempts from the group), then forwards it to the DLQ and goes on with its group."""
    recorder = Recorder(fail={"a-poison"})
    consumer = PushConsumer(config, group, recorder, {topic: FilterExpression("*")})
    consumer.startup()
    try:
        send(config, topic, ["a-poison", "a-next", "b-other"], group_of=lambda b: b.split("-")[0])
        deadline = time.time() + 40
        while time.time() < deadline and not (
            recorder.count("a-next") and recorder.count("b-other")
        ):
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        consumer.shutdown()
    return {"seen": recorder.seen}


def receive_partial(config, topic, group, _):
    """Send 4, receive them (invisible 5 s), ack 2: the broker then dies before the others."""
    sent = send(config, topic, [f"r-{i}" for i in range(4)])
    consumer = simple(config, topic, group)
    try:
        got = []
        deadline = time.time() + 20
        while len(got) < 4 and time.time() < deadline:
            got.extend(consumer.receive(32, 5))
        got.sort(key=lambda m: m.body)
        for m in got[:2]:
            consumer.ack(m)
    finally:
        consumer.shutdown()
    return {
        "sent": sent,
        "acked": [m.body.decode() for m in got[:2]],
        "unacked": [m.body.decode() for m in got[2:]],
    }


def receive_rest(config, topic, group, want):
    """After the restart: what comes back (until ``want`` did, or 30 s), acked; then nothing."""
    consumer = simple(config, topic, group)
    try:
        got = []
        deadline = time.time() + 30
        while len(got) < int(want) and time.time() < deadline:
            got.extend(consumer.receive(32, 30))
        for m in got:
            consumer.ack(m)
        after = [m.body.decode() for m in consumer.receive(32, 30)]
    finally:
        consumer.shutdown()
    return {"back": sorted([m.body.decode(), m.delivery_attempt] for m in got), "after": after}


class Checker(TransactionChecker):
    """Answers check-backs: commit "check-commit", roll back anything else."""

    def __init__(self):
        self.asked = []
        self.lock = threading.Lock()

    def check(self, message):
        body = message.body.decode()
        with self.lock:
            self.asked.append([body, message.topic])
        if body == "check-commit":
            return TransactionResolution.COMMIT
        return TransactionResolution.ROLLBACK


def transactions(config, topic, group, _):
    """Commit, rollback, and two halves left open for the broker's check-back to resolve."""
    checker = Checker()
    producer = Producer(config, (topic,), checker=checker)
    producer.startup()
    out = {}
    try:
        for body, action in (("commit-me", "commit"), ("rollback-me", "rollback"),
                             ("check-commit", None), ("check-rollback", None)):  # fmt: skip
            msg = Message()
            msg.topic = topic
            msg.body = body.encode()
            tx = producer.begin_transaction()
            receipt = producer.send(msg, tx)
            out.setdefault("ids", {})[body] = receipt.message_id
            if action == "commit":
                tx.commit()
            elif action == "rollback":
                tx.rollback()
        deadline = time.time() + 30
        while time.time() < deadline and len({b for b, _ in checker.asked}) < 2:
            time.sleep(0.1)
        time.sleep(1.0)  # the checker's END reaches the broker
    finally:
        producer.shutdown()
    out["asked"] = checker.asked
    return out


SCENARIOS = {
    "fifo": fifo,
    "simple-dlq": simple_dlq,
    "push": push,
    "push-fifo-dlq": push_fifo_dlq,
    "receive-partial": receive_partial,
    "receive-rest": receive_rest,
    "transactions": transactions,
}


def main():
    endpoint, scenario, topic, group = sys.argv[1:5]
    arg = sys.argv[5] if len(sys.argv) > 5 else None
    config = ClientConfiguration(endpoint, Credentials())
    print(json.dumps(SCENARIOS[scenario](config, topic, group, arg)))


if __name__ == "__main__":
    main()
