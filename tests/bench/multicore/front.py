"""One front-end process of the prototype: apache.rocketmq.v2 ``SendMessage`` on a gRPC port it
shares with its siblings (``grpc.so_reuseport``: the kernel spreads connections over the
processes), records forwarded to the store process over the wire protocol.

    python -m tests.bench.multicore.front --store HOST:PORT --listen 127.0.0.1:PORT --ready FILE
        [--window 1]

Per call it does the v2 layer's per-message work with the broker's own conversion, read-only
(``broker/frontends/v2/convert.py``: ``message_id``, ``message_group``, ``to_input``), encodes each message
as a CommitLog record the way the SDK does (``encode_record``), and parks the call. Parked
records of a topic go to the store as ONE wharf.v1 ``SendMessage`` with ``records`` (one queue
per batch, round robin over ``QUEUES``), at most ``--window`` batches in flight per process (default 1): while
the window is full the next calls pile up, so the batch grows with the load (coalescing costs no
timer). Each call is answered from the compact reply (queue offset = first + its index).

What it leaves out of the broker's v2 send (a stand-in, not a product): topic admission from
the store's metadata (the queue count is fixed here), de-duplication, FIFO/DELAY/TRANSACTION
routing, ACL, metrics. ``/bench.Front/Stats``, on a port of its own, answers JSON counters (calls, records, batches).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import uvloop
from grpc import aio
from wharf.broker.frontends.v2.convert import message_group, message_id, to_input
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.codec.properties import properties_to_string
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.v1 import messaging_pb2

QUEUES = 8  # the bench topic's queues (the broker's: defaultTopicQueueNums in __main__)
MAX_BATCH = 512  # records per store request (~0.5 MiB of 1 KiB messages)
MAX_MESSAGE_SIZE = 4 << 20
STORE_SEND = "/wharf.v1.MessagingService/SendMessage"
OK = definition_pb2.OK


class Forwarder:
    """Parked records per topic -> batched ``records`` requests to the store process."""

    def __init__(self, store: str, window: int) -> None:
        self.window = window
        self.channel = WireChannel(store)
        self.call = self.channel.unary_unary(
            STORE_SEND,
            request_serializer=messaging_pb2.SendMessageRequest.SerializeToString,
            response_deserializer=messaging_pb2.SendMessageResponse.FromString,
        )
        # topic -> [(records of one call, its future of the first queue offset)]
        self.parked: dict[str, list[tuple[list[bytes], asyncio.Future[tuple[int, int]]]]] = {}
        self.in_flight = 0
        self.turn = 0
        self.stats = {"calls": 0, "records": 0, "batches": 0}
        self.sending: set[asyncio.Task[None]] = set()  # at most ``window``

    def park(self, topic: str, records: list[bytes]) -> asyncio.Future[tuple[int, int]]:
        """The call's (queue id, queue offset of its first record), once stored."""
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self.parked.setdefault(topic, []).append((records, future))
        self.stats["calls"] += 1
        self._flush()
        return future

    def _flush(self) -> None:
        while self.in_flight < self.window and self.parked:
            topic = next(iter(self.parked))
            calls = self.parked[topic]
            taken, size = 0, 0
            while taken < len(calls) and (size == 0 or size + len(calls[taken][0]) <= MAX_BATCH):
                size += len(calls[taken][0])
                taken += 1
            batch, rest = calls[:taken], calls[taken:]
            if rest:
                self.parked[topic] = rest
            else:
                del self.parked[topic]
            self.in_flight += 1
            task = asyncio.ensure_future(self._send(topic, batch))
            self.sending.add(task)
            task.add_done_callback(self.sending.discard)

    async def _send(
        self, topic: str, batch: list[tuple[list[bytes], asyncio.Future[tuple[int, int]]]]
    ) -> None:
        queue_id, self.turn = self.turn % QUEUES, self.turn + 1
        records = [r for records, _ in batch for r in records]
        request = messaging_pb2.SendMessageRequest(
            topic=topic, queue_id=queue_id, records=b"".join(records)
        )
        try:
            reply = await self.call(request)
        except Exception as exc:  # every parked call of the batch fails with it
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        else:
            offset = reply.first_queue_offset
            for call_records, future in batch:
                future.set_result((reply.queue_id, offset))
                offset += len(call_records)
        finally:
            self.stats["records"] += len(records)
            self.stats["batches"] += 1
            self.in_flight -= 1
            self._flush()


def make_handlers(forwarder: Forwarder) -> tuple[grpc.GenericRpcHandler, ...]:
    async def send(request: service_pb2.SendMessageRequest, context: Any) -> Any:
        # The v2 layer reads the headers (client id, namespace) and the peer of every call.
        metadata = dict(context.invocation_metadata())
        if not metadata.get("x-mq-client-id"):
            context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
            return service_pb2.SendMessageResponse()
        born_host = context.peer().rpartition(":")[0].rpartition(":")[2] + ":0"
        response = service_pb2.SendMessageResponse()
        messages = request.messages
        if not messages:
            response.status.code = definition_pb2.BAD_REQUEST
            return response
        topic = messages[0].topic.name
        tail = topic_tail(topic)
        records, uids = [], []
        for m in messages:
            uid = message_id(m)
            stored = to_input(m, uid, message_group(m), MAX_MESSAGE_SIZE, born_host)
            props = properties_to_string(stored.properties).encode()
            records.append(encode_record(tail, stored.body, props, born_ts=stored.born_timestamp))
            uids.append(uid)
        _, offset = await forwarder.park(topic, records)
        add = response.entries.add
        for i, uid in enumerate(uids):
            entry = add()
            entry.message_id = uid
            entry.offset = offset + i
            entry.status.code = OK
            entry.status.message = "OK"
        response.status.code = OK
        response.status.message = "OK"
        return response

    async def stats(request: bytes, context: Any) -> bytes:
        return json.dumps(forwarder.stats).encode()

    return (
        grpc.method_handlers_generic_handler(
            "apache.rocketmq.v2.MessagingService",
            {
                "SendMessage": grpc.unary_unary_rpc_method_handler(
                    send,
                    request_deserializer=service_pb2.SendMessageRequest.FromString,
                    response_serializer=service_pb2.SendMessageResponse.SerializeToString,
                )
            },
        ),
        grpc.method_handlers_generic_handler(
            "bench.Front", {"Stats": grpc.unary_unary_rpc_method_handler(stats)}
        ),
    )


async def serve(store: str, listen: str, ready: Path, window: int) -> None:
    forwarder = Forwarder(store, window)
    v2, stats = make_handlers(forwarder)
    server = aio.server(options=[("grpc.so_reuseport", 1)])
    server.add_generic_rpc_handlers((v2,))
    port = server.add_insecure_port(listen)
    # The counters on a port of this process alone (the shared one reaches any sibling).
    own = aio.server(options=[("grpc.so_reuseport", 0)])
    own.add_generic_rpc_handlers((stats,))
    own_port = own.add_insecure_port("127.0.0.1:0")
    await server.start()
    await own.start()
    await asyncio.to_thread(ready.write_text, json.dumps({"port": port, "stats": own_port}))
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="host:port of the store's wire port")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--window", type=int, default=1, help="store requests in flight")
    args = parser.parse_args()
    uvloop.run(serve(args.store, args.listen, args.ready, args.window))


if __name__ == "__main__":
    main()
