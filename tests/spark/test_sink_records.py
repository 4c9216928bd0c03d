"""The sink's send paths without Spark or sockets: how rows become CommitLog records or half
messages and how they are chunked, probed and acknowledged (a fake broker stands in for
BrokerRpc)."""

from __future__ import annotations

import zlib

import pytest
from wharf.client.records import parse_records
from wharf.client.spark.options import parse_write_options
from wharf.client.spark.topic_writers import _ChunkSender, _HalfEncoder, _RowEncoder
from wharf.v1 import messaging_pb2

pytestmark = pytest.mark.spark


class FakeBroker:
    """Records what the sender asks; stores chunks unless told otherwise."""

    def __init__(self, stored_ids: set[str] | None = None, status: int = messaging_pb2.SEND_OK):
        self.stored_ids = stored_ids or set()
        self.status = status
        self.probes: list[str] = []
        self.sends: list[tuple[str, int | None, list[bytes]]] = []
        self.short_count = False
        self.in_flight: messaging_pb2.SendMessageResponse | None = None

    def unique_id_exists(self, topic: str, unique_id: str) -> bool:
        self.probes.append(unique_id)
        return unique_id in self.stored_ids

    def start_send_records(self, topic, queue_id, records, producer_group):  # type: ignore[no-untyped-def]
        assert self.in_flight is None, "a chunk was sent before the previous one was acknowledged"
        self.sends.append((topic, queue_id, list(records)))
        count = len(records) - 1 if self.short_count else len(records)
        self.in_flight = messaging_pb2.SendMessageResponse(
            status=self.status, count=count, queue_id=0
        )
        return self

    def start_send_messages(self, topic, queue_id, messages, producer_group):  # type: ignore[no-untyped-def]
        """Half messages: one result per message, consecutive transaction ids from 100 (or
        a gap when ``short_count``)."""
        assert self.in_flight is None, "a chunk was sent before the previous one was acknowledged"
        self.sends.append((topic, queue_id, list(messages)))
        first = 100 + sum(len(chunk) for _, _, chunk in self.sends[:-1])
        reply = messaging_pb2.SendMessageResponse()
        for i in range(len(messages)):
            gap = 1 if self.short_count and i == len(messages) - 1 else 0
            reply.results.add(status=self.status, queue_offset=first + i + gap)
        self.in_flight = reply
        return self

    def result(self) -> messaging_pb2.SendMessageResponse:
        reply, self.in_flight = self.in_flight, None
        assert reply is not None
        return reply


def write_opts(**extra: str):  # type: ignore[no-untyped-def]
    """Options of the records path (``transactional=false``) unless the test says otherwise."""
    return parse_write_options({"endpoints": "127.0.0.1:1", "transactional": "false", **extra})


def ids_of(records: list[bytes]) -> list[str]:
    return [m.msg_id for m in parse_records(b"".join(records))]


def encode_rows(count: int, topic: str = "t", body: bytes = b"x" * 10) -> list[bytes]:
    encoder = _RowEncoder()
    return [encoder.encode(i, topic, body, f"id-{i}", None, None, None) for i in range(count)]


def test_rows_become_records_with_the_message_semantics_of_a_send() -> None:
    encoder = _RowEncoder()
    bare = encoder.encode(0, "orders", b"plain", "spark-w-0-0-0", None, [], [])
    full = encoder.encode(
        1,
        "orders",
        b"paid",
        "spark-w-0-0-1",
        "book",
        ["k1", None, "k2"],
        [("region", "eu"), ("gone", None), ("UNIQ_KEY", "forged"), ("TAGS", "user")],
    )
    plain, rich = parse_records(bare + full)
    assert (plain.body, plain.msg_id, plain.tags, plain.keys) == (b"plain", "spark-w-0-0-0", "", ())
    assert plain.properties == {}
    assert (rich.body, rich.tags, rich.keys) == (b"paid", "book", ("k1", "k2"))
    # The deterministic unique id and the tags column win over user properties of that name;
    # null property values are dropped.
    assert rich.msg_id == "spark-w-0-0-1"
    assert rich.properties == {"region": "eu"}


def test_a_user_tags_property_stands_in_for_a_missing_tags_column() -> None:
    """As in a SendMessage ``messages`` request, where an absent tags field leaves it alone."""
    record = _RowEncoder().encode(0, "t", b"b", "id", "", None, [("TAGS", "user")])
    assert parse_records(record)[0].tags == "user"


def test_bodies_over_4_kib_travel_compressed_and_decode_to_the_original() -> None:
    body = b"compressible " * 1000
    record = _RowEncoder().encode(0, "t", body, "id", None, None, None)
    assert len(record) < len(body)
    (message,) = parse_records(record)
    assert message.body == body
    assert zlib.decompress(message.view.body) == body and message.view.compressed


@pytest.mark.parametrize(
    ("tags", "properties", "message"),
    [
        ("a\x01b", None, "row 7: tags"),
        (None, [("", "v")], "row 7: property names must not be empty"),
        (None, [("p", "x\x02y")], "row 7: property value"),
    ],
)
def test_a_bad_row_is_refused_with_its_row_number(tags, properties, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        _RowEncoder().encode(7, "t", b"b", "id", tags, None, properties)


def test_a_bad_topic_is_refused_with_its_row_number() -> None:
    with pytest.raises(ValueError, match="row 3: "):
        _RowEncoder().encode(3, "bad topic!", b"b", "id", None, None, None)


def test_chunks_follow_batch_size_and_max_request_bytes_per_queue() -> None:
    records = encode_rows(7)
    size = len(records[0])
    broker = FakeBroker()
    sender = _ChunkSender(broker, write_opts(batchSize="3", maxRequestBytes=str(2 * size)))  # type: ignore[arg-type]
    for i, record in enumerate(records):
        sender.add("t", i % 2, record, f"id-{i}")
    sender.flush_all()
    # Queue 0 gets rows 0 2 4 6, queue 1 rows 1 3 5; two records fill maxRequestBytes.
    chunks = [(q, ids_of(rs)) for _, q, rs in broker.sends]
    assert sorted(chunks) == [
        (0, ["id-0", "id-2"]),
        (0, ["id-4", "id-6"]),
        (1, ["id-1", "id-3"]),
        (1, ["id-5"]),
    ]
    assert sender.sent == 7 and sender.skipped == 0


def test_batch_size_cuts_chunks_when_bytes_allow() -> None:
    broker = FakeBroker()
    sender = _ChunkSender(broker, write_opts(batchSize="3"))  # type: ignore[arg-type]
    for i, record in enumerate(encode_rows(7)):
        sender.add("t", None, record, f"id-{i}")
    sender.flush_all()
    assert [len(rs) for _, _, rs in broker.sends] == [3, 3, 1]


def test_a_retry_skips_the_stored_prefix_then_stops_probing() -> None:
    broker = FakeBroker(stored_ids={"id-2", "id-5"})  # the last ids of the first two chunks
    sender = _ChunkSender(broker, write_opts(batchSize="3"))  # type: ignore[arg-type]
    for i, record in enumerate(encode_rows(10)):
        sender.add("t", None, record, f"id-{i}")
    sender.flush_all()
    assert broker.probes == ["id-2", "id-5", "id-8"]  # no probe after the first absent chunk
    assert [ids_of(rs) for _, _, rs in broker.sends] == [["id-6", "id-7", "id-8"], ["id-9"]]
    assert (sender.sent, sender.skipped) == (4, 6)


def test_no_probing_when_idempotence_is_off() -> None:
    broker = FakeBroker(stored_ids={"id-2"})
    sender = _ChunkSender(broker, write_opts(batchSize="3", idempotent="false"))  # type: ignore[arg-type]
    for i, record in enumerate(encode_rows(3)):
        sender.add("t", None, record, f"id-{i}")
    sender.flush_all()
    assert broker.probes == [] and sender.sent == 3


def test_flush_disk_timeout_counts_as_stored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = FakeBroker(status=messaging_pb2.FLUSH_DISK_TIMEOUT)
    sender = _ChunkSender(broker, write_opts())  # type: ignore[arg-type]
    for i, record in enumerate(encode_rows(2)):
        sender.add("t", None, record, f"id-{i}")
    sender.flush_all()
    assert sender.sent == 2
    assert "stored but not flushed in time" in caplog.text and "id-1" in caplog.text


def test_a_refused_or_short_acknowledgement_fails_the_task() -> None:
    refused = FakeBroker(status=messaging_pb2.SLAVE_NOT_AVAILABLE)
    sender = _ChunkSender(refused, write_opts())  # type: ignore[arg-type]
    sender.add("t", None, encode_rows(1)[0], "id-0")
    with pytest.raises(RuntimeError, match="SLAVE_NOT_AVAILABLE"):
        sender.flush_all()
    short = FakeBroker()
    short.short_count = True
    sender = _ChunkSender(short, write_opts())  # type: ignore[arg-type]
    sender.add("t", None, encode_rows(1)[0], "id-0")
    with pytest.raises(RuntimeError, match="acknowledged 0 of 1"):
        sender.flush_all()


def test_rows_become_half_messages_whose_id_ranges_the_task_reports() -> None:
    """The transactional path (the default): prepared messages with the send semantics of
    records (system properties win, big bodies compressed), the chunk's transaction ids kept
    for the driver's commit; the probe still skips chunks a committed run stored."""
    encoder = _HalfEncoder("g", 3600)
    big = b"line of text\n" * 1000
    half = encoder.encode(
        0, "t", big, "id-0", "tg", ["k", None, ""], [("UNIQ_KEY", "x"), ("a", "1")]
    )
    assert dict(half.properties) == {
        "a": "1", "TRAN_MSG": "true", "CHECK_IMMUNITY_TIME_IN_SECONDS": "3600"
    }  # fmt: skip
    assert (half.unique_id, half.tags, list(half.keys)) == ("id-0", "tg", ["k"])
    assert half.compressed and zlib.decompress(half.body) == big

    broker = FakeBroker(stored_ids={"id-2"})  # a committed run stored the first chunk
    sender = _ChunkSender(broker, write_opts(batchSize="3", transactional="true"))  # type: ignore[arg-type]
    for i in range(8):
        sender.add(
            "t", None, encoder.encode(i, "t", b"x", f"id-{i}", None, None, None), f"id-{i}", 1
        )
    sender.flush_all()
    assert broker.probes == ["id-2", "id-5"]
    assert [[m.unique_id for m in chunk] for _, _, chunk in broker.sends] == [
        ["id-3", "id-4", "id-5"], ["id-6", "id-7"]
    ]  # fmt: skip
    assert sender.halves == [(100, 3), (103, 2)] and (sender.sent, sender.skipped) == (5, 3)

    gap = FakeBroker()
    gap.short_count = True
    sender = _ChunkSender(gap, write_opts(transactional="true"))  # type: ignore[arg-type]
    sender.add("t", None, encoder.encode(0, "t", b"x", "id-0", None, None, None), "id-0", 1)
    sender.add("t", None, encoder.encode(1, "t", b"x", "id-1", None, None, None), "id-1", 1)
    with pytest.raises(RuntimeError, match="non-consecutive"):
        sender.flush_all()


def test_transactional_writes_keep_idempotence_and_writer_ids_have_no_dot() -> None:
    from wharf.client.spark.options import OptionError

    with pytest.raises(OptionError, match="transactional=false"):
        write_opts(idempotent="false", transactional="true")
    with pytest.raises(OptionError, match="writerId"):
        write_opts(writerId="a.b")
    assert write_opts(transactional="true").check_immunity_s == 3600
