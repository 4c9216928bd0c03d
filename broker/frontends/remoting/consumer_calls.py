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

- 222 INVOKE_BROKER_TO_RESET_OFFSET (mqadmin resetOffsetByTime, the Dashboard's reset
  offset), as Broker2Client.resetOffset: per write queue the offset at ``timestamp`` (-1: the
  end), kept at the group's when that is lower unless ``isForce``; sent oneway as 220
  RESET_CONSUMER_CLIENT_OFFSET (ResetOffsetBody) to every member on its connection, which
  moves and commits it; answered with the same table. A group not online: 206, on which the
  tools fall back to committing the offsets themselves (208, 29, 15); a queue without an
  offset of the group: 1 "THe consumer group <g> not exist" (RocketMQ's words).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from wharf.broker.frontends.remoting.admin import fastjson_mq_table
from wharf.broker.frontends.remoting.headers import ResetOffsetRequestHeader
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to
from wharf.broker.kit.remoting.server import Connection
from wharf.store.codec.ids import decode_offset_msg_id
from wharf.store.errors import InvalidMessageError

if TYPE_CHECKING:
    from wharf.broker.frontends.frontend_kit import FrontEndKit

__all__ = ["ConsumerCalls"]

# Broker2Client.callClient's wait for the consumer's answer (RocketMQ: 10 s).
CALL_CONSUMER_TIMEOUT_S = 10.0


class ConsumerCalls:
    """307 and 309 over the client registry; ``raw_record`` reads a record by commit log
    offset (None: no record starts there)."""

    def __init__(self, ctx: FrontEndKit, raw_record: Callable[[int], bytes | None]) -> None:
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

    async def reset_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        ctx = self.ctx
        topic, group = header.topic, header.group
        config = ctx.port.topic(topic)
        if config is None:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark="[reset-offset] reset offset failed, no topic in this broker. "
                f"topic={topic}",
            )
        offsets: list[tuple[int, int]] = []
        for queue_id in range(config.write_queue_nums):
            consumer_offset = ctx.port.committed_offset(group, topic, queue_id)
            if consumer_offset == -1:
                return response_to(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    remark=f"THe consumer group <{group}> not exist",
                )
            if header.timestamp == -1:
                at = ctx.port.max_offset(topic, queue_id)
            else:
                at = max(ctx.port.offset_at(topic, queue_id, header.timestamp), 0)
            keep = not header.is_force and at >= consumer_offset
            offsets.append((queue_id, consumer_offset if keep else at))
        broker = ctx.config.broker_name
        table = (
            '{"offsetTable":'
            + fastjson_mq_table((topic, broker, queue_id, offset) for queue_id, offset in offsets)
            + "}"
        )
        channels = [
            channel
            for client_id in ctx.port.clients.groups.get(group, {})
            if isinstance(channel := ctx.port.clients.connection_of(client_id), Connection)
            and not channel.closed
        ]
        if not channels:
            return response_to(
                request,
                ResponseCode.CONSUMER_NOT_ONLINE,
                remark="Consumer not online, so can not reset offset, "
                f"Group: {group} Topic: {topic} Timestamp: {header.timestamp}",
            )
        fields = {"topic": topic, "group": group, "timestamp": str(header.timestamp),
                  "isForce": "true" if header.is_force else "false"}  # fmt: skip
        for channel in channels:
            channel.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, fields, table.encode())
        return response_to(request, ResponseCode.SUCCESS, body=table.encode())

    async def _call_consumer(
        self, request: RemotingCommand, fields: dict[str, str], body: bytes
    ) -> RemotingCommand:
        group, client_id = fields.get("consumerGroup", ""), fields.get("clientId", "")
        channel = None
        if client_id in self.ctx.port.clients.groups.get(group, {}):
            channel = self.ctx.port.clients.connection_of(client_id)
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
