"""Broker metrics (Prometheus, RocketMQ 5 metric names).

The broker calls the ``on_*`` / ``observe_*`` hooks on its hot paths: each is one lock and a
few dict/list operations per call (per batch, never per message). Store figures, topic and
group counts and consumer lag are read at scrape time: the scrape runs on the HTTP server's
thread and hands ``take_snapshot_async`` to the event loop that owns the store (the store is a
single-loop object; the consumer lags are computed a chunk of offsets a turn), waiting at most
``SNAPSHOT_TIMEOUT_S``. The same object is the
store's ``StoreObserver`` (``on_flush``, ``on_group_commit``), which may be called from flush
threads: every accumulator is thread-safe.

Label rules: ``topic``, ``consumer_group``, ``method``, ``status``, ``kind`` only -- never a
client id or message id (bounded cardinality). Units: seconds and bytes (Prometheus base
units); RocketMQ's own exporter reports latencies in ms/µs, so RocketMQ dashboards need the
unit adjusted.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector
from wharf.broker.metrics import families
from wharf.broker.metrics.accumulators import LabelledCounters, LabelledHistograms
from wharf.broker.metrics.http import MetricsHttpServer
from wharf.broker.metrics.snapshot import BrokerSnapshot, take_snapshot, take_snapshot_async
from wharf.broker.metrics.view import BrokerView

log = logging.getLogger(__name__)

# How long a scrape waits for the event loop to produce the snapshot. A loop busier than this
# is itself the news: the scrape still answers (hot-path families, snapshot_failures_total).
# 100,000 committed offsets are ~25 turns of the loop, each behind the loop's other work.
SNAPSHOT_TIMEOUT_S = 5.0

# Bucket bounds. Message sizes: RocketMQ's 1K/4K/512K/1M/2M/4M plus finer small sizes.
MESSAGE_SIZE_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 524288, 1048576, 2097152, 4194304)
RPC_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
FLUSH_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)  # fmt: skip
GROUP_COMMIT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class BrokerMetrics:
    def __init__(self) -> None:
        # (topic,): also rocketmq_messages_in_total and rocketmq_throughput_in_total, which are
        # this histogram's count and sum (one update per batch instead of three: a request of
        # 32 topics' batches paid ~2.7 us a batch for the three, issue 33).
        self.message_size = LabelledHistograms(MESSAGE_SIZE_BUCKETS)
        self.messages_out = LabelledCounters()  # (topic, consumer_group)
        self.bytes_out = LabelledCounters()  # (topic, consumer_group)
        self.send_to_dlq = LabelledCounters()  # (topic, consumer_group)
        self.unconsumed_deleted = LabelledCounters()  # (topic, consumer_group)
        self.rpc_latency = LabelledHistograms(RPC_LATENCY_BUCKETS)  # (method, status)
        self.flush_latency = LabelledHistograms(FLUSH_LATENCY_BUCKETS)  # (kind,)
        self.flush_bytes = LabelledCounters()  # (kind,)
        self.group_commit_batch = LabelledHistograms(GROUP_COMMIT_BUCKETS)  # ()
        self.snapshot_failures = LabelledCounters()  # ()
        self._view: BrokerView | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._http: MetricsHttpServer | None = None

    # --- called by the broker's processors -------------------------------------------------
    def observe_rpc(self, method: str, status: str, seconds: float) -> None:
        """One finished RPC: method name (e.g. 'SendMessage'), gRPC status name ('OK')."""
        self.rpc_latency.child((method, status)).observe(seconds)

    def on_messages_in(self, topic: str, sizes: list[int]) -> None:
        """Messages stored for ``topic``; ``sizes`` are body sizes in bytes (stored record
        sizes for requests of producer-encoded records: their bodies are not looked at)."""
        if sizes:
            self.message_size.child((topic,)).observe_many(sizes)

    def on_batches_in(
        self, topics: Sequence[str], counts: Sequence[int], sizes: np.ndarray
    ) -> None:
        """``on_messages_in`` of several batches at once: ``counts[i]`` messages (0: none) for
        ``topics[i]``, their stored sizes following batch i-1's in ``sizes`` (int64)."""
        self.message_size.observe_batches(list(zip(topics)), counts, sizes)  # 1-tuples, in C

    def on_messages_out(self, topic: str, consumer_group: str, count: int, nbytes: int) -> None:
        """Messages delivered by a pull."""
        if count <= 0:
            return
        key = (topic, consumer_group)
        self.messages_out.inc(key, count)
        self.bytes_out.inc(key, nbytes)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series leave /metrics (as Kafka drops a deleted topic's metrics):
        without this, every topic ever created kept ~1.5 KiB of series (a soak churning
        topics grew the broker by that much per topic)."""
        for family in (
            self.message_size,
            self.messages_out,
            self.bytes_out,
            self.send_to_dlq,
            self.unconsumed_deleted,
        ):
            family.drop(topic)

    def on_send_to_dlq(self, topic: str, consumer_group: str) -> None:
        """A message moved to %DLQ%<group>; ``topic`` is its original topic."""
        self.send_to_dlq.inc((topic, consumer_group))

    # --- StoreObserver -----------------------------------------------------------------------
    def on_unconsumed_deleted(self, topic: str, consumer_group: str, count: int) -> None:
        """Retention deleted messages the group had not consumed (StoreObserver hook)."""
        self.unconsumed_deleted.inc((topic, consumer_group), count)

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        """kind: 'sync' | 'async' | 'cq'."""
        self.flush_latency.child((kind,)).observe(seconds)
        if nbytes > 0:
            self.flush_bytes.inc((kind,), nbytes)

    def on_group_commit(self, waiters: int) -> None:
        """One fdatasync served ``waiters`` put requests."""
        self.group_commit_batch.child(()).observe(waiters)

    # --- wiring ------------------------------------------------------------------------------
    def attach(self, view: BrokerView) -> None:
        """Called once at start with what scrapes read (``BrokerView``: the store's stats(),
        topic and group counts, committed offsets, parked pulls ...)."""
        self._view = view
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # serve() records it

    async def serve(
        self,
        host: str,
        port: int,
        bearer_token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> int:
        """Serve /metrics on host:port (connections on the loop, renders on a pool of two
        threads, broker/metrics/http.py); returns the bound port
        (port 0 picks an ephemeral one). ``bearer_token``: required of every scrape;
        ``ssl_context``: HTTPS only."""
        if self._http is not None:
            raise RuntimeError("metrics server already serving")
        self._loop = asyncio.get_running_loop()
        server = MetricsHttpServer(self.render, bearer_token)
        bound = await server.start(host, port, ssl_context)
        self._http = server
        return bound

    async def close(self) -> None:
        """Stop the metrics HTTP server."""
        server, self._http = self._http, None
        if server is not None:
            await server.stop()

    # --- scrape side -------------------------------------------------------------------------
    def render(self) -> bytes:
        """The whole exposition (text format 0.0.4): the registry's families through
        prometheus_client, the per-topic ones and the consumer lags written directly
        (``families.topics_in_text``, ``topic_group_text``, ``lag_text``). What /metrics
        serves."""
        snapshot = self.snapshot()
        head = generate_latest(self.registry(snapshot))
        sizes = self.message_size.raw_items()
        direct = (
            families.topics_in_text(sizes, MESSAGE_SIZE_BUCKETS)
            + families.topic_group_text(self)
            + families.lag_text(snapshot.lags if snapshot is not None else [])
        )
        return head + direct.encode()

    def registry(self, snapshot: BrokerSnapshot | None) -> CollectorRegistry:
        """The families prometheus_client writes, for one scrape's ``snapshot``."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_BrokerCollector(self, snapshot))
        return registry

    def snapshot(self) -> BrokerSnapshot | None:
        """The controller's figures, read on the store's loop; None before attach() or if the
        loop did not answer in time (counted in wharf_metrics_snapshot_failures_total)."""
        view = self._view
        if view is None:
            return None
        try:
            loop = self._loop
            if loop is None or _running_in(loop):
                return take_snapshot(view)
            if loop.is_closed():
                raise RuntimeError("the broker's event loop is closed")
            future = asyncio.run_coroutine_threadsafe(take_snapshot_async(view), loop)
            try:
                return future.result(SNAPSHOT_TIMEOUT_S)
            finally:
                future.cancel()  # no-op if it finished; stops a late one between its turns
        except Exception:
            self.snapshot_failures.inc(())
            log.exception("metrics snapshot failed")
            return None


def _running_in(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # a plain thread (the HTTP server's): not on the loop
        return False


class _BrokerCollector(Collector):
    """Turns the accumulators and one snapshot per scrape into metric families."""

    def __init__(self, metrics: BrokerMetrics, snapshot: BrokerSnapshot | None) -> None:
        self._metrics = metrics
        self._snapshot = snapshot  # this scrape's (``render`` writes its lags directly)

    def collect(self) -> Iterator[Any]:
        m = self._metrics
        yield from families.hot_path_families(m)
        snapshot = self._snapshot
        yield families.counter(
            "wharf_metrics_snapshot_failures_total",
            "Scrapes whose broker snapshot failed or timed out (event loop too busy).",
            [],
            [((), m.snapshot_failures.get(()))],  # 0 from the start: alerts can rate() it
        )
        if snapshot is not None:
            yield from families.snapshot_families(snapshot)
