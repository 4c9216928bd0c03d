"""What Kafka transactions cost on Wharf, with confluent-kafka (librdkafka 2.16): a
transactional producer committing every ~10 ms against the idempotent producer, and a
read_committed fetch against a read_uncommitted one of the same transactional data.

    .venv/bin/python -m tests.bench.kafka_txn [--quick] [--messages 100000] [--size 1024]
        [--rounds 6] [--partitions 4] [--abort-every 10] [--output FILE]

Each round starts a fresh daemon (ASYNC_FLUSH, logging at WARNING) in a temporary directory
and runs, in an order alternating between rounds:

- ``idempotent produce``: ``enable.idempotence`` (acks=all), ``--messages`` records of
  ``--size`` random bytes, then ``flush()``;
- ``transactional produce``: the same records in transactions of ~10 ms each
  (``begin_transaction``, produce for 10 ms, ``commit_transaction``), every
  ``--abort-every``-th aborted instead (its records partly stored, as a failed batch would);

then, on the transactional topic, ``read_uncommitted fetch`` and ``read_committed fetch`` (a
consumer assigned every partition from the start until it has every record it can see:
all stored records, respectively the committed ones), in alternating order.

Figures per phase: msg/s (wall) and the broker's CPU per message (/proc/PID/stat). Targets,
judged on the per-round ratios (median and its distribution-free 95% interval,
``pooled.py``; met / missed only when the interval lies on one side): transactional produce
throughput >= 1/1.5 of the idempotent producer's; read_committed fetch time <= 1.2x
read_uncommitted's (per record). Not a CI test: figures, not asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.bench.broker_send import process_cpu_seconds
from tests.bench.kafka import create_topic
from tests.bench.pooled import decide, median_interval
from tests.harness import Daemons

SETTINGS = {"flushDiskType": "ASYNC_FLUSH", "logLevel": "WARNING"}
TXN_MS = 10  # how long each transaction produces before it commits


def measured(pid: int, work: Callable[[], int]) -> dict[str, float]:
    cpu = process_cpu_seconds(pid)
    started = time.perf_counter()
    count = work()
    seconds = time.perf_counter() - started
    used = process_cpu_seconds(pid) - cpu
    return {"messages": count, "seconds": seconds, "msgs_per_s": count / seconds,
            "broker_cpu_us": used / max(count, 1) * 1e6}  # fmt: skip


def _produce(producer: Producer, topic: str, body: bytes, on_delivery: Callable) -> None:
    while True:
        try:
            producer.produce(topic, body, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: serve delivery reports
            producer.poll(0.01)


def idempotent(bootstrap: str, topic: str, count: int, size: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[object] = []
    body = os.urandom(size)
    for _ in range(count):
        _produce(producer, topic, body, lambda err, _m: err and failed.append(err))
        producer.poll(0)
    if producer.flush(120) or failed:
        raise SystemExit(f"idempotent producer: {len(failed)} failed: {failed[:3]}")
    return count


def transactional(bootstrap: str, topic: str, args: argparse.Namespace, seen: dict) -> int:
    """Produce ``args.messages`` records in ~10 ms transactions; ``seen``: records stored
    (delivered) in all and in committed transactions."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}"})
    producer.init_transactions(30)
    body = os.urandom(args.size)
    sent = transactions = 0
    delivered = {"n": 0}

    def report(err: object, _msg: object) -> None:
        if err is None:
            delivered["n"] += 1

    while sent < args.messages:
        producer.begin_transaction()
        transactions += 1
        before = delivered["n"]
        end = time.perf_counter() + TXN_MS / 1000
        while sent < args.messages and time.perf_counter() < end:
            _produce(producer, topic, body, report)
            producer.poll(0)
            sent += 1
        if args.abort_every and transactions % args.abort_every == 0:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)  # flushes first: every record delivered
            seen["committed"] += delivered["n"] - before
    producer.flush(30)
    seen["stored"], seen["transactions"] = delivered["n"], transactions
    return sent


def fetch(bootstrap: str, topic: str, partitions: int, isolation: str, count: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got, deadline = 0, time.monotonic() + 300
    try:
        while got < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    got += 1
    finally:
        consumer.close()
    if got < count:
        raise SystemExit(f"{isolation}: fetched {got} of {count} records")
    return got


def run_round(pid: int, bootstrap: str, args: argparse.Namespace, n: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    seen = {"committed": 0}
    create_topic(bootstrap, "idem", args.partitions)
    create_topic(bootstrap, "txn", args.partitions)
    produce = [
        ("idempotent produce", lambda: idempotent(bootstrap, "idem", args.messages, args.size)),
        ("transactional produce", lambda: transactional(bootstrap, "txn", args, seen)),
    ]
    for name, work in produce if n % 2 == 0 else produce[::-1]:
        out[name] = measured(pid, work)
    time.sleep(1)  # the last markers dispatched
    fetches = [
        ("read_uncommitted fetch",
         lambda: fetch(bootstrap, "txn", args.partitions, "read_uncommitted", seen["stored"])),
        ("read_committed fetch",
         lambda: fetch(bootstrap, "txn", args.partitions, "read_committed", seen["committed"])),
    ]  # fmt: skip
    for name, work in fetches if n % 2 == 0 else fetches[::-1]:
        out[name] = measured(pid, work)
    out["transactions"] = {"count": seen["transactions"], "stored": seen["stored"],
                           "committed": seen["committed"]}  # fmt: skip
    return out


def summarize(rounds: list[dict[str, dict]]) -> dict[str, object]:
    def ratios(a: str, b: str, figure: str) -> list[float]:
        return [r[a][figure] / r[b][figure] for r in rounds]

    produce = ratios("transactional produce", "idempotent produce", "msgs_per_s")
    # time per record: read_committed's over read_uncommitted's
    fetch_time = [
        (r["read_committed fetch"]["seconds"] / r["read_committed fetch"]["messages"])
        / (r["read_uncommitted fetch"]["seconds"] / r["read_uncommitted fetch"]["messages"])
        for r in rounds
    ]
    summary = {
        "medians": {
            name: {
                k: statistics.median(r[name][k] for r in rounds)
                for k in ("msgs_per_s", "broker_cpu_us")
            }
            for name in (
                "idempotent produce",
                "transactional produce",
                "read_uncommitted fetch",
                "read_committed fetch",
            )
        },
        "transactional / idempotent msg/s": {
            "median": statistics.median(produce),
            "interval": median_interval(produce),
            "target >= 0.667": decide(produce, ">=", 1 / 1.5),
        },
        "read_committed / read_uncommitted time a record": {
            "median": statistics.median(fetch_time),
            "interval": median_interval(fetch_time),
            "target <= 1.2": decide(fetch_time, "<=", 1.2),
        },
    }
    print(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.kafka_txn", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 1 round")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--abort-every", type=int, default=10)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds = 20_000, 1
    rounds = []
    settings = {**SETTINGS, "defaultTopicQueueNums": args.partitions}
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="wharf-bench-txn-") as tmp:
            daemons = Daemons(Path(tmp))
            with daemons.broker(Path(tmp) / "wharf", settings=settings,
                                extra_args=["--kafka-listen", "127.0.0.1:0"]) as broker:  # fmt: skip
                rounds.append(run_round(broker.pid, broker.kafka_endpoint, args, n))
                print(json.dumps({"round": n, **rounds[-1]}), flush=True)
    summary = summarize(rounds)
    if args.output:
        args.output.write_text(json.dumps({"args": vars(args) | {"output": str(args.output)},
                                           **summary, "rounds": rounds}, indent=2, default=str))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
