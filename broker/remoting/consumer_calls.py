"""The admin codes the broker passes on to a consumer and whose answer it relays, as RocketMQ's
AdminBrokerProcessor.callConsumer (Broker2Client.callClient): the consumer ``clientId`` of
``consumerGroup`` is asked on the connection it last heartbeated on, and its answer goes back
to the tool as it is (the client builds it).

- 307 GET_CONSUMER_RUNNING_INFO: mqadmin consumerStatus / consumerProgress -s, the Dashboard's
  consumer client page (the client answers its ConsumerRunningInfo).
- 309 CONSUME_MESSAGE_DIRECTLY: mqadmin consumeMessage, queryMsgById -g -d, the Dashboard's
  "resend message": the broker puts the record of ``msgId`` (an offset message id) in the body
  and ``brokerName`` in the header, and the client consumes it (ConsumeMessageDirectlyResult).

Not online (no such member, no remoting connection): 1 "The Consumer <g> <id> not online"; no
answer in 10 s: 207 CONSUME_MSG_TIMEOUT; the connection closing first: 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from wharf.broker.remoting.codes import ResponseCode
from wharf.broker.remoting.frame import RemotingCommand, response_to
from wharf.broker.remoting.server import Connection
from wharf.store.codec.ids import decode_offset_msg_id
from wharf.store.errors import InvalidMessageError

if TYPE_CHECKING:
    from wharf.broker.context import BrokerContext

__all__ = ["ConsumerCalls"]

# Broker2Client.callClient's wait for the consumer's answer (RocketMQ: 10 s).
CALL_CONSUMER_TIMEOUT_S = 10.0


class ConsumerCalls:
    """307 and 309 over the client registry; ``raw_record`` reads a record by commit log
    offset (None: no record starts there)."""

    def __init__(self, ctx: BrokerContext, raw_record: Callable[[int], bytes | None]) -> None:
        self.ctx = ctx
        self.raw_record = raw_record

    async def get_consumer_running_info(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return await self._call_consumer(request, dict(request.ext_fields), request.body)

    async def consume_message_directly(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        msg_id = request.ext_fields.get("msgId", "")
        record = None
        try:
            _, offset = decode_offset_msg_id(msg_id)
            record = self.raw_record(offset)
        except InvalidMessageError:
            pass
        if record is None:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"can not find message by the msgId, {msg_id}",
            )
        fields = {**request.ext_fields, "brokerName": self.ctx.config.broker_name}
        return await self._call_consumer(request, fields, record)

    async def _call_consumer(
        self, request: RemotingCommand, fields: dict[str, str], body: bytes
    ) -> RemotingCommand:
        group, client_id = fields.get("consumerGroup", ""), fields.get("clientId", "")
        channel = None
        if client_id in self.ctx.clients.groups.get(group, {}):
            channel = self.ctx.clients.connection_of(client_id)
        if not isinstance(channel, Connection) or channel.closed:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer <{group}> <{client_id}> not online",
            )
        try:
            async with asyncio.timeout(CALL_CONSUMER_TIMEOUT_S):
                answer = await channel.call(request.code, fields, body)
        except TimeoutError:
            return response_to(
                request,
                ResponseCode.CONSUME_MSG_TIMEOUT,
                remark=f"consumer <{group}> <{client_id}> Timeout: "
                f"no answer in {CALL_CONSUMER_TIMEOUT_S:g} s",
            )
        except ConnectionError as exc:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"invoke consumer <{group}> <{client_id}> Exception: {exc}",
            )
        return response_to(
            request, answer.code, remark=answer.remark, ext_fields=answer.ext_fields,
            body=answer.body,
        )  # fmt: skip
