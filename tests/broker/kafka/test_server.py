"""The Kafka listener byte for byte (a raw client over the tables of ``apis.py``): responses in
request order while a Fetch long-polls, acks=0 answered by nothing, bad frames closing the
connection, versions not served, and what Produce / Fetch / ListOffsets / Metadata answer."""

from __future__ import annotations

import asyncio
import struct
import time

from wharf.broker.frontends.kafka.records import Record, encode_batch
from wharf.store.model import MessageInput

from tests.broker.kafka.kafka_helpers import KafkaClient, KafkaUnderTest, start_kafka
from tests.inproc import InProcFactory

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, INIT_PID = 0, 1, 2, 3, 18, 22


def produce_body(topic: str, partition: int, records: bytes | None, acks: int = -1) -> dict:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def fetch_body(
    topic: str, partition: int, offset: int, wait_ms: int = 0, min_bytes: int = 1
) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }


def batch(*values: bytes, key: bytes | None = b"k") -> bytes:
    return encode_batch([Record(i, 1_000 + i, key, v, []) for i, v in enumerate(values)])


def partition_of(response: dict) -> dict:
    return response["responses"][0]["partitions"][0]


async def produce(client: KafkaClient, topic: str, partition: int, *values: bytes) -> dict:
    response = await client.call(PRODUCE, 7, produce_body(topic, partition, batch(*values)))
    return response["responses"][0]["partition_responses"][0]


async def started(
    inproc_broker: InProcFactory, **settings: str
) -> tuple[KafkaUnderTest, KafkaClient]:
    kafka = await start_kafka(inproc_broker, **settings)
    return kafka, await kafka.client()


async def test_responses_keep_request_order_while_a_fetch_long_polls(
    inproc_broker: InProcFactory,
) -> None:
    kafka, client = await started(inproc_broker)
    await produce(client, "t", 0, b"first")
    started_at = time.monotonic()
    fetch_id = client.send(FETCH, 11, fetch_body("t", 0, 1, wait_ms=5000))
    meta_id = client.send(METADATA, 8, {"topics": None})
    # a second connection produces: the parked fetch wakes well before its 5 s
    other = await kafka.client()
    await asyncio.sleep(0.2)
    assert (await produce(other, "t", 0, b"second"))["base_offset"] == 1
    got_id, fetched = await client.receive(FETCH, 11)
    assert got_id == fetch_id  # the fetch first, though Metadata finished long before
    assert time.monotonic() - started_at < 3
    part = partition_of(fetched)
    assert part["error_code"] == 0 and part["high_watermark"] == 2
    from aiokafka.record.default_records import DefaultRecordBatch

    assert [r.value for r in DefaultRecordBatch(part["records"])] == [b"second"]
    got_id, _ = await client.receive(METADATA, 8)
    assert got_id == meta_id
    await client.close()
    await other.close()
    await kafka.close()


async def test_fetch_waits_max_wait_when_nothing_comes(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker)
    await produce(client, "t", 0, b"x")
    began = time.monotonic()
    part = partition_of(await client.call(FETCH, 11, fetch_body("t", 0, 1, wait_ms=400)))
    assert 0.35 < time.monotonic() - began < 3
    assert part["error_code"] == 0 and part["records"] == b""
    await client.close()
    await kafka.close()


async def test_acks_zero_gets_no_response(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker)
    client.send(PRODUCE, 7, produce_body("quiet", 0, batch(b"a", b"b"), acks=0))
    # the next response read is the ApiVersions one: nothing came for the produce
    response = await client.call(API_VERSIONS, 2, {})
    assert response["error_code"] == 0
    part = partition_of(await client.call(FETCH, 11, fetch_body("quiet", 0, 0, wait_ms=1000)))
    assert part["high_watermark"] == 2
    await client.close()
    await kafka.close()


async def test_an_unparseable_header_closes_the_connection(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker)
    client.writer.write(struct.pack(">i", 3) + b"\x00\x12\x00")  # 3 bytes: no header
    async with asyncio.timeout(5):
        assert await client.reader.read() == b""
    await client.close()
    client = await kafka.client()
    client.writer.write(struct.pack(">i", 200 << 20))  # over the 64 MiB frame limit
    async with asyncio.timeout(5):
        assert await client.reader.read() == b""
    await client.close()
    client = await kafka.client()
    client.writer.write(struct.pack(">ihhi", 8, 99, 0, 1))  # an API key nobody serves
    async with asyncio.timeout(5):
        assert await client.reader.read() == b""
    await client.close()
    await kafka.close()


async def test_api_versions_fallback_and_v3(inproc_broker: InProcFactory) -> None:
    """v4 (kafka-python 3's first try) gets error 35 in v0's layout, then v3 (librdkafka's
    first try) is answered in full: a flexible body behind a v0 header."""
    kafka, client = await started(inproc_broker)
    v4 = struct.pack(">hhih", 18, 4, 1, 3) + b"cli\x00" + b"\x04kcat\x041.7\x00"
    client.writer.write(struct.pack(">i", len(v4)) + v4)
    _, first = await client.receive(API_VERSIONS, 0)
    assert first["error_code"] == 35 and len(first["api_keys"]) > 10
    second = await client.call(API_VERSIONS, 3, {"client_software_name": "kcat"})
    assert second["error_code"] == 0
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in second["api_keys"]}
    assert keys[1] == (4, 11) and keys[22] == (0, 2) and keys[18] == (0, 3)
    await client.close()
    await kafka.close()


async def test_produce_fetch_offsets_and_errors(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker, auto_create_topic_enable="false")
    ctx = kafka.controller.ctx
    ctx.topics.create("orders", 2, 2, 6, {})
    reply = await produce(client, "orders", 1, b"a", b"b", b"c")
    assert (reply["error_code"], reply["base_offset"], reply["log_start_offset"]) == (0, 0, 0)
    assert (await produce(client, "orders", 1, b"d"))["base_offset"] == 3
    assert (await produce(client, "orders", 2, b"x"))["error_code"] == 3  # no partition 2
    assert (await produce(client, "nope", 0, b"x"))["error_code"] == 3  # no auto-create
    assert (await produce(client, "bad name", 0, b"x"))["error_code"] == 17
    await ctx.store.wait_dispatched(5)  # acks precede the dispatch that moves the watermark
    corrupt = bytearray(batch(b"z"))
    corrupt[-1] ^= 1
    response = await client.call(PRODUCE, 8, produce_body("orders", 0, bytes(corrupt)))
    row = response["responses"][0]["partition_responses"][0]
    assert row["error_code"] == 2 and "CRC" in row["error_message"]

    part = partition_of(await client.call(FETCH, 11, fetch_body("orders", 1, 2)))
    assert (part["error_code"], part["high_watermark"], part["log_start_offset"]) == (0, 4, 0)
    from aiokafka.record.default_records import DefaultRecordBatch

    assert [(r.offset, r.value) for r in DefaultRecordBatch(part["records"])] == [
        (2, b"c"),
        (3, b"d"),
    ]
    assert partition_of(await client.call(FETCH, 11, fetch_body("orders", 1, 9)))["error_code"] == 1
    assert partition_of(await client.call(FETCH, 4, fetch_body("gone", 0, 0)))["error_code"] == 3

    def list_body(stamp: int) -> dict:
        return {
            "replica_id": -1,
            "topics": [
                {"name": "orders", "partitions": [{"partition_index": 1, "timestamp": stamp}]}
            ],
        }

    rows = [
        (await client.call(LIST_OFFSETS, 5, list_body(s)))["topics"][0]["partitions"][0]["offset"]
        for s in (-2, -1, 0, int(time.time() * 1000) + 60_000)
    ]
    assert rows == [0, 4, 0, 4]
    v0 = await client.call(LIST_OFFSETS, 0, list_body(-1))
    assert v0["topics"][0]["partitions"][0]["old_style_offsets"] == [4]
    await client.close()
    await kafka.close()


async def test_metadata_names_this_broker_and_creates_like_a_send(
    inproc_broker: InProcFactory,
) -> None:
    kafka, client = await started(inproc_broker)
    names = ["fresh", "com.acme.orders.v1", "..", "__consumer_offsets"]
    response = await client.call(METADATA, 8, {"topics": [{"name": n} for n in names]})
    (broker,) = response["brokers"]
    assert (broker["host"], broker["port"]) == ("127.0.0.1", kafka.port)
    fresh, dotted, dots, internal = response["topics"]
    assert fresh["error_code"] == 0 and len(fresh["partitions"]) == 4  # defaultTopicQueueNums
    assert all(p["leader_id"] == broker["node_id"] for p in fresh["partitions"])
    assert dotted["error_code"] == 0 and len(dotted["partitions"]) == 4  # Kafka's dotted names
    assert dots["error_code"] == 17 and internal["error_code"] == 17  # INVALID_TOPIC_EXCEPTION
    off = await client.call(
        METADATA, 8, {"topics": [{"name": "later"}], "allow_auto_topic_creation": False}
    )
    assert off["topics"][0]["error_code"] == 3
    listed = await client.call(METADATA, 1, {"topics": None})
    names = {t["name"] for t in listed["topics"]}
    assert "fresh" in names and not any(n.startswith(("%", "SCHEDULE", "rmq_sys")) for n in names)
    await client.close()
    await kafka.close()


async def test_a_broker_shutting_down_refuses_produce_and_creates_no_topic(
    inproc_broker: InProcFactory,
) -> None:
    # Admission is the core's (SendCore.lookup / topic), shutting-down refusal included; Kafka
    # codes at the edge: NOT_LEADER_OR_FOLLOWER on Produce, LEADER_NOT_AVAILABLE in Metadata
    # (both retriable: the client refreshes and goes elsewhere).
    kafka, client = await started(inproc_broker)
    ctx = kafka.controller.ctx
    assert (await produce(client, "held", 0, b"x"))["error_code"] == 0
    ctx.shutting_down = True
    try:
        assert (await produce(client, "held", 0, b"y"))["error_code"] == 6
        response = await client.call(METADATA, 8, {"topics": [{"name": "held"}, {"name": "new"}]})
        held, new = response["topics"]
        assert held["error_code"] == 0 and held["partitions"]  # looked up, not created
        assert new["error_code"] == 5 and ctx.topics.get("new") is None
    finally:
        ctx.shutting_down = False
    await client.close()
    await kafka.close()


async def test_advertised_address_setting(inproc_broker: InProcFactory) -> None:
    from tests.broker.kafka.kafka_helpers import attach_kafka

    broker = await inproc_broker(
        mapped_file_size_commit_log=str(16 << 20), mapped_file_size_consume_queue="60000"
    )
    kafka = await attach_kafka(
        broker.controller, kafka_advertised_address="kafka.example.com:19092"
    )
    client = await kafka.client()
    response = await client.call(METADATA, 1, {"topics": []})
    assert [(b["host"], b["port"]) for b in response["brokers"]] == [("kafka.example.com", 19092)]
    coordinator = await client.call(10, 2, {"key": "g", "key_type": 0})
    assert (coordinator["host"], coordinator["port"]) == ("kafka.example.com", 19092)
    txn = await client.call(10, 2, {"key": "tx", "key_type": 1})  # a transactional id's
    assert (txn["error_code"], txn["host"], txn["port"]) == (0, "kafka.example.com", 19092)
    await client.close()
    await kafka.close()


async def test_a_rocketmq_message_reads_as_a_kafka_record(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker)
    ctx = kafka.controller.ctx
    topic, queue = ctx.send_core.admit("mixed", 0)
    message = MessageInput(
        body=b"from-rocketmq",
        properties={"KEYS": "order-1 order-2", "TAGS": "paid", "region": "eu", "UNIQ_KEY": "id1"},
        born_timestamp=1_234_567,
    )
    await ctx.send_core.put(topic.name, queue, [message])
    part = partition_of(await client.call(FETCH, 11, fetch_body("mixed", 0, 0, wait_ms=1000)))
    from aiokafka.record.default_records import DefaultRecordBatch

    (record,) = list(DefaultRecordBatch(part["records"]))
    assert (record.key, record.value, record.timestamp) == (
        b"order-1 order-2",
        b"from-rocketmq",
        1_234_567,
    )
    assert list(record.headers) == [("region", b"eu"), ("TAGS", b"paid")]
    await client.close()
    await kafka.close()


async def test_init_producer_id_flexible_v2(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker)
    ids = [
        (await client.call(INIT_PID, v, {"transactional_id": None, "transaction_timeout_ms": 1}))
        for v in (0, 1, 2)
    ]
    assert [r["error_code"] for r in ids] == [0, 0, 0]
    assert len({r["producer_id"] for r in ids}) == 3
    txn = await client.call(INIT_PID, 2, {"transactional_id": "tx", "transaction_timeout_ms": 1})
    assert (txn["error_code"], txn["producer_epoch"]) == (0, 0)
    assert txn["producer_id"] not in {r["producer_id"] for r in ids}
    again = await client.call(INIT_PID, 2, {"transactional_id": "tx", "transaction_timeout_ms": 1})
    assert (again["producer_id"], again["producer_epoch"]) == (txn["producer_id"], 1)  # fenced
    too_long = {"transactional_id": "tx", "transaction_timeout_ms": 3_600_001}
    assert (await client.call(INIT_PID, 2, too_long))["error_code"] == 50  # past the maximum
    await client.close()
    await kafka.close()


async def test_fetch_sizes(inproc_broker: InProcFactory) -> None:
    """partition_max_bytes bounds a partition's records, but the first record always comes
    (a record bigger than the limit is never stuck); max_bytes bounds the whole answer."""
    kafka, client = await started(inproc_broker)
    big = b"x" * 3000
    for partition in (0, 1):
        await produce(client, "sized", partition, big, big, big)
    await kafka.controller.ctx.store.wait_dispatched(5)
    body = fetch_body("sized", 0, 0, wait_ms=1000)
    body["topics"][0]["partitions"][0]["partition_max_bytes"] = 100
    from aiokafka.record.default_records import DefaultRecordBatch

    part = partition_of(await client.call(FETCH, 11, body))
    assert [r.offset for r in DefaultRecordBatch(part["records"])] == [0]
    two = fetch_body("sized", 0, 0)
    two["topics"][0]["partitions"].append(
        {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    )
    two["max_bytes"] = 5000  # the first partition's records spend it
    rows = (await client.call(FETCH, 11, two))["responses"][0]["partitions"]
    assert len(DefaultRecordBatch(rows[0]["records"]).__iter__().__next__().value) == 3000
    assert rows[1]["records"] == b"" and rows[1]["high_watermark"] == 3
    await client.close()
    await kafka.close()


async def test_a_wildcard_listen_advertises_the_brokers_host(inproc_broker: InProcFactory) -> None:
    from tests.broker.kafka.kafka_helpers import attach_kafka

    broker = await inproc_broker(
        mapped_file_size_commit_log=str(16 << 20), mapped_file_size_consume_queue="60000"
    )
    kafka = await attach_kafka(broker.controller, kafka_listen="0.0.0.0:0")
    client = await kafka.client()
    response = await client.call(METADATA, 1, {"topics": []})
    endpoint_host = broker.controller.ctx.endpoint.rpartition(":")[0]
    assert [(b["host"], b["port"]) for b in response["brokers"]] == [(endpoint_host, kafka.port)]
    assert kafka.part.ready()["kafka"] == f"{endpoint_host}:{kafka.port}"
    await client.close()
    await kafka.close()


async def test_a_fetch_of_several_partitions_wakes_on_any(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker)
    kafka.controller.ctx.topics.create("multi", 3, 3, 6, {})
    body = fetch_body("multi", 0, 0, wait_ms=5000)
    body["topics"][0]["partitions"] += [
        {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in (1, 2)
    ]
    began = time.monotonic()
    fetch_id = client.send(FETCH, 11, body)
    await asyncio.sleep(0.2)
    other = await kafka.client()
    await produce(other, "multi", 2, b"late")
    got_id, response = await client.receive(FETCH, 11)
    assert got_id == fetch_id and time.monotonic() - began < 3
    rows = {p["partition_index"]: p for p in response["responses"][0]["partitions"]}
    assert rows[0]["records"] == rows[1]["records"] == b""
    assert b"late" in rows[2]["records"]
    assert kafka.controller.ctx.long_poll.parked_count == 0  # the other parks were withdrawn
    await client.close()
    await other.close()
    await kafka.close()


async def test_create_topics_answers_each_row_and_waits_for_the_disk_once(
    inproc_broker: InProcFactory,
) -> None:
    """One CreateTopics of six rows: Kafka's own checks per row, the two new topics made through
    the core's batch (one wait for the metadata on disk for the request, not one per topic)."""
    kafka, client = await started(inproc_broker)
    topics = kafka.controller.ctx.topics
    waits = 0
    durable = topics.durable

    async def counted() -> None:
        nonlocal waits
        waits += 1
        await durable()

    topics.durable = counted

    def row(name: str, partitions: int = 2, configs: list | None = None) -> dict:
        return {"name": name, "num_partitions": partitions, "replication_factor": 1,
                "assignments": [], "configs": configs or []}  # fmt: skip

    await produce(client, "existing", 0, b"x")  # auto-created by the send
    waits = 0
    rows = [
        row("made-a", 3), row("existing"), row("bad-count", 0), row("made-b", -1),
        row("compacted", 1, [{"name": "cleanup.policy", "value": "compact"}]), row("made-a"),
        row("shredded", 1, [{"name": "cleanup.policy", "value": "shred"}]),
    ]  # fmt: skip
    response = await client.call(
        19, 1, {"topics": rows, "timeout_ms": 5000, "validate_only": False}
    )
    codes = [(t["name"], t["error_code"]) for t in response["topics"]]
    # 36 TOPIC_ALREADY_EXISTS (before the request and earlier in it), 37 INVALID_PARTITIONS,
    # 40 INVALID_CONFIG
    assert codes == [("made-a", 0), ("existing", 36), ("bad-count", 37), ("made-b", 0),
                     ("compacted", 0), ("made-a", 36), ("shredded", 40)]  # fmt: skip
    assert response["topics"][-1]["error_message"] == (
        "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete"
    )
    assert waits == 1
    assert topics.require("made-a").read_queue_nums == 3
    assert topics.require("made-b").read_queue_nums == topics.default_queue_nums
    assert topics.require("compacted").attributes == {"cleanup.policy": "compact"}
    assert topics.get("bad-count") is None and topics.get("shredded") is None

    checked = await client.call(
        19, 1, {"topics": [row("dry")], "timeout_ms": 5000, "validate_only": True}
    )
    assert checked["topics"][0]["error_code"] == 0 and topics.get("dry") is None
    assert waits == 1  # nothing made, nothing waited for
    await client.close()
    await kafka.close()
