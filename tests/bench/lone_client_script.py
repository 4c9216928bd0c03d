"""A lone message's latency through a RocketMQ client of another venv, for
tests/bench/protocol_latency.py (never imported by the project: both clients' packages are
named ``rocketmq`` and the official one's generated protos clash with wharf.rocketmq.v2).

    python lone_client_script.py CLIENT ADDRESS TOPIC GROUP RATE SECONDS SIZE WARMUP_S

CLIENT is ``v2`` (the official RocketMQ 5 client, rocketmq-python-client 5.1.2, run with
.venv-rmq/bin/python; ADDRESS is the broker's gRPC endpoint): ``Producer.send`` and a
``PushConsumer``; or ``cpp`` (Apache's RocketMQ 4.x C++ client, PyPI ``rocketmq==0.4.4``, run
with .venv-rmq4/bin/python; ADDRESS is the broker's remoting port, also its NameServer):
``Producer.send_sync`` and a ``PushConsumer``. Both with the library's defaults.

One process, one clock: the producer sends one message (the topic is made), the push consumer
starts, then messages go out at RATE msg/s (open loop: message i is due at start + i / RATE;
a late one goes at once) from this thread, one sync send after another. Each body (SIZE bytes)
starts with ``m SEQ NS`` where NS is ``time.perf_counter_ns()`` taken right before the send
call; the consumer's callback takes ``perf_counter_ns()`` first thing and records the
difference. Warm-up messages (``w SEQ NS``) go at the same rate until WARMUP_S passed and every
one sent more than 0.5 s before has been delivered (the consumer owns every queue and its polls
are parked), at most 120 s; they are not recorded. Then RATE x SECONDS messages are timed, and
the script waits up to 15 s for the last deliveries. Prints one JSON line: sent, send_failed,
delivered (distinct timed messages), duplicates, latencies_ms (send call -> callback, each
timed message once), send_ms (each send call's duration), warmup_s. Ends with ``os._exit``:
the C++ wrapper's destructors can hang at interpreter exit, and a client's shutdown is bounded.
"""

import json
import os
import sys
import threading
import time

DRAIN_S = 15.0
WARMUP_MAX_S = 120.0
SETTLED_AFTER_S = 0.5


class Recorder:
    """What the consumer's callback saw, by sequence number."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latency_ns = {}  # timed seq -> ns from the send call to the callback
        self.warm = set()  # warm-up seqs delivered
        self.duplicates = 0

    def on_body(self, now_ns, body):
        kind, seq, sent_ns = body[:64].split(b" ", 3)[:3]
        seq = int(seq)
        with self.lock:
            if kind == b"w":
                self.warm.add(seq)
            elif seq in self.latency_ns:
                self.duplicates += 1
            else:
                self.latency_ns[seq] = now_ns - int(sent_ns)


def body_of(kind, seq, size):
    head = b"%s %d %d " % (kind, seq, time.perf_counter_ns())
    return head + b"x" * max(0, size - len(head))


def paced(rate, count=None, until=None):
    """Yield 0, 1, 2, ... each at its due time (start + i / rate), ``count`` of them or while
    ``until()`` is false."""
    start = time.perf_counter()
    i = 0
    while (count is None or i < count) and not (until is not None and until()):
        pause = start + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        yield i
        i += 1


def run(send, recorder, rate, seconds, size, warmup_s):
    """Warm up, time ``rate * seconds`` sends, wait for the deliveries; the JSON report."""
    warm_sent = []  # (perf_counter when sent, seq)
    started = time.perf_counter()

    def warmed():
        now = time.perf_counter()
        if now - started > WARMUP_MAX_S:
            raise SystemExit(f"warm-up: {len(recorder.warm)} of {len(warm_sent)} delivered")
        if now - started < warmup_s:
            return False
        due = [seq for at, seq in warm_sent if now - at > SETTLED_AFTER_S]
        with recorder.lock:
            return len(due) >= 16 and all(seq in recorder.warm for seq in due)

    for seq in paced(rate, until=warmed):
        send(body_of(b"w", seq, size))
        warm_sent.append((time.perf_counter(), seq))
    warmup = time.perf_counter() - started

    count = max(1, round(rate * seconds))
    send_ns, failed = [], 0
    for seq in paced(rate, count=count):
        t0 = time.perf_counter_ns()
        try:
            send(body_of(b"m", seq, size))
        except Exception as exc:  # counted, not raised: the report says how many
            failed += 1
            if failed == 1:
                print(f"first failed send: {exc!r}", file=sys.stderr, flush=True)
        send_ns.append(time.perf_counter_ns() - t0)
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline:
        with recorder.lock:
            if len(recorder.latency_ns) >= count - failed:
                break
        time.sleep(0.05)
    with recorder.lock:
        latencies = [ns / 1e6 for ns in recorder.latency_ns.values()]
        duplicates = recorder.duplicates
    return {
        "sent": count - failed,
        "send_failed": failed,
        "delivered": len(latencies),
        "duplicates": duplicates,
        "latencies_ms": [round(v, 4) for v in latencies],
        "send_ms": [round(ns / 1e6, 4) for ns in send_ns],
        "warmup_s": round(warmup, 2),
    }


def bounded(fn, timeout=10.0):
    stopping = threading.Thread(target=fn, daemon=True)
    stopping.start()
    stopping.join(timeout)


def official_v2(endpoint, topic, group, rate, seconds, size, warmup_s):
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

    recorder = Recorder()

    class Listener(MessageListener):
        def consume(self, message):
            now = time.perf_counter_ns()
            recorder.on_body(now, message.body)
            return ConsumeResult.SUCCESS

    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()

    def send(body):
        msg = Message()
        msg.topic = topic
        msg.body = body
        producer.send(msg)

    send(body_of(b"w", -1, size))  # the topic exists before the consumer looks it up
    consumer = PushConsumer(config, group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    report = run(send, recorder, rate, seconds, size, warmup_s)
    bounded(consumer.shutdown)
    bounded(producer.shutdown)
    return report


def cpp_4x(namesrv, topic, group, rate, seconds, size, warmup_s):
    from rocketmq.client import Message, Producer, PushConsumer

    recorder = Recorder()
    producer = Producer(group + "-producer", timeout=10000)
    producer.set_namesrv_addr(namesrv)
    producer.start()

    def send(body):
        msg = Message(topic)
        msg.set_body(body)
        result = producer.send_sync(msg)
        if int(result.status) != 0:  # SendStatus.OK
            raise RuntimeError(f"send status {int(result.status)}")

    def on_message(msg):
        now = time.perf_counter_ns()
        recorder.on_body(now, msg.body)

    send(body_of(b"w", -1, size))  # the topic exists before the consumer looks it up
    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message)  # the callback never raises
    consumer.start()
    report = run(send, recorder, rate, seconds, size, warmup_s)
    bounded(consumer.shutdown)
    bounded(producer.shutdown)
    return report


def main():
    client, address, topic, group = sys.argv[1:5]
    rate, seconds, size, warmup_s = (
        int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
    )  # fmt: skip
    drive = {"v2": official_v2, "cpp": cpp_4x}[client]
    report = drive(address, topic, group, rate, seconds, size, warmup_s)
    print(json.dumps({"client": client, **report}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
