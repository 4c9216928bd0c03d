"""SendStream's writer hand-off: callers write their own request when no write is in progress,
leave it to the writer otherwise, and a cancelled writer hands its backlog over (no request is
stranded), against the real daemon."""

from __future__ import annotations

import asyncio

from wharf.client.channel import open_channel
from wharf.client.record_encoder import RecordEncoder, results_of
from wharf.client.send_stream import SendStream
from wharf.v1 import messaging_pb2

from tests.harness import BrokerProcess


def _head(topic: str) -> bytes:
    return messaging_pb2.SendMessageRequest(topic=topic, queue_id=0).SerializeToString()


async def test_concurrent_requests_all_answered_even_when_a_writer_is_cancelled(
    broker: BrokerProcess, name: str
) -> None:
    encoder = RecordEncoder()
    tail = encoder.tail(name)
    channel = open_channel(broker.endpoint)
    stream = SendStream(channel)
    try:
        # 60 callers at once, 20 records each: most find a write in progress.
        batches = [
            [encoder.encode_bare(tail, b"%d-%d" % (c, i), f"{c:016X}{i:016X}") for i in range(20)]
            for c in range(60)
        ]
        calls = [
            asyncio.ensure_future(stream.request_records(_head(name), records))
            for records in batches
        ]
        await asyncio.sleep(0)  # every caller has queued its request; the first is writing
        calls[0].cancel()  # the writer goes away: the others must still be sent
        done = await asyncio.gather(*calls[1:])
        assert all(reply.count == 20 and not reply.HasField("error") for reply in done)
        offsets = sorted(reply.first_queue_offset for reply in done)
        assert len(set(offsets)) == len(offsets)  # distinct appends, none lost or merged
        # A later request on the same stream still works, results line up with the records.
        records = batches[0]
        reply = await stream.request_records(_head(name), records)
        results = results_of(reply, name, records, [f"{0:016X}{i:016X}" for i in range(20)])
        assert [r.queue_offset for r in results] == list(
            range(reply.first_queue_offset, reply.first_queue_offset + 20)
        )
    finally:
        await stream.close()
        await channel.close()
    assert stream.pending == 0
