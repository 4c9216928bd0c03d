"""BrokerMetrics against a fake controller: names, labels, values, histogram shape."""

from __future__ import annotations

import asyncio
import gzip
import urllib.error
import urllib.request

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from wharf.broker.metrics import MESSAGE_SIZE_BUCKETS, BrokerMetrics, families
from wharf.broker.metrics import snapshot as metrics_snapshot
from wharf.broker.metrics.accumulators import (
    FOLD_CALLS,
    HistogramAccumulator,
    LabelledCounters,
    LabelledHistograms,
)
from wharf.broker.metrics.exposition import label_value
from wharf.broker.metrics.snapshot import GroupLag

from tests.bench import metrics_hooks
from tests.bench.metrics_hooks import PeerFamilies
from tests.ops.exposition import family_types, parse_samples, value
from tests.ops.fakes import NOW_MS, fake_controller


def scrape(metrics: BrokerMetrics) -> str:
    return metrics.render().decode()


def test_send_and_pull_hooks_count_messages_bytes_and_sizes_per_topic() -> None:
    metrics = BrokerMetrics()
    metrics.on_messages_in("orders", [100, 100, 2000])
    metrics.on_messages_in("orders", [5000])
    metrics.on_messages_in("audit", [])
    metrics.on_messages_out("orders", "billing", 3, 2200)
    metrics.on_send_to_dlq("orders", "billing")
    metrics.on_unconsumed_deleted("orders", "billing", 40)
    metrics.on_unconsumed_deleted("orders", "billing", 2)
    samples = parse_samples(scrape(metrics))
    assert (
        value(
            samples,
            "wharf_store_unconsumed_messages_deleted_total",
            topic="orders",
            consumer_group="billing",
        )
        == 42
    )
    assert value(samples, "rocketmq_messages_in_total", topic="orders") == 4
    assert value(samples, "rocketmq_throughput_in_total", topic="orders") == 7200
    assert value(samples, "rocketmq_message_size_bucket", topic="orders", le="256.0") == 2
    assert value(samples, "rocketmq_message_size_bucket", topic="orders", le="4096.0") == 3
    assert value(samples, "rocketmq_message_size_bucket", topic="orders", le="+Inf") == 4
    assert value(samples, "rocketmq_message_size_count", topic="orders") == 4
    assert value(samples, "rocketmq_message_size_sum", topic="orders") == 7200
    assert (
        value(samples, "rocketmq_messages_out_total", topic="orders", consumer_group="billing") == 3
    )
    assert (
        value(samples, "rocketmq_throughput_out_total", topic="orders", consumer_group="billing")
        == 2200
    )
    assert (
        value(
            samples, "rocketmq_send_to_dlq_messages_total", topic="orders", consumer_group="billing"
        )
        == 1
    )
    assert ("rocketmq_messages_in_total", frozenset({("topic", "audit")})) not in samples


def test_a_deleted_topic_leaves_metrics_and_others_stay() -> None:
    metrics = BrokerMetrics()
    for topic in ("gone", "kept"):
        metrics.on_messages_in(topic, [100])
        metrics.on_messages_out(topic, "billing", 1, 100)
        metrics.on_send_to_dlq(topic, "billing")
    metrics.forget_topic("gone")
    samples = parse_samples(scrape(metrics))
    assert not [key for key in samples if ("topic", "gone") in key[1]]
    assert value(samples, "rocketmq_messages_in_total", topic="kept") == 1
    assert value(samples, "rocketmq_message_size_count", topic="kept") == 1
    assert (
        value(samples, "rocketmq_messages_out_total", topic="kept", consumer_group="billing") == 1
    )


def test_rpc_flush_and_group_commit_histograms() -> None:
    metrics = BrokerMetrics()
    metrics.observe_rpc("SendMessage", "OK", 0.003)
    metrics.observe_rpc("SendMessage", "OK", 0.2)
    metrics.observe_rpc("PullMessage", "NOT_FOUND", 0.0001)
    metrics.on_flush("sync", 0.0004, 4096)
    metrics.on_flush("async", 0.02, 65536)
    metrics.on_group_commit(12)
    samples = parse_samples(scrape(metrics))
    assert value(samples, "rocketmq_rpc_latency_count", method="SendMessage", status="OK") == 2
    assert (
        value(samples, "rocketmq_rpc_latency_bucket", method="SendMessage", status="OK", le="0.005")
        == 1
    )
    assert (
        value(samples, "rocketmq_rpc_latency_count", method="PullMessage", status="NOT_FOUND") == 1
    )
    assert value(samples, "wharf_store_flush_latency_seconds_bucket", kind="sync", le="0.0005") == 1
    assert value(samples, "wharf_store_flush_latency_seconds_bucket", kind="async", le="0.01") == 0
    assert value(samples, "wharf_store_flush_bytes_total", kind="async") == 65536
    assert value(samples, "wharf_store_group_commit_batch_size_bucket", le="16.0") == 1
    assert value(samples, "wharf_store_group_commit_batch_size_bucket", le="8.0") == 0


def test_scrape_reads_store_figures_counts_and_consumer_lag() -> None:
    metrics = BrokerMetrics()
    controller = fake_controller(writable=False, disk_used_ratio=0.87)
    metrics.attach(controller.view())
    samples = parse_samples(scrape(metrics))
    assert value(samples, "rocketmq_topic_number") == 2
    assert value(samples, "rocketmq_consumer_group_number") == 2
    # billing: queue 0 at 7 of 10, queue 1 at 4 of 4 -> 3 behind; audit is caught up.
    assert (
        value(samples, "rocketmq_consumer_lag_messages", topic="orders", consumer_group="billing")
        == 3
    )
    assert (
        value(samples, "rocketmq_consumer_lag_messages", topic="orders", consumer_group="audit")
        == 0
    )
    billing_latency = value(
        samples, "rocketmq_consumer_lag_latency", topic="orders", consumer_group="billing"
    )
    assert billing_latency >= 30  # the oldest unconsumed message was stored 30 s before NOW_MS
    assert (
        value(samples, "rocketmq_consumer_lag_latency", topic="orders", consumer_group="audit") == 0
    )
    assert value(samples, "rocketmq_storage_size") == 123_456
    assert value(samples, "wharf_store_writable") == 0
    assert value(samples, "wharf_store_flush_behind_bytes") == 1000
    assert value(samples, "wharf_store_dispatch_behind_bytes") == 120
    assert value(samples, "wharf_store_segments", kind="commitlog") == 3
    assert value(samples, "wharf_store_segments", kind="consumequeue") == 5
    assert value(samples, "wharf_store_segments", kind="index") == 1
    assert value(samples, "wharf_store_disk_used_ratio") == 0.87
    assert value(samples, "wharf_store_disk_used_ratio_threshold", kind="clean_forcibly") == 0.85
    assert value(samples, "wharf_store_disk_used_ratio_threshold", kind="refuse_writes") == 0.90
    assert value(samples, "wharf_store_recovery_seconds") == 0.25
    assert value(samples, "wharf_long_poll_parked_requests") == 3
    assert value(samples, "wharf_broker_uptime_seconds") >= 60
    assert controller.store.reads == 1  # one record read: the lagging queue only
    assert 0 < value(samples, "wharf_metrics_snapshot_seconds") < 5


async def test_a_scrape_computes_the_lags_a_chunk_of_offsets_a_turn_of_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From the scrape's thread, the lags of 40 committed offsets in chunks of 4: the loop
    runs other work between the chunks (a ticking task gets its turns), and the figures are
    those of one snapshot taken at once."""
    monkeypatch.setattr(metrics_snapshot, "LAG_CHUNK", 4)
    controller = fake_controller()
    for t in range(10):
        for queue in range(4):
            controller.store.seed(f"t{t}", queue, [NOW_MS - 1000] * (t + queue))
        controller.offsets.table[(f"t{t}", "g")] = {queue: t for queue in range(4)}
    events: list[str] = []
    read = controller.store.get_max_offset

    def get_max_offset(topic: str, queue_id: int) -> int:
        events.append("read")
        return read(topic, queue_id)

    controller.store.get_max_offset = get_max_offset  # type: ignore[method-assign]
    metrics = BrokerMetrics()
    metrics.attach(controller.view())
    stop = asyncio.Event()

    async def tick() -> None:
        while not stop.is_set():
            events.append("tick")
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    snapshot = await asyncio.to_thread(metrics.snapshot)
    stop.set()
    await ticker
    assert snapshot is not None
    reads = [i for i, event in enumerate(events) if event == "read"]
    assert len(reads) == 44  # 10 topics x 4 queues, and orders: 2 groups x 2 queues
    # 44 offsets in chunks of 4 (an entry whole): the loop ran between every two chunks.
    assert events[reads[0] : reads[-1]].count("tick") >= 10
    controller.store.get_max_offset = read  # type: ignore[method-assign]
    at_once = metrics_snapshot.consumer_lags(controller.view(), NOW_MS / 1000)
    assert [(g.topic, g.consumer_group, g.messages) for g in snapshot.lags] == [
        (g.topic, g.consumer_group, g.messages) for g in at_once
    ]
    assert {(g.topic, g.messages) for g in snapshot.lags if g.consumer_group == "g"} == {
        (f"t{t}", sum(queue for queue in range(4))) for t in range(10)
    }
    assert metrics.snapshot_failures.get(()) == 0


def test_lag_latency_reads_stay_within_budget_and_cover_every_lagging_group(monkeypatch) -> None:
    monkeypatch.setattr(metrics_snapshot, "LAG_LATENCY_READ_BUDGET", 5)
    controller = fake_controller()
    for queue_id in range(4):
        controller.store.seed("events", queue_id, [NOW_MS - 1000 * (queue_id + 1)] * 3)
    groups = [f"g{n}" for n in range(4)]
    for n, group in enumerate(groups):  # g0 and g3 sit at the same positions: cached reads
        controller.offsets.table[("events", group)] = {q: n % 3 for q in range(4)}
    metrics = BrokerMetrics()
    metrics.attach(controller.view())
    samples = parse_samples(scrape(metrics))
    assert controller.store.reads == 5
    for group in groups:
        assert value(
            samples, "rocketmq_consumer_lag_messages", topic="events", consumer_group=group
        ) == 4 * (3 - groups.index(group) % 3)
        assert (
            value(samples, "rocketmq_consumer_lag_latency", topic="events", consumer_group=group)
            > 0
        )


def test_lag_counts_from_min_offset_when_retention_removed_the_committed_one() -> None:
    metrics = BrokerMetrics()
    controller = fake_controller()
    controller.store.min_offsets[("orders", 0)] = 9  # offsets 0..8 deleted; billing is at 7
    metrics.attach(controller.view())
    samples = parse_samples(scrape(metrics))
    assert (
        value(samples, "rocketmq_consumer_lag_messages", topic="orders", consumer_group="billing")
        == 1
    )


def test_the_per_topic_families_written_directly_hold_what_prometheus_client_writes() -> None:
    metrics = BrokerMetrics()
    metrics.on_messages_in("orders", [100, 100, 2000])
    metrics.on_messages_in("orders", [5000, 10**7])
    metrics.on_messages_in("a-b_c%d|e", [1])
    metrics.on_batches_in(["audit", "orders"], [2, 0], np.array([300, 70000], dtype=np.int64))
    metrics.on_messages_out("orders", "billing", 3, 2200)
    metrics.on_messages_out("audit", "%RETRY%x", 1, 10**12)
    metrics.on_send_to_dlq("orders", "billing")
    metrics.on_unconsumed_deleted("orders", "", 40)
    lags = [
        GroupLag("orders", "billing", 12, 3.25),
        GroupLag("orders", 'odd"group\\', 0, 0.0),
        GroupLag("audit", "%RETRY%x", 7, None),  # over the read budget: no latency series
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PeerFamilies(metrics, lags))
    expected = generate_latest(registry).decode()
    sizes = metrics.message_size.raw_items()
    direct = families.topics_in_text(sizes, MESSAGE_SIZE_BUCKETS)
    direct += families.topic_group_text(metrics)
    direct += families.lag_text(lags)
    assert parse_samples(direct) == parse_samples(expected)
    assert len(parse_samples(direct)) == 3 * 15 + 2 * 2 + 1 + 1 + 3 + 2
    kinds = {
        "rocketmq_consumer_lag_messages": "gauge",
        "rocketmq_consumer_lag_latency": "gauge",
        "rocketmq_messages_in_total": "counter",
        "rocketmq_throughput_in_total": "counter",
        "rocketmq_message_size": "histogram",
        "rocketmq_messages_out_total": "counter",
        "rocketmq_throughput_out_total": "counter",
        "rocketmq_send_to_dlq_messages_total": "counter",
        "wharf_store_unconsumed_messages_deleted_total": "counter",
    }
    assert family_types(direct) == family_types(expected) == kinds
    # And in the whole exposition, once each (not also through the registry).
    whole = scrape(metrics)
    for name, kind in kinds.items():
        assert whole.count(f"# TYPE {name} {kind}\n") == 1, name
    assert value(parse_samples(whole), "rocketmq_message_size_count", topic="orders") == 5


def test_label_values_are_escaped_as_the_text_format_wants() -> None:
    assert label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    metrics = BrokerMetrics()
    metrics.on_messages_in('odd"topic\\', [10])  # topic names cannot be this; labels can
    samples = parse_samples(scrape(metrics))
    assert value(samples, "rocketmq_messages_in_total", topic='odd"topic\\') == 1


def test_every_family_is_typed_even_before_any_traffic() -> None:
    metrics = BrokerMetrics()
    metrics.attach(fake_controller().view())
    types = family_types(scrape(metrics))
    assert types["rocketmq_messages_in_total"] == "counter"
    assert types["rocketmq_send_to_dlq_messages_total"] == "counter"
    assert types["wharf_store_unconsumed_messages_deleted_total"] == "counter"
    assert types["wharf_event_loop_tasks"] == "gauge"
    assert types["rocketmq_message_size"] == "histogram"
    assert types["rocketmq_rpc_latency"] == "histogram"
    assert types["rocketmq_consumer_lag_latency"] == "gauge"
    assert not any(name.endswith("_created") for name in types)


def test_a_failing_snapshot_still_serves_hot_path_metrics_and_counts_the_failure() -> None:
    metrics = BrokerMetrics()
    controller = fake_controller()
    controller.store.stats = None  # type: ignore[assignment,method-assign]  # stats() now raises
    metrics.attach(controller.view())
    metrics.on_messages_in("orders", [10])
    samples = parse_samples(scrape(metrics))
    assert value(samples, "rocketmq_messages_in_total", topic="orders") == 1
    assert value(samples, "wharf_metrics_snapshot_failures_total") == 1
    assert not any(name == "wharf_store_writable" for name, _ in samples)


async def test_serve_binds_port_zero_and_scrape_runs_snapshot_on_the_loop() -> None:
    metrics = BrokerMetrics()
    controller = fake_controller()
    metrics.attach(controller.view())
    metrics.on_messages_in("orders", [10, 20])
    port = await metrics.serve("127.0.0.1", 0)
    try:
        assert port > 0
        url = f"http://127.0.0.1:{port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
        samples = parse_samples(body.decode())
        assert value(samples, "rocketmq_messages_in_total", topic="orders") == 2
        assert value(samples, "rocketmq_topic_number") == 2
        # Prometheus asks for gzip: the same exposition, compressed; a POST is refused.
        zipped = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with await asyncio.to_thread(urllib.request.urlopen, zipped, timeout=10) as answer:
            assert answer.headers["Content-Encoding"] == "gzip"
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            unzipped = gzip.decompress(answer.read()).decode()
        assert value(parse_samples(unzipped), "rocketmq_message_size_sum", topic="orders") == 30
        post = urllib.request.Request(url, data=b"", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            await asyncio.to_thread(urllib.request.urlopen, post, timeout=10)
        assert refused.value.code == 405
        with pytest.raises(RuntimeError):
            await metrics.serve("127.0.0.1", 0)
    finally:
        await metrics.close()
    with pytest.raises(OSError):
        await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=2).read())


def test_histogram_accumulator_batches_match_one_by_one_observation() -> None:
    bounds = (1, 10, 100)
    batch, single = HistogramAccumulator(bounds), HistogramAccumulator(bounds)
    values = [0, 1, 2, 10, 11, 100, 101, 5, 5]
    batch.observe_many(values)
    batch.observe_many([7, 7, 7])
    for v in [*values, 7, 7, 7]:
        single.observe(v)
    assert batch.snapshot() == single.snapshot()
    snap = batch.snapshot()
    assert snap.buckets == [(1.0, 2), (10.0, 9), (100.0, 11), (float("inf"), 12)]
    assert snap.count == 12 and snap.total == sum(values) + 21


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.lists(st.integers(0, 300), max_size=6)),
        min_size=1,
        max_size=8,
    )
)
def test_observing_batches_at_once_matches_one_observe_many_a_batch(
    batches: list[tuple[str, list[int]]],
) -> None:
    """A request's batches observed together (bucket edges, batches spanning buckets, empty
    batches, one topic twice) give the same histograms as one ``observe_many`` a batch."""
    bounds = (1, 10, 100)
    together, apart = LabelledHistograms(bounds), LabelledHistograms(bounds)
    together.observe_batches(
        [(topic,) for topic, _ in batches],
        [len(values) for _, values in batches],
        np.array([v for _, values in batches for v in values], dtype=np.int64),
    )
    for topic, values in batches:
        if values:
            apart.child((topic,)).observe_many(values)
    assert together.items() == apart.items()


def test_batches_kept_for_folding_are_in_every_read_and_leave_with_a_deleted_topic() -> None:
    """``observe_batches`` keeps its calls and folds them ``FOLD_CALLS`` at a time: a read in
    between (what a scrape does) sees every call, and a topic dropped meanwhile stays gone."""
    bounds = (1, 10, 100)
    kept, apart = LabelledHistograms(bounds), LabelledHistograms(bounds)
    calls = FOLD_CALLS + FOLD_CALLS // 2
    for i in range(calls):
        topics = [f"t{(i + j) % 5}" for j in range(3)]
        values = [[5, 50][i % 2]] * 2 + [i % 200, 7] + [300]
        kept.observe_batches([(t,) for t in topics], [2, 2, 1], np.array(values, dtype=np.int64))
        for topic, part in zip(topics, (values[:2], values[2:4], values[4:]), strict=True):
            apart.child((topic,)).observe_many(part)
        if i == FOLD_CALLS // 3:
            assert kept.items() == apart.items()  # a read folds what waits
    assert kept.items() == apart.items()
    kept.observe_batches([("t0",), ("gone",)], [1, 1], np.array([3, 3], dtype=np.int64))
    kept.drop("gone")
    assert ("gone",) not in dict(kept.items())
    kept_counts = {key: counts for key, counts, _ in kept.raw_items()}[("t0",)]
    apart_counts = {key: counts for key, counts, _ in apart.raw_items()}[("t0",)]
    assert kept_counts[1] == apart_counts[1] + 1  # 3 falls in (1, 10]


def test_accumulators_reject_bad_input() -> None:
    with pytest.raises(ValueError):
        HistogramAccumulator((10, 1))
    with pytest.raises(ValueError):
        LabelledCounters().inc(("t",), -1)


async def test_serve_on_a_busy_port_fails_naming_the_address() -> None:
    first, second = BrokerMetrics(), BrokerMetrics()
    port = await first.serve("127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            await second.serve("127.0.0.1", port)
    finally:
        await first.close()
        await second.close()


def test_the_hooks_benchmark_prints_the_render_against_prometheus_client(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``tests.bench.metrics_hooks`` (short form): a line per scrape size with both renderings
    timed and their ratio (figures are not asserted: timings belong in its output)."""
    metrics_hooks.main(["--batches", "200", "--topics", "500"])
    out = capsys.readouterr().out
    for topics in ("100", "500"):
        line = next(x for x in out.splitlines() if x.startswith(f"scrape of {topics} topics"))
        assert "all through prometheus_client" in line and "ratio" in line, out
