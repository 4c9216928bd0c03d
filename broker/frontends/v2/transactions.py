"""EndTransaction and check-back commands for RocketMQ 5 producers.

EndTransaction: ``transaction_id`` is the half-queue offset the send entry gave; COMMIT makes
the message visible in its topic, ROLLBACK discards it (``wharf.store.services.transactions``:
each resolved once; a repeated or late END answers OK and changes nothing). A transaction id
that names no half of that message and topic: INVALID_TRANSACTION_ID.

Check-back targets (``v2_check_targets``): for a half message's topic, the live producers
whose Telemetry settings list it (apache.rocketmq.v2 has no producer group), each reached by a
``RecoverOrphanedTransactionCommand`` (the message as the producer sent it, and the
transaction id) on its Telemetry stream; the producer's checker answers with EndTransaction
(source SERVER_CHECK). Consumers never get check-backs: only PRODUCER streams are asked. When
and how often is ``wharf.broker.core.transactions``'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wharf.broker.core.clients import ClientRegistry
from wharf.broker.core.transactions import CheckTarget, TransactionCore, UnknownTransaction
from wharf.broker.frontends.v2 import codes
from wharf.broker.frontends.v2.codes import Code, V2Error
from wharf.broker.frontends.v2.receive import to_v2_message
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.codec.properties import PROPERTY_REAL_TOPIC


async def end_transaction(
    transactions: TransactionCore, request: service_pb2.EndTransactionRequest
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
    except UnknownTransaction as exc:
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


def v2_check_targets(clients: ClientRegistry) -> Callable[[str], list[CheckTarget]]:
    def targets(topic: str) -> list[CheckTarget]:
        out: list[CheckTarget] = []
        for producer in clients.producers_on(topic):
            if producer.send is not None:
                out.append(_target(producer.send))
        return out

    return targets


def _target(send: Callable[[Any], bool]) -> CheckTarget:
    def check(message: Any, offset: int) -> bool:
        return send(check_back_command(message, offset))

    return check
