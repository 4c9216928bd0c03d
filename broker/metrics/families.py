"""Metric families exposed by the broker: names, help texts and types in one place.

RocketMQ 5 names (``rocketmq_*``, from its BrokerMetricsConstant) where RocketMQ has one;
``wharf_*`` for store internals RocketMQ does not export. Every family is emitted on every
scrape, even with no samples yet, so dashboards and alerts can rely on the names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from wharf.broker.metrics.accumulators import (
    HistogramSnapshot,
    LabelKey,
    LabelledCounters,
    LabelledHistograms,
)
from wharf.broker.metrics.exposition import bound_texts, header, label_value, number
from wharf.broker.metrics.snapshot import BrokerSnapshot, GroupLag

STORE_KINDS = ("commitlog", "consumequeue", "index")


def counter(
    name: str, doc: str, labels: Sequence[str], items: Iterable[tuple[LabelKey, float]]
) -> CounterMetricFamily:
    # Pass the name without "_total": prometheus_client appends it to the samples.
    family = CounterMetricFamily(name.removesuffix("_total"), doc, labels=list(labels))
    for key, value in items:
        family.add_metric(list(key), value)
    return family


def gauge(
    name: str, doc: str, labels: Sequence[str], items: Iterable[tuple[LabelKey, float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for key, value in items:
        family.add_metric(list(key), value)
    return family


def histogram(
    name: str, doc: str, labels: Sequence[str], children: LabelledHistograms
) -> HistogramMetricFamily:
    return histogram_of(name, doc, labels, children.items())


def histogram_of(
    name: str,
    doc: str,
    labels: Sequence[str],
    snapshots: Iterable[tuple[LabelKey, HistogramSnapshot]],
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    for key, snap in snapshots:
        _add_histogram(family, key, snap)
    return family


def _add_histogram(family: HistogramMetricFamily, key: LabelKey, snap: HistogramSnapshot) -> None:
    buckets = [(_bound_text(bound), count) for bound, count in snap.buckets]
    family.add_metric(list(key), buckets, sum_value=snap.total)


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class HotPathSources(Protocol):
    """The accumulators the broker's hooks feed (``BrokerMetrics`` has them): what
    ``hot_path_families`` reads, without this module importing its caller."""

    messages_out: LabelledCounters
    bytes_out: LabelledCounters
    send_to_dlq: LabelledCounters
    unconsumed_deleted: LabelledCounters
    rpc_latency: LabelledHistograms
    flush_latency: LabelledHistograms
    flush_bytes: LabelledCounters
    group_commit_batch: LabelledHistograms


# The per-topic families fed by sends, written by ``topics_in_text`` (15 lines a topic: see
# ``wharf.broker.metrics.exposition`` for why not through prometheus_client).
MESSAGES_IN = ("rocketmq_messages_in_total", "Messages stored, by topic.")
THROUGHPUT_IN = ("rocketmq_throughput_in_total", "Message body bytes stored, by topic.")
MESSAGE_SIZE = ("rocketmq_message_size", "Message body size in bytes, by topic.")


def topics_in_text(
    rows: Sequence[tuple[LabelKey, list[int], float]], bounds: Sequence[float]
) -> str:
    """The three families of ``message_size`` (``LabelledHistograms.raw_items``: one read, so
    they always agree): messages and bytes in by topic (the histogram's count and sum) and
    the histogram, in the text format."""
    counts_name, bytes_name, size_name = MESSAGES_IN[0], THROUGHPUT_IN[0], MESSAGE_SIZE[0]
    les = [f'",le="{le}"}} ' for le in bound_texts(bounds)]
    counts_lines, bytes_lines, size_lines = [], [], []
    bucket = f'{size_name}_bucket{{topic="'
    for key, buckets, total in rows:
        topic = label_value(key[0])
        running = 0
        for le, count in zip(les, buckets, strict=True):
            running += count
            size_lines.append(f"{bucket}{topic}{le}{running}.0\n")
        sum_text = number(total)
        size_lines.append(f'{size_name}_count{{topic="{topic}"}} {running}.0\n')
        size_lines.append(f'{size_name}_sum{{topic="{topic}"}} {sum_text}\n')
        counts_lines.append(f'{counts_name}{{topic="{topic}"}} {running}.0\n')
        bytes_lines.append(f'{bytes_name}{{topic="{topic}"}} {sum_text}\n')
    return "".join(
        (
            header(*MESSAGES_IN, "counter"), *counts_lines,
            header(*THROUGHPUT_IN, "counter"), *bytes_lines,
            header(*MESSAGE_SIZE, "histogram"), *size_lines,
        )
    )  # fmt: skip


# The counters by topic and consumer group, written by ``topic_group_text`` (a line a series:
# 10,000 topics read by one group each, 20,000 lines for the two pull counters, ~140 ms of
# prometheus_client a scrape).
MESSAGES_OUT = ("rocketmq_messages_out_total", "Messages delivered by pulls, by topic and consumer group.")  # fmt: skip
THROUGHPUT_OUT = ("rocketmq_throughput_out_total", "Message body bytes delivered by pulls, by topic and consumer group.")  # fmt: skip
SEND_TO_DLQ = ("rocketmq_send_to_dlq_messages_total", "Messages moved to %DLQ%<group> after max reconsume times, by original topic and group.")  # fmt: skip
UNCONSUMED_DELETED = ("wharf_store_unconsumed_messages_deleted_total", "Messages retention deleted before the consumer group consumed them (group \"\" = a topic no group committed on).")  # fmt: skip


def topic_group_text(m: HotPathSources) -> str:
    """The counters by (topic, consumer group), in the text format."""
    parts = []
    for (name, doc), counters in (
        (MESSAGES_OUT, m.messages_out),
        (THROUGHPUT_OUT, m.bytes_out),
        (SEND_TO_DLQ, m.send_to_dlq),
        (UNCONSUMED_DELETED, m.unconsumed_deleted),
    ):
        parts.append(header(name, doc, "counter"))
        parts.extend(
            f"{name}{_by_group(topic, group)}{number(value)}\n"
            for (topic, group), value in counters.items()  # type: ignore[misc]
        )
    return "".join(parts)


def _by_group(topic: str, group: str) -> str:
    """The labels of a series by topic and consumer group, and the space before its value."""
    return f'{{topic="{label_value(topic)}",consumer_group="{label_value(group)}"}} '


LAG_MESSAGES = ("rocketmq_consumer_lag_messages", "Messages stored but not yet consumed (committed), by topic and consumer group.")  # fmt: skip
LAG_LATENCY = ("rocketmq_consumer_lag_latency", "Age in seconds of the oldest unconsumed message, by topic and consumer group (0 without lag).")  # fmt: skip


def lag_text(lags: Sequence[GroupLag]) -> str:
    """The consumer lag gauges, in the text format: a series per (topic, group) each, 25,000
    of them with the issue's 25,000 topics and 10,000 groups (~0.25 s of the interpreter
    through prometheus_client a scrape)."""
    labels = [_by_group(lag.topic, lag.consumer_group) for lag in lags]
    name, doc = LAG_MESSAGES
    parts = [header(name, doc, "gauge")]
    parts.extend(
        f"{name}{label}{number(lag.messages)}\n" for label, lag in zip(labels, lags, strict=True)
    )
    name, doc = LAG_LATENCY
    parts.append(header(name, doc, "gauge"))
    parts.extend(
        f"{name}{label}{number(lag.latency_seconds)}\n"
        for label, lag in zip(labels, lags, strict=True)
        if lag.latency_seconds is not None
    )
    return "".join(parts)


def hot_path_families(m: HotPathSources) -> Iterator[Any]:
    """Families fed by the broker's hooks (RPCs, flushes; the per-topic ones are
    ``topics_in_text``'s and ``topic_group_text``'s)."""
    yield histogram("rocketmq_rpc_latency", "gRPC call latency in seconds, by method and gRPC status.", ["method", "status"], m.rpc_latency)  # fmt: skip
    yield histogram("wharf_store_flush_latency_seconds", "Time of one flush (fdatasync): kind=sync (group commit), async (FlushRealTimeService), cq (queues and index).", ["kind"], m.flush_latency)  # fmt: skip
    yield counter("wharf_store_flush_bytes_total", "Bytes made durable by flushes, by kind.", ["kind"], m.flush_bytes.items())  # fmt: skip
    yield histogram("wharf_store_group_commit_batch_size", "Put requests served by one group-commit fdatasync (SYNC_FLUSH).", [], m.group_commit_batch)  # fmt: skip


def snapshot_families(s: BrokerSnapshot) -> Iterator[Any]:
    """Families read from the controller at scrape time (the consumer lags: ``lag_text``)."""
    st = s.stats
    yield gauge("rocketmq_topic_number", "Topics known to the broker (system topics such as %RETRY%/%DLQ% excluded).", [], [((), s.topic_count)])  # fmt: skip
    yield gauge("rocketmq_consumer_group_number", "Subscription groups known to the broker.", [], [((), s.group_count)])  # fmt: skip
    yield gauge("rocketmq_storage_size", "Bytes on disk of the commit log, consume queues and index files.", [], [((), st.storage_size_bytes)])  # fmt: skip
    yield gauge("wharf_store_writable", "1 if the store accepts writes; 0 on a full disk or a sticky flush error.", [], [((), 1 if st.writable else 0)])  # fmt: skip
    yield counter("wharf_store_disk_full_episodes_total", "Times a write, allocation or sync hit ENOSPC/EDQUOT and the store began refusing writes (one per episode).", [], [((), st.disk_full_episodes)])  # fmt: skip
    yield gauge("wharf_store_flush_behind_bytes", "Commit log bytes written but not yet flushed to disk.", [], [((), max(0, st.commit_log_max_offset - st.commit_log_flushed_offset))])  # fmt: skip
    yield counter("wharf_store_sends_held_total", "Writes held while the dispatch was more than maxDispatchLagBytes behind.", [], [((), st.sends_held)])  # fmt: skip
    yield counter("wharf_store_sends_refused_busy_total", "Held writes refused 'broker busy' after waitTimeMillsInSendQueue (RESOURCE_EXHAUSTED; clients retry).", [], [((), st.sends_refused_busy)])  # fmt: skip
    yield gauge("wharf_store_dispatch_behind_bytes", "Commit log bytes not yet dispatched to consume queues and index (reput lag).", [], [((), st.dispatch_behind_bytes)])  # fmt: skip
    yield gauge("wharf_store_commit_log_max_offset_bytes", "End of written data in the commit log (its rate is the write bandwidth).", [], [((), st.commit_log_max_offset)])  # fmt: skip
    yield gauge("wharf_store_commit_log_min_offset_bytes", "First commit log offset still on disk (retention moves it).", [], [((), st.commit_log_min_offset)])  # fmt: skip
    segments = (st.commit_log_segments, st.consume_queue_files, st.index_files)
    yield gauge("wharf_store_segments", "Mapped files per store: kind=commitlog, consumequeue, index.", ["kind"], [((kind,), n) for kind, n in zip(STORE_KINDS, segments, strict=True)])  # fmt: skip
    yield gauge("wharf_store_disk_used_ratio", "Used fraction (0..1) of the filesystem holding the commit log.", [], [((), st.disk_used_ratio)])  # fmt: skip
    yield gauge("wharf_store_disk_used_ratio_threshold", "Disk thresholds: kind=clean (diskMaxUsedSpaceRatio), clean_forcibly (diskSpaceCleanForciblyRatio), refuse_writes (diskSpaceWarningLevelRatio).", ["kind"], [((kind,), ratio) for kind, ratio in s.disk_thresholds.items()])  # fmt: skip
    yield counter("wharf_store_messages_put_total", "Messages appended to the commit log (all topics, system ones included).", [], [((), st.messages_put_total)])  # fmt: skip
    yield counter("wharf_store_bytes_put_total", "Record bytes appended to the commit log.", [], [((), st.bytes_put_total)])  # fmt: skip
    yield gauge("wharf_store_recovery_seconds", "Duration of the recovery run at start.", [], [((), st.recovery_seconds)])  # fmt: skip
    info = (
        [((s.identity["broker"], s.identity["broker_id"], s.identity["cluster"]), 1)]
        if s.identity
        else []
    )
    yield gauge("wharf_broker_info", "1, labelled with this broker's cluster, broker (group) name and broker id: join on instance to group any series by cluster or broker.", ["broker", "broker_id", "cluster"], info)  # fmt: skip
    yield gauge("wharf_namesrv_session_up", "1 while this broker's registration session with the NameServer is open (namesrvAddr), else 0.", ["namesrv"], [((ns,), 1 if up else 0) for ns, up in sorted(s.namesrv_sessions.items())])  # fmt: skip
    yield from _replication_families(s)
    yield from _retention_families(s)
    tx, timer = s.transactions, s.timer
    yield gauge("rocketmq_half_messages", "Transactional half messages not yet committed or rolled back.", [], [((), tx.get("half_messages", 0))])  # fmt: skip
    yield counter("rocketmq_commit_messages_total", "Transactional messages committed (made visible) since start.", [], [((), tx.get("commits_total", 0))])  # fmt: skip
    yield counter("rocketmq_rollback_messages_total", "Transactional messages rolled back since start.", [], [((), tx.get("rollbacks_total", 0))])  # fmt: skip
    yield counter("wharf_transaction_checks_total", "Transaction check-backs sent to producers since start.", [], [((), tx.get("checks_total", 0))])  # fmt: skip
    yield counter("wharf_transaction_discards_total", "Half messages discarded unresolved after transactionCheckMax check-backs.", [], [((), tx.get("discards_total", 0))])  # fmt: skip
    yield gauge("wharf_timer_pending_messages", "Messages waiting in the timer for their delivery time.", [], [((), timer.get("pending", 0))])  # fmt: skip
    yield counter("wharf_timer_delivered_total", "Timed messages delivered since start.", [], [((), timer.get("delivered_total", 0))])  # fmt: skip
    yield counter("wharf_timer_recalled_total", "Timed messages recalled before delivery since start.", [], [((), timer.get("cancelled_total", 0))])  # fmt: skip
    yield gauge("wharf_long_poll_parked_requests", "Pull requests parked waiting for messages (long polling).", [], [((), s.parked_pulls)])  # fmt: skip
    yield gauge("wharf_wire_connections", "Client connections open on the wire port.", [], [((), s.frontend_connections.get("wire", 0))])  # fmt: skip
    yield gauge("wharf_frontend_connections", "Client connections open per protocol front end (gRPC's not counted).", ["frontend"], [((name,), n) for name, n in sorted(s.frontend_connections.items())])  # fmt: skip
    yield gauge("wharf_event_loop_tasks", "Live asyncio tasks on the broker's event loop.", [], [((), s.loop_tasks)])  # fmt: skip
    yield gauge("wharf_metrics_snapshot_seconds", "Event-loop time this scrape's store and consumer snapshot took.", [], [((), s.loop_seconds)])  # fmt: skip
    yield gauge("wharf_broker_uptime_seconds", "Seconds since the broker started.", [], [((), s.uptime_seconds)])  # fmt: skip


def _retention_families(s: BrokerSnapshot) -> Iterator[Any]:
    r = s.retention
    if r is None:
        return
    yield gauge("wharf_compaction_queues", "Queues of compacted topics (cleanup.policy compact).", [], [((), r.compacted_queues)])  # fmt: skip
    yield counter("wharf_compaction_passes_total", "Compaction passes installed (a new kept-log generation swapped in).", [], [((), r.passes)])  # fmt: skip
    yield counter("wharf_compaction_pass_failures_total", "Compaction passes that failed (the old generation stays live).", [], [((), r.pass_failures)])  # fmt: skip
    yield counter("wharf_compaction_passes_map_full_total", "Passes that stopped early because the key map (compactionMapBytes) was full; the next pass goes on.", [], [((), r.passes_map_full)])  # fmt: skip
    yield counter("wharf_compaction_read_records_total", "Dirty records compaction read to build its key maps.", [], [((), r.records_read)])  # fmt: skip
    yield counter("wharf_compaction_read_bytes_total", "Dirty record bytes compaction read.", [], [((), r.bytes_read)])  # fmt: skip
    yield counter("wharf_compaction_written_bytes_total", "Bytes written into new kept-log generations.", [], [((), r.bytes_written)])  # fmt: skip
    yield counter("wharf_compaction_tombstones_removed_total", "Tombstones dropped once older than delete.retention.ms.", [], [((), r.tombstones_removed)])  # fmt: skip
    yield gauge("wharf_compaction_kept_bytes", "Size of the live kept logs of all compacted queues.", [], [((), r.kept_bytes)])  # fmt: skip
    yield gauge("wharf_compaction_kept_records", "Records in the live kept logs of all compacted queues.", [], [((), r.kept_records)])  # fmt: skip
    yield gauge("wharf_compaction_max_dirty_ratio", "Highest dirty ratio among compacted queues at the last look.", [], [((), r.max_dirty_ratio)])  # fmt: skip
    yield gauge("wharf_compaction_last_pass_seconds", "Duration of the last compaction pass.", [], [((), r.last_pass_seconds)])  # fmt: skip
    yield gauge("wharf_compaction_last_pass_timestamp_seconds", "When the last compaction pass ended (0: none yet).", [], [((), r.last_pass_at_ms / 1000)])  # fmt: skip
    yield gauge("wharf_compaction_pinned_log_offset_bytes", "Lowest commit log offset compaction still needs (retention keeps it; -1: none).", [], [((), r.pinned_log_offset)])  # fmt: skip
    yield counter("wharf_retention_log_start_moves_total", "Queue log start offsets moved by retention.ms / retention.bytes or DeleteRecords.", [], [((), r.log_start_moves)])  # fmt: skip


def _replication_families(s: BrokerSnapshot) -> Iterator[Any]:
    rep = s.replication
    if rep is None:
        return
    yield gauge("wharf_broker_role", "1, labelled with this broker's brokerRole (ASYNC_MASTER, SYNC_MASTER, SLAVE).", ["role"], [((rep.role,), 1)])  # fmt: skip
    yield gauge("wharf_replication_epoch", "Controller mode: the newest master term this broker's log knows (0 with static roles).", [], [((), rep.epoch)])  # fmt: skip
    yield gauge("wharf_replication_confirm_offset", "CommitLog offset below which every in-sync replica has the log (a master), or the master's as last heard (a replica).", [], [((), rep.confirm_offset)])  # fmt: skip
    replicas = [(str(r.broker_id), r.address) for r in rep.replicas]
    yield gauge("wharf_replica_lag_bytes", "Bytes of this master's CommitLog a connected replica has not reported yet.", ["replica_id", "address"], [(key, r.lag_bytes) for key, r in zip(replicas, rep.replicas, strict=True)])  # fmt: skip
    yield gauge("wharf_replica_lag_seconds", "Seconds since a connected replica last had everything this master had (0 while caught up).", ["replica_id", "address"], [(key, r.lag_seconds) for key, r in zip(replicas, rep.replicas, strict=True)])  # fmt: skip
    yield gauge("wharf_replica_in_sync", "1 while a connected replica is in the in-sync set (it holds back the confirm offset and counts for SYNC_MASTER acks).", ["replica_id", "address"], [(key, 1 if r.in_sync else 0) for key, r in zip(replicas, rep.replicas, strict=True)])  # fmt: skip
    if rep.role == "SLAVE":
        yield gauge("wharf_replication_master_connected", "1 while this replica is connected to its master's HA listener.", [], [((), 1 if rep.master_address else 0)])  # fmt: skip
        yield gauge("wharf_replication_master_lag_bytes", "Bytes this replica is behind its master's log end as last heard.", [], [((), rep.lag_bytes)])  # fmt: skip
