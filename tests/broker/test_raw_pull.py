"""Raw-record pulls (``raw_records``) against the real daemon: the same messages, statuses and
offsets as the MessageView path, tag HASH filtering with exact re-check on the client, long
polling, piggy-backed commits, metrics, and ranges deleted by retention."""

from __future__ import annotations

import threading
import time
import urllib.request
import zlib
from pathlib import Path

from wharf.client.message import ReceivedMessage
from wharf.client.records import exact_tags, parse_records
from wharf.store.codec.hashes import java_string_hash
from wharf.v1 import common_pb2, messaging_pb2

from tests.broker.daemon_helpers import SMALL_STORE, Client
from tests.harness import Daemons

FIELDS = (
    "topic", "queue_topic", "queue_id", "queue_offset", "commit_log_offset", "msg_id",
    "offset_msg_id", "body", "tags", "keys", "properties", "born_timestamp", "store_timestamp",
    "reconsume_times", "born_host", "store_host", "store_size", "flag",
)  # fmt: skip

EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


def as_dict(m: ReceivedMessage) -> dict[str, object]:
    return {name: getattr(m, name) for name in FIELDS}


def pull_both(
    client: Client, topic: str, offset: int, **fields: object
) -> tuple[messaging_pb2.PullMessageResponse, messaging_pb2.PullMessageResponse]:
    return client.pull(topic, offset, **fields), client.pull(
        topic, offset, raw_records=True, **fields
    )


def read_queue_both(client: Client, topic: str, expression: str, batch: int) -> tuple[list, list]:
    """Walk the whole queue with both paths, checking each reply pair agrees on offsets."""
    views: list[dict[str, object]] = []
    raws: list[dict[str, object]] = []
    offset = 0
    while True:
        view, raw = pull_both(client, topic, offset, max_messages=batch, tag_expression=expression)
        assert (raw.next_begin_offset, raw.min_offset, raw.max_offset) == (
            view.next_begin_offset, view.min_offset, view.max_offset,
        )  # fmt: skip
        # Only a tag-hash collision may turn NO_MATCHED_MSG into FOUND (client drops it).
        assert raw.status == view.status or (
            view.status == messaging_pb2.NO_MATCHED_MSG and raw.status == messaging_pb2.FOUND
        )
        assert not raw.messages, "raw mode must leave `messages` empty"
        views.extend(as_dict(ReceivedMessage.from_view(v)) for v in view.messages)
        raws.extend(as_dict(m) for m in parse_records(raw.records, exact_tags(expression)))
        if view.next_begin_offset <= offset or view.status == messaging_pb2.NO_NEW_MSG:
            return views, raws
        offset = view.next_begin_offset


def send_mixed(client: Client, topic: str) -> int:
    """Messages covering every field: tags whose Java hashes collide ("Aa"/"BB"), keys,
    properties, a compressed body, a flag, a born timestamp; returns how many were sent."""
    assert java_string_hash("Aa") == java_string_hash("BB")
    big = bytes(range(256)) * 40
    count = 0
    for i in range(12):
        tag = ("Aa", "BB", "x", "")[i % 4]
        extra: dict[str, object] = {"keys": [f"k{i}", f"order-{i}"]} if i % 3 == 0 else {}
        if tag:
            extra["tags"] = tag
        client.send(
            topic, *[f"m{i}-{j}".encode() * (1 + j) for j in range(5)],
            properties={"n": str(i), "\u00e9t\u00e9": "\u2713"}, flag=i, born_timestamp=1_700_000_000_000 + i, **extra,
        )  # fmt: skip
        count += 5
    client.send(topic, zlib.compress(big), tags="Aa", compressed=True)
    client.send(topic, b"plain", tags="BB")
    return count + 2


def wait_retention_settled(client: Client, topic: str) -> int:
    """The queue's min offset once retention moved it and then left it alone for a second."""
    deadline = time.monotonic() + 30
    low, since = 0, time.monotonic()
    while True:
        now_low = client.pull(topic, 0).min_offset
        if now_low != low:
            low, since = now_low, time.monotonic()
        elif low > 0 and time.monotonic() - since > 1.0:
            return low
        assert time.monotonic() < deadline, f"retention did not settle (min {low})"
        time.sleep(0.1)


def metric(text: str, name: str, topic: str, group: str) -> float:
    for line in text.splitlines():
        labels_match = f'topic="{topic}"' in line and f'consumer_group="{group}"' in line
        if line.startswith(name + "{") and labels_match:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} for {topic}/{group} not exported")


def wait_dispatched(client: Client, topic: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while client.pull(topic, 0, max_messages=1).max_offset < count:
        assert time.monotonic() < deadline, "messages were not dispatched"
        time.sleep(0.05)


def test_raw_pull_matches_the_view_path_field_by_field(
    daemons: Daemons,
) -> None:
    broker = daemons.broker(
        settings={**SMALL_STORE, "mappedFileSizeCommitLog": 8192, "maxMessageSize": 4096}
    )
    client = Client(broker.endpoint)
    try:
        count = send_mixed(client, "raw")
        wait_dispatched(client, "raw", count)
        for expression, batch in (("*", 7), ("*", 1000), ("Aa", 5), ("BB || x", 3), ("nope", 4)):
            views, raws = read_queue_both(client, "raw", expression, batch)
            assert raws == views, expression
        everything, _ = read_queue_both(client, "raw", "*", 64)
        assert len(everything) == count
        compressed = [m for m in everything if m["body"] == bytes(range(256)) * 40]
        assert len(compressed) == 1  # inflated by the client on both paths

        # The hash collision reaches the client in raw mode and is dropped there.
        raw = client.pull("raw", 0, max_messages=64, tag_expression="Aa", raw_records=True)
        sent_tags = [m.tags for m in parse_records(raw.records)]
        assert {"Aa", "BB"} <= set(sent_tags) and "x" not in sent_tags
        assert all(m.tags == "Aa" for m in parse_records(raw.records, exact_tags("Aa")))
    finally:
        client.close()


def test_raw_pull_statuses_match_for_bad_and_edge_offsets(
    daemons: Daemons,
) -> None:
    broker = daemons.broker(settings=SMALL_STORE)
    client = Client(broker.endpoint)
    try:
        client.send("edge", b"a", b"b", b"c", tags="t")
        wait_dispatched(client, "edge", 3)
        for offset, expression in ((3, "*"), (50, "*"), (0, "other"), (1, "t")):
            view, raw = pull_both(client, "edge", offset, tag_expression=expression)
            assert (raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset) == (
                view.status, view.next_begin_offset, view.min_offset, view.max_offset,
            ), offset  # fmt: skip
            assert (raw.status == messaging_pb2.FOUND) == bool(raw.records)
        view, raw = pull_both(client, "never-written", 0)
        assert raw.status == view.status == messaging_pb2.NO_NEW_MSG and not raw.records
    finally:
        client.close()


def test_raw_pull_long_polls_commits_and_counts_metrics(
    daemons: Daemons,
) -> None:
    broker = daemons.broker(settings=SMALL_STORE)
    client = Client(broker.endpoint)
    try:
        client.send("lp", b"first")
        wait_dispatched(client, "lp", 1)
        sender = threading.Timer(0.3, lambda: client.send("lp", b"second", b"third"))
        sender.start()
        started = time.monotonic()
        reply = client.pull(
            "lp", 1, group="g1", max_wait_ms=5000, raw_records=True, commit_offset=1
        )
        sender.join()
        assert time.monotonic() - started < 4.0, "the parked raw pull was not woken"
        assert reply.status == messaging_pb2.FOUND
        assert [m.body for m in parse_records(reply.records)] == [b"second", b"third"]
        assert reply.next_begin_offset == 3
        committed = client.msg.QueryConsumerOffset(
            messaging_pb2.QueryConsumerOffsetRequest(consumer_group="g1", topic="lp", queue_id=0),
            timeout=10,
        )
        assert committed.offset == 1
        url = f"http://{broker.metrics_endpoint}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert metric(text, "rocketmq_messages_out_total", "lp", "g1") == 2
        assert metric(text, "rocketmq_throughput_out_total", "lp", "g1") == 11  # body bytes
    finally:
        client.close()


def test_raw_pull_after_retention_deleted_a_range(daemons: Daemons, tmp_path: Path) -> None:
    settings = {
        "defaultTopicQueueNums": 1,
        "mappedFileSizeCommitLog": 4096,
        "maxMessageSize": 1024,
        "mappedFileSizeConsumeQueue": 20 * 10,
        "fileReservedTime": 0,
        "deleteWhen": EVERY_HOUR,
        "cleanResourceInterval": 200,
    }
    with daemons.broker(tmp_path, settings=settings) as broker:
        client = Client(broker.endpoint)
        try:
            for start in range(0, 120, 8):
                bodies = [f"{i:05d}".encode() * 40 for i in range(start, start + 8)]
                client.send("gone", *bodies)
            low = wait_retention_settled(client, "gone")
            view, raw = pull_both(client, "gone", 0)
            assert raw.status == view.status == messaging_pb2.OFFSET_ILLEGAL
            assert raw.next_begin_offset == view.next_begin_offset >= low
            views, raws = read_queue_both(client, "gone", "*", 16)
            # Retention may advance between the two reads of a pair; compare the common tail.
            tail = min(len(views), len(raws))
            assert tail > 0 and raws[-tail:] == views[-tail:]
            assert raws[-1]["body"] == b"00119" * 40
            assert all(m["body"] == f"{m['queue_offset']:05d}".encode() * 40 for m in raws)
        finally:
            client.close()


def test_old_clients_without_raw_records_still_get_views(
    daemons: Daemons,
) -> None:
    broker = daemons.broker(settings=SMALL_STORE)
    client = Client(broker.endpoint)
    try:
        client.send("compat", b"hello", tags="t")
        wait_dispatched(client, "compat", 1)
        reply = client.pull("compat", 0)
        assert reply.records == b"" and [v.body for v in reply.messages] == [b"hello"]
        assert isinstance(reply.messages[0], common_pb2.MessageView)
    finally:
        client.close()
