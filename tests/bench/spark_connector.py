"""Benchmark of the Spark connector on local[2]: rows/s of the sink, the topic source (Arrow
batches vs tuples) and the offline CommitLog scan, each next to a no-Spark peer measured in
the same run (one Python process doing the same work over the same API or codec).

    .venv/bin/python -m tests.bench.spark_connector --messages 100000 --body-size 256

Starts its own broker (tests/harness.py: 127.0.0.1, ephemeral ports) in a temporary
directory unless ``--endpoints`` and ``--store-dir`` name a running one. Spark's one-time
start-up (JVM, Python workers) is paid by a warm-up query and not counted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.harness import BrokerProcess

TOPIC = "spark-bench"


@contextmanager
def _broker(root: Path, queues: int) -> Iterator[tuple[str, Path]]:
    # 8 MiB segments: the offline scan gets one Spark task per segment to spread over 2 cores.
    settings = {"defaultTopicQueueNums": queues, "mappedFileSizeCommitLog": 8 * 1024 * 1024}
    with BrokerProcess(root, settings=settings, ready_timeout=60.0) as broker:
        yield broker.endpoint, broker.store_dir


def _spark():  # type: ignore[no-untyped-def]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from wharf.client.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("wharf-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _peer_send(endpoint: str, count: int, body_size: int, topic: str) -> None:
    """What the sink does per row, without Spark: encode a record, send 256 per request."""
    from wharf.client.record_encoder import RecordEncoder
    from wharf.client.spark.rpc import BrokerRpc

    encoder = RecordEncoder()
    tail = encoder.tail(topic)
    with BrokerRpc([endpoint]) as rpc:
        for first in range(0, count, 256):
            chunk = [
                encoder.encode_bare(
                    tail, (f"m{i}".encode() + b"x" * body_size)[:body_size], f"peer-{i}"
                )
                for i in range(first, min(first + 256, count))
            ]
            rpc.send_records(topic, None, chunk, "bench")


def _peer_pull(endpoint: str, topic: str) -> int:
    """What the source does per queue, without Spark: raw-record pulls, every body read."""
    from wharf.client.records import messages_from_reply
    from wharf.client.spark.rpc import BrokerRpc

    rows = body_bytes = 0
    with BrokerRpc([endpoint]) as rpc:
        for q in rpc.queue_bounds(topic):
            offset = q.min_offset
            while offset < q.max_offset:
                reply = rpc.pull_records("bench", topic, q.queue_id, offset, 1024, "*")
                messages = messages_from_reply(reply, "*")
                rows += len(messages)
                body_bytes += sum(len(m.body) for m in messages)
                offset = reply.next_begin_offset
    return rows


def _peer_scan(store: Path) -> int:

    from wharf.client.spark.columns import store_schema
    from wharf.client.spark.store_scan import list_segments, parse_scan_options, scan_segment

    opts = parse_scan_options({"path": str(store)})
    schema = store_schema()
    return sum(
        batch.num_rows
        for seg in list_segments(opts.commit_log_dir)
        for batch in scan_segment(opts, schema, seg)
    )


def _wait_visible(endpoint: str, topic: str, count: int) -> None:
    from wharf.client.spark.rpc import BrokerRpc

    with BrokerRpc([endpoint]) as rpc:
        while sum(q.max_offset - q.min_offset for q in rpc.queue_bounds(topic)) < count:
            time.sleep(0.05)


def _read_results(
    results: list[tuple[str, int, float]], read: Callable[..., object], endpoint: str, n: int
) -> None:
    """The source (Arrow batches, tuples; best of two each) and its one-process peer."""
    arrow = min(_timed(lambda: read()) for _ in range(2))
    results.append(("source: wharf, Arrow batches", n, arrow))
    tuples = min(_timed(lambda: read(arrowBatches="false")) for _ in range(2))
    results.append(("source: wharf, tuples", n, tuples))
    results.append(
        ("  peer: 1 process, raw pulls x1024", n, _timed(lambda: _peer_pull(endpoint, TOPIC)))
    )  # fmt: skip


def run(args: argparse.Namespace, endpoint: str, store: Path) -> list[tuple[str, int, float]]:
    from pyspark.sql import functions as F

    spark = _spark()
    n, size = args.messages, args.body_size
    results: list[tuple[str, int, float]] = []

    def read(**options: str):  # type: ignore[no-untyped-def]
        reader = spark.read.format("wharf").option("endpoints", endpoint).option("topic", TOPIC)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load().agg(F.sum(F.length("body"))).collect()

    def write(count: int, topic: str, transactional: str = "true") -> None:
        df = spark.range(0, count, 1, numPartitions=2).selectExpr(
            f"substr(concat('m', id, repeat('x', {size})), 1, {size}) AS body"
        )
        df.write.format("wharf").option("endpoints", endpoint).option("topic", topic).option(
            "transactional", transactional
        ).mode("append").save()

    # JVM and Python worker start-up and the first use of each source: not measured.
    write(200, "spark-bench-warmup")
    spark.read.format("wharf").option("endpoints", endpoint).option(
        "topic", "spark-bench-warmup"
    ).load().count()
    spark.read.format("wharf-store").load(str(store)).count()

    if args.source_only:  # the rows written once (records path), then the source alone
        write(n, TOPIC, "false")
        _wait_visible(endpoint, TOPIC, n)
        _read_results(results, read, endpoint, n)
        spark.stop()
        return results

    # Best of two runs each: the machine is shared, the slower run measures the neighbours.
    sink = min(_timed(lambda: write(n, TOPIC)), _timed(lambda: write(n, f"{TOPIC}-2")))
    results.append(("sink: df.write.format('wharf'), exactly once", n, sink))
    plain = min(_timed(lambda i=i: write(n, f"{TOPIC}-{i}", "false")) for i in (3, 4))
    results.append(("sink: transactional=false (records)", n, plain))
    peer_n = max(n // 4, 1000)
    results.append(
        ("  peer: 1 process, records x256", peer_n,
         _timed(lambda: _peer_send(endpoint, peer_n, size, "spark-bench-peer")))
    )  # fmt: skip
    _wait_visible(endpoint, TOPIC, n)
    _read_results(results, read, endpoint, n)
    scan = spark.read.format("wharf-store").load(str(store))
    total = scan.count()  # every record: half messages and markers of the exactly-once writes too
    segments = scan.rdd.getNumPartitions()
    offline = min(_timed(lambda: scan.agg(F.sum(F.length("body"))).collect()) for _ in range(2))
    results.append((f"offline scan: wharf-store, {segments} segments", total, offline))
    results.append(("  peer: 1 process, codec scan", total, _timed(lambda: _peer_scan(store))))
    spark.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--body-size", type=int, default=256)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--endpoints", help="use a running broker (needs --store-dir)")
    parser.add_argument("--store-dir", help="that broker's store directory")
    parser.add_argument(
        "--source-only",
        action="store_true",
        help="write the rows once (transactional=false) and time only the source and its peer",
    )
    args = parser.parse_args()
    if bool(args.endpoints) != bool(args.store_dir):
        parser.error("--endpoints and --store-dir go together")

    if args.endpoints:
        results = run(args, args.endpoints, Path(args.store_dir))
    else:
        with (
            tempfile.TemporaryDirectory(prefix="wharf-spark-bench-") as tmp,
            _broker(Path(tmp), args.queues) as (endpoint, store),
        ):
            results = run(args, endpoint, store)

    print(f"\nwharf Spark connector, local[2], {args.messages} messages of {args.body_size} B")
    print(f"{'what':46} {'rows':>9} {'seconds':>8} {'rows/s':>10}")
    for name, rows, seconds in results:
        print(f"{name:46} {rows:>9} {seconds:>8.2f} {rows / seconds:>10,.0f}")
    rates = {name: rows / seconds for name, rows, seconds in results}
    peer = rates.get("  peer: 1 process, raw pulls x1024")
    if peer:
        for name in ("source: wharf, Arrow batches", "source: wharf, tuples"):
            print(f"{name} / its raw-pull peer: {rates[name] / peer:.2f}x")


if __name__ == "__main__":
    main()
