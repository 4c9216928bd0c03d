"""The columns form of a multi-topic send (``SendMessageRequest.batch_topics``).

A producer with many topics in use sends their batches in one request. As ``parts`` each
batch was a sub-message: parsed by gRPC, read field by field, checked as a request of its own
and answered by a reply sub-message built field by field, ~19 us of Python per 16-message
batch (``tests/bench/README.md``, "Produce across topics"). In columns a request is the
topics, the batch sizes and one records blob, and the reply four packed arrays.

Each batch is admitted (topic, queue picked round robin); the admitted blob goes to the store
as it came (``SendCore.append_columns``: one compiled check of every batch, one patch, one
commit log write) and comes back as columns (``WrittenMany``: no object a batch), then one
durability wait for all; an error fails its batch alone (``batch_errors``; a refused batch
leaves the others to ``append_records_many`` on their slices). Per 16-message batch that left
~2.7 us of Python less in the broker than one result object per batch did (user CPU a message
at 256 topics 2.97 -> 2.73 us, ``tests.bench.topics``, 2026-11-25).
"""

from __future__ import annotations

import logging
from itertools import accumulate

import grpc
from wharf.broker.core.model import WrittenMany
from wharf.broker.errors import InvalidArgumentError
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.v1.convert import SEND_STATUS, error_into
from wharf.v1 import messaging_pb2

log = logging.getLogger(__name__)

SEND_OK = messaging_pb2.SEND_OK


class ColumnsSender:
    """Serves requests in the columns form (``SendProcessor.send`` hands them over)."""

    def __init__(self, ctx: FrontEndKit) -> None:
        self._ctx = ctx
        self._core = ctx.port.send
        self._store_host = ctx.port.store_config.store_host

    async def send(
        self, request: messaging_pb2.SendMessageRequest, born_host: str
    ) -> messaging_pb2.SendMessageResponse:
        topics = list(request.batch_topics)
        sizes = list(request.batch_sizes)
        records = request.records  # read once: each read of a bytes field copies it
        if request.topic or request.messages or request.parts or request.HasField("queue_id"):
            raise InvalidArgumentError(
                "a SendMessageRequest with batch_topics sets no topic, queue_id, messages or parts"
            )
        if len(sizes) != len(topics) or sum(sizes) != len(records):
            raise InvalidArgumentError(
                f"batch_sizes ({len(sizes)} batches, {sum(sizes)} bytes) do not match "
                f"batch_topics ({len(topics)}) and records ({len(records)} bytes)"
            )
        core = self._core
        await core.dispatch_room()  # once for the whole request, as put() for one batch
        refused: dict[int, Exception] = {}
        if 0 in sizes:
            for index, (topic, size) in enumerate(zip(topics, sizes, strict=True)):
                if not size:
                    refused[index] = InvalidArgumentError(
                        f"batch #{index} ({topic!r}) has no records"
                    )
        queue_ids = core.admit_round_robin(topics, refused)  # of the admitted, in order
        if not queue_ids:
            return self._reply(request.request_id, topics, refused, None, None, SEND_OK)
        try:
            if not refused:  # the usual request: the blob as it came
                many = core.append_columns(topics, queue_ids, records, sizes, born_host)
            else:  # the admitted batches' slices only
                view = memoryview(records)
                bounds = list(accumulate(sizes, initial=0))
                admitted = [i for i in range(len(topics)) if i not in refused]
                many = core.append_records_many(
                    [
                        (topics[i], queue_id, view[bounds[i] : bounds[i + 1]])
                        for i, queue_id in zip(admitted, queue_ids, strict=True)
                    ],
                    born_host,
                )
        except Exception as exc:  # the write failed: nothing of it stored
            return self._reply(request.request_id, topics, refused, None, exc, SEND_OK)
        status = SEND_OK
        failed: Exception | None = None
        if many.stored:
            try:
                # One durability wait for all (the last append's covers the others'); its
                # status (a flush or replica time-out) is every batch's.
                status = SEND_STATUS[await many.durable()]
            except Exception as exc:
                failed = exc
        return self._reply(request.request_id, topics, refused, many, failed, status)

    def _reply(
        self,
        request_id: int,
        topics: list[str],
        refused: dict[int, Exception],
        many: WrittenMany | None,
        failed: Exception | None,
        status: messaging_pb2.SendStatus,
    ) -> messaging_pb2.SendMessageResponse:
        count = len(topics)
        errors = refused
        stored = 0
        if many is None or failed is not None:  # nothing admitted, or every admitted failed
            queue_ids, first_queue_offsets, first_offsets = [-1] * count, [0] * count, [0] * count
            if failed is not None:
                errors = {i: refused.get(i, failed) for i in range(count)}
        else:
            stored = many.stored
            if stored:
                self._ctx.counters.messages_in += stored
                self._ctx.metrics.on_batches_in(many.topics, many.counts, many.sizes)
            if not refused:  # the usual request: the columns as the store answered them
                queue_ids, first_queue_offsets = many.queue_ids, many.first_queue_offsets
                first_offsets = many.first_offsets
                errors = many.errors
            else:
                where = [i for i in range(count) if i not in refused]
                queue_ids, first_queue_offsets = [-1] * count, [0] * count
                first_offsets = [0] * count
                for i, index in enumerate(where):
                    queue_ids[index] = many.queue_ids[i]
                    first_queue_offsets[index] = many.first_queue_offsets[i]
                    first_offsets[index] = many.first_offsets[i]
                errors = {**refused, **{where[i]: exc for i, exc in many.errors.items()}}
        response = messaging_pb2.SendMessageResponse(
            request_id=request_id,
            status=status,
            store_host=self._store_host,
            count=stored,
            batch_queue_ids=queue_ids,
            batch_first_queue_offsets=first_queue_offsets,
            batch_first_commit_log_offsets=first_offsets,
        )
        for index, exc in errors.items():
            if error_into(response.batch_errors[index], exc) is grpc.StatusCode.INTERNAL:
                log.error("a batch of a send request failed", exc_info=exc)
        return response
