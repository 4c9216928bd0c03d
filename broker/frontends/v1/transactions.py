"""EndTransaction, TransactionChecks, ListHalfMessages and ResolveHalfMessage for wharf.v1, and
RecallMessage of timed messages (the other broker-resolved fate of a stored message).

A message sent with property ``TRAN_MSG=true`` is a half message (``wharf.store.services.
transactions``): invisible until EndTransaction commits it; its transaction id is its send
result's ``queue_offset``. A producer that keeps a ``TransactionChecks`` stream open for its
topics gets a ``TransactionCheck`` for each half left unresolved past ``transactionTimeOut``
(``wharf.broker.core.transactions``) and answers with EndTransaction. An unknown transaction, or one
of another message or topic: NOT_FOUND. A repeated END answers how it was resolved and writes
nothing. EndTransactions resolves many halves of one writer (a msg_id prefix) at once: the Spark
sink's micro-batch commit. The admin pair lists open halves and resolves one by hand (the CLI's ``wharf tx``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from wharf.broker.core.port import RequestContext
from wharf.broker.errors import InvalidArgumentError
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.v1.convert import to_view
from wharf.broker.meta.topics import validate_topic_name
from wharf.store.codec.ids import parse_recall_handle
from wharf.store.codec.properties import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
)
from wharf.store.model import StoredMessage
from wharf.v1 import admin_pb2, messaging_pb2

# Halves one EndTransactions may name: its commit copies are appended while the call waits, so
# a request stays around a second of broker work (~20 us per half).
_MAX_BATCH_END = 65536
_REQUEST = RequestContext("wharf.v1")


def _offset(transaction_id: str) -> int:
    if not transaction_id.isdigit():
        raise InvalidArgumentError(
            f"transaction_id {transaction_id[:64]!r} is not one this broker gave (a send "
            "result's queue_offset)"
        )
    return int(transaction_id)


def as_sent(message: StoredMessage) -> StoredMessage:
    """A half message as its producer sent it: its topic and queue, no broker properties."""
    props = dict(message.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, message.topic)
    queue = props.pop(PROPERTY_REAL_QUEUE_ID, "")
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    return dataclasses.replace(
        message,
        topic=topic,
        queue_id=int(queue) if queue.isdigit() else message.queue_id,
        properties=props,
    )


class TransactionProcessor:
    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx

    async def end(
        self, request: messaging_pb2.EndTransactionRequest
    ) -> messaging_pb2.EndTransactionResponse:
        offset = _offset(request.transaction_id)
        # UnknownTransaction is a NotFoundError: NOT_FOUND by the error table.
        how = await self.ctx.port.transactions.end(
            offset, request.msg_id, request.commit, request.topic
        )
        return messaging_pb2.EndTransactionResponse(resolution=how)

    async def end_batch(
        self, request: messaging_pb2.EndTransactionsRequest
    ) -> messaging_pb2.EndTransactionsResponse:
        if not request.msg_id_prefix:
            raise InvalidArgumentError(
                "EndTransactions needs msg_id_prefix: the unique id prefix of the writer's "
                "half messages"
            )
        offsets: list[int] = []
        for r in request.ranges:
            if r.first < 0 or not 0 < r.count <= _MAX_BATCH_END:
                raise InvalidArgumentError(
                    f"transaction range {r.first}+{r.count}: ids are >= 0 and a range has "
                    f"1..{_MAX_BATCH_END} of them"
                )
            offsets.extend(range(r.first, r.first + r.count))
            if len(offsets) > _MAX_BATCH_END:
                raise InvalidArgumentError(
                    f"EndTransactions resolves at most {_MAX_BATCH_END} halves per request; "
                    "split the ranges"
                )
        # UnknownTransaction (a half of another writer) is a NotFoundError: NOT_FOUND.
        counts = await self.ctx.port.transactions.end_batch(
            offsets,
            request.commit,
            request.msg_id_prefix,
            request.rollback_rest,
            set(request.topics),
        )
        return messaging_pb2.EndTransactionsResponse(**counts)

    async def checks(
        self, request: messaging_pb2.TransactionChecksRequest
    ) -> AsyncIterator[messaging_pb2.TransactionCheck]:
        topics = list(dict.fromkeys(request.topics))
        if not topics:
            raise InvalidArgumentError("TransactionChecks needs the topics the producer sends to")
        for topic in topics:
            validate_topic_name(topic)
        channels = self.ctx.check_targets
        queue = channels.open(topics)
        try:
            while True:
                message, offset = await queue.get()
                yield messaging_pb2.TransactionCheck(
                    transaction_id=str(offset),
                    message=to_view(as_sent(message), self.ctx.offset_ids),
                )
        finally:
            channels.close(topics, queue)

    def list_halves(
        self, request: admin_pb2.ListHalfMessagesRequest
    ) -> admin_pb2.ListHalfMessagesResponse:
        reply = admin_pb2.ListHalfMessagesResponse()
        for half in self.ctx.port.transactions.open_halves(request.topic):
            reply.messages.add(
                transaction_id=str(half.offset),
                topic=half.topic,
                msg_id=half.message_id,
                store_timestamp=half.stored_ms,
                checks=half.checks,
            )
        return reply

    async def resolve(
        self, request: admin_pb2.ResolveHalfMessageRequest
    ) -> admin_pb2.ResolveHalfMessageResponse:
        # An operator names a half by its offset alone; not open: UnknownTransaction, NOT_FOUND.
        how = await self.ctx.port.transactions.resolve(
            _offset(request.transaction_id), request.commit
        )
        return admin_pb2.ResolveHalfMessageResponse(resolution=how)

    async def recall(
        self, request: messaging_pb2.RecallMessageRequest
    ) -> messaging_pb2.RecallMessageResponse:
        """Cancel a timed message before it is due (the timer's cancel)."""
        parsed = parse_recall_handle(request.recall_handle)
        if parsed is None:
            raise InvalidArgumentError(
                f"malformed recall_handle {request.recall_handle[:64]!r}: expected "
                "<queue_offset>.<msg_id> of a timed message's send result"
            )
        offset, msg_id = parsed
        # UnknownTimer (delivered or recalled already) is a NotFoundError: NOT_FOUND.
        await self.ctx.port.recall(_REQUEST, offset, msg_id, request.topic)
        return messaging_pb2.RecallMessageResponse(msg_id=msg_id)
