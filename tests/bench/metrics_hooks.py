"""Cost of the metrics hot-path hooks, against prometheus_client's own Counter/Histogram.

    .venv/bin/python -m tests.bench.metrics_hooks [--batch 64] [--batches 20000] [--topics 10000]
        [--lags 25000] [--scrape HOST:PORT]

Prints nanoseconds per message for ``BrokerMetrics.on_messages_in`` (what the send path pays
per batch, divided by the batch size) and for the same bookkeeping done with labelled
prometheus_client metrics (``inc`` + ``observe`` per message), plus the cost of rendering one
scrape of 100 and of ``--topics`` topics against the same families all rendered by
prometheus_client (the sends' per-topic ones are written directly: ``broker/metrics/
exposition.py``), and of the consumer lag gauges of ``--lags`` (topic, group) pairs (written
directly too) against prometheus_client's.
"""

from __future__ import annotations

import argparse
import random
import time
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.registry import Collector
from wharf.broker.metrics import MESSAGE_SIZE_BUCKETS, BrokerMetrics, families
from wharf.broker.metrics.snapshot import GroupLag


def time_ours(sizes: list[int], batches: int) -> float:
    """ns per message of BrokerMetrics.on_messages_in."""
    metrics = BrokerMetrics()
    started = time.perf_counter()
    for _ in range(batches):
        metrics.on_messages_in("bench", sizes)
    return (time.perf_counter() - started) / (batches * len(sizes)) * 1e9


def time_peer(sizes: list[int], batches: int) -> float:
    """ns per message of the same bookkeeping with labelled prometheus_client metrics."""
    registry = CollectorRegistry()
    count = Counter("m_in", "m", ["topic"], registry=registry)
    nbytes = Counter("b_in", "b", ["topic"], registry=registry)
    size = Histogram("s", "s", ["topic"], buckets=MESSAGE_SIZE_BUCKETS, registry=registry)
    started = time.perf_counter()
    for _ in range(batches):
        count.labels("bench").inc(len(sizes))
        nbytes.labels("bench").inc(sum(sizes))
        child = size.labels("bench")
        for value in sizes:
            child.observe(value)
    return (time.perf_counter() - started) / (batches * len(sizes)) * 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.metrics_hooks")
    parser.add_argument("--batch", type=int, default=64, help="messages per send batch")
    parser.add_argument("--batches", type=int, default=20_000, help="batches to record")
    parser.add_argument(
        "--scrape", metavar="HOST:PORT", help="also time 50 scrapes of a running broker's /metrics"
    )
    parser.add_argument("--topics", type=int, default=10_000, help="topics of the large scrape")
    parser.add_argument(
        "--lags", type=int, default=25_000, help="(topic, group) consumer lags of the lag scrape"
    )
    args = parser.parse_args(argv)
    rng = random.Random(7)
    uniform = [1024] * args.batch
    mixed = [rng.choice((100, 900, 1024, 5000, 70_000)) for _ in range(args.batch)]
    for label, sizes in (("uniform 1 KiB", uniform), ("mixed sizes", mixed)):
        ours_ns = time_ours(sizes, args.batches)
        peer_ns = time_peer(sizes, args.batches)
        print(
            f"on_messages_in, {label}, batch {args.batch}: {ours_ns:7.1f} ns/msg   "
            f"prometheus_client Counter+Histogram: {peer_ns:7.1f} ns/msg   "
            f"ratio {peer_ns / ours_ns:5.1f}x"
        )

    for topics in (100, args.topics):
        time_render(topics, mixed)
    time_lags(args.lags)
    if args.scrape:
        time_live_scrapes(args.scrape)


class PeerFamilies(Collector):
    """The per-topic families as prometheus_client families: what ``render`` wrote through it
    before they were written directly (the reference tests/ops/test_metrics_unit.py holds the
    direct text against)."""

    def __init__(self, metrics: BrokerMetrics, lags: Sequence[GroupLag] = ()) -> None:
        self._metrics = metrics
        self._lags = lags

    def collect(self) -> Iterator[Any]:
        by_group, lags = ["topic", "consumer_group"], self._lags
        yield families.gauge(*families.LAG_MESSAGES, by_group, [((g.topic, g.consumer_group), g.messages) for g in lags])  # fmt: skip
        yield families.gauge(*families.LAG_LATENCY, by_group, [((g.topic, g.consumer_group), g.latency_seconds) for g in lags if g.latency_seconds is not None])  # fmt: skip
        sizes = self._metrics.message_size.items()
        yield families.counter(*families.MESSAGES_IN, ["topic"], [(k, s.count) for k, s in sizes])
        yield families.counter(*families.THROUGHPUT_IN, ["topic"], [(k, s.total) for k, s in sizes])
        yield families.histogram_of(*families.MESSAGE_SIZE, ["topic"], sizes)
        m, by_group = self._metrics, ["topic", "consumer_group"]
        yield families.counter(*families.MESSAGES_OUT, by_group, m.messages_out.items())
        yield families.counter(*families.THROUGHPUT_OUT, by_group, m.bytes_out.items())
        yield families.counter(*families.SEND_TO_DLQ, by_group, m.send_to_dlq.items())
        yield families.counter(*families.UNCONSUMED_DELETED, by_group, m.unconsumed_deleted.items())


def time_render(topics: int, sizes: list[int]) -> None:
    """One scrape's rendering (no controller) with ``topics`` topics sent to and consumed:
    ``BrokerMetrics.render`` against the same families all through prometheus_client."""
    metrics = BrokerMetrics()
    for topic in range(topics):
        metrics.on_messages_in(f"topic-{topic}", sizes)
        metrics.on_messages_out(f"topic-{topic}", "group", 10, 10_000)
    peer = CollectorRegistry(auto_describe=False)
    peer.register(PeerFamilies(metrics))
    scrapes = max(3, 20_000 // topics)
    started = time.perf_counter()
    for _ in range(scrapes):
        text = metrics.render()
    ours_ms = (time.perf_counter() - started) / scrapes * 1000
    started = time.perf_counter()
    for _ in range(scrapes):
        generate_latest(metrics.registry(None))
        generate_latest(peer)
    peer_ms = (time.perf_counter() - started) / scrapes * 1000
    print(
        f"scrape of {topics:,} topics (no controller, {len(text):,} bytes): {ours_ms:8.2f} ms   "
        f"all through prometheus_client: {peer_ms:8.2f} ms   ratio {peer_ms / ours_ms:5.1f}x"
    )


def time_lags(count: int) -> None:
    """The consumer lag gauges of ``count`` (topic, group) pairs, half of them lagging and
    half of those dated: ``families.lag_text`` against prometheus_client's gauges."""
    lags = [
        GroupLag(f"topic-{i}", f"group-{i % 10_000}", i % 2 * 17, None if i % 4 == 1 else 2.5)
        for i in range(count)
    ]
    peer = CollectorRegistry(auto_describe=False)
    peer.register(PeerFamilies(BrokerMetrics(), lags))
    started = time.perf_counter()
    families.lag_text(lags)
    ours_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    generate_latest(peer)
    peer_ms = (time.perf_counter() - started) * 1000
    print(
        f"consumer lags of {count:,} (topic, group): {ours_ms:8.2f} ms   "
        f"through prometheus_client: {peer_ms:8.2f} ms   ratio {peer_ms / ours_ms:5.1f}x"
    )


def time_live_scrapes(endpoint: str, scrapes: int = 50) -> None:
    """Wall time of whole HTTP scrapes of a live broker (snapshot on its loop included)."""
    timings = []
    for _ in range(scrapes):
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=10) as reply:
            body = reply.read()
        timings.append(time.perf_counter() - started)
    timings.sort()
    print(
        f"live scrape of {endpoint}: median {timings[len(timings) // 2] * 1000:.2f} ms, "
        f"max {timings[-1] * 1000:.2f} ms, {len(body)} bytes"
    )


if __name__ == "__main__":
    main()
