"""EndTransaction and the transaction check-back for RocketMQ 5 producers.

EndTransaction: ``transaction_id`` is the half-queue offset the send entry gave; COMMIT makes
the message visible in its topic, ROLLBACK discards it (``wharf.store.services.transactions``:
each resolved once; a repeated or late END answers OK and changes nothing). A transaction id
that names no half of that message and topic: INVALID_TRANSACTION_ID.

Check-back (RocketMQ's TransactionalMessageCheckService): a task wakes every ``step_s`` and
asks the store for open halves older than ``transactionTimeOut`` ms (or their
``CHECK_IMMUNITY_TIME_IN_SECONDS``) and not checked in the last ``transactionCheckInterval``
ms. Each is sent as a ``RecoverOrphanedTransactionCommand`` (the message as the producer sent
it, and the transaction id) on the Telemetry stream of one live producer whose settings list
the topic (apache.rocketmq.v2 has no producer group); the producer's checker answers with
EndTransaction (source SERVER_CHECK). Every round counts as a check, producer or not; after
``transactionCheckMax`` checks the half is discarded (never delivered) with a WARNING line and
a count. Consumers never get check-backs: only PRODUCER streams are asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from wharf.broker.v2 import codes
from wharf.broker.v2.clients import ClientRegistry
from wharf.broker.v2.codes import Code, V2Error
from wharf.broker.v2.receive import to_v2_message
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.codec.properties import PROPERTY_REAL_TOPIC
from wharf.store.errors import InvalidMessageError

log = logging.getLogger("wharf.broker.v2.transactions")


async def end_transaction(
    transactions: Any, request: service_pb2.EndTransactionRequest
) -> service_pb2.EndTransactionResponse:
    if not request.transaction_id.isdigit():
        raise V2Error(
            Code.INVALID_TRANSACTION_ID,
            f"transaction_id {request.transaction_id[:64]!r} is not one this broker gave",
        )
    resolution = request.resolution
    if resolution not in (definition_pb2.COMMIT, definition_pb2.ROLLBACK):
        raise V2Error(Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
    try:
        await transactions.end(
            int(request.transaction_id),
            request.message_id,
            resolution == definition_pb2.COMMIT,
            request.topic.name,
        )
    except InvalidMessageError as exc:
        raise V2Error(Code.INVALID_TRANSACTION_ID, str(exc)) from None
    return service_pb2.EndTransactionResponse(status=codes.ok())


def check_back_command(message: Any, offset: int) -> service_pb2.TelemetryCommand:
    """The RecoverOrphanedTransactionCommand for a half message, shown as its producer sent it
    (its real topic, TRANSACTION type, no broker properties)."""
    v2 = to_v2_message(message)
    v2.topic.name = message.properties.get(PROPERTY_REAL_TOPIC, "")
    v2.system_properties.message_type = definition_pb2.TRANSACTION
    command = service_pb2.TelemetryCommand(status=codes.ok())
    command.recover_orphaned_transaction_command.message.CopyFrom(v2)
    command.recover_orphaned_transaction_command.transaction_id = str(offset)
    return command


class TransactionChecker:
    """``transactions`` returns the store's TransactionService (it exists once the store
    runs); ``on_discard(topic)`` counts a discarded half."""

    def __init__(
        self,
        transactions: Callable[[], Any],
        clients: ClientRegistry,
        timeout_ms: int,
        interval_ms: int,
        check_max: int,
        on_discard: Callable[[str], None] = lambda topic: None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._transactions = transactions
        self._clients = clients
        self.timeout_ms = timeout_ms
        self.interval_ms = interval_ms
        self.check_max = check_max
        self._on_discard = on_discard
        self._clock = clock_ms
        # Wake often enough for small test settings, at most every 5 s.
        self.step_s = min(max(min(timeout_ms, interval_ms) / 4000, 0.05), 5.0)
        self.sent = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.step_s)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check-back round failed; next round in %.1f s",
                              self.step_s)  # fmt: skip

    async def check_once(self) -> None:
        tx = self._transactions()
        now = self._clock()
        for offset in tx.due_for_check(now, self.timeout_ms, self.interval_ms):
            message = tx.half(offset)
            if message is None:
                continue
            topic = message.properties.get(PROPERTY_REAL_TOPIC, "")
            if tx.checks_of(offset) >= self.check_max:
                await tx.discard(offset)
                self._on_discard(topic)
                log.warning(
                    "transaction %d (message %s, topic %s) discarded: unresolved after %d "
                    "check-backs (transactionCheckMax)", offset, message.unique_id, topic,
                    self.check_max,
                )  # fmt: skip
                continue
            tx.checked(offset, now)
            for producer in self._clients.producers_of(topic):
                assert producer.send is not None
                with contextlib.suppress(Exception):
                    if producer.send(check_back_command(message, offset)):
                        self.sent += 1
                        break
