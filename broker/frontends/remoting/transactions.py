"""Transactional messages of RocketMQ 4.x producers over remoting, routed through the broker's
one transaction service (``wharf.store.services.transactions``; check-back timing in
``wharf.broker.core.transactions``).

- PREPARE: a SEND_MESSAGE whose properties carry ``TRAN_MSG=true`` (and ``PGROUP``, the
  producer group; sysFlag TRANSACTION_PREPARED_TYPE) is a half message: the store parks it in
  ``RMQ_SYS_TRANS_HALF_TOPIC``. The reply's ``queueOffset`` is the half queue offset, which the
  clients send back as ``tranStateTableOffset``: Wharf's transaction id.
- END_TRANSACTION (37, sent oneway by the clients): commit (8) or rollback (12) of the half at
  ``tranStateTableOffset``; 0 (unknown) leaves it open for the check-back. As RocketMQ's
  EndTransactionProcessor: the half's ``PGROUP`` must be the request's ``producerGroup`` and its
  commit log offset ``commitLogOffset``, else 1 SYSTEM_ERROR. A repeated or late END (a
  check-back answered after a commit) changes nothing.
- CHECK_TRANSACTION_STATE (39): the check-back target of this port (``targets``, registered
  with ``CheckTargets.add_source``). A half whose ``PGROUP`` has a producer that heartbeated
  on a live remoting connection gets a oneway 39 on it: the header names the transaction
  (``tranStateTableOffset``, ``commitLogOffset``, ``msgId``/``transactionId`` = UNIQ_KEY,
  ``offsetMsgId``), the body is the half record as ``MessageDecoder.encode`` writes it (real
  topic and queue id, properties kept: the clients pick the producer by its ``PGROUP``). The
  producer answers with END_TRANSACTION ``fromTransactionCheck=true``.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING

from wharf.broker.core.transactions import CheckTarget, UnknownTransaction
from wharf.broker.frontends.remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from wharf.broker.kit.remoting.codes import (
    FLAG_ONEWAY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    RequestCode,
    ResponseCode,
)
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to
from wharf.store.codec.properties import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
)
from wharf.store.codec.records import encode_batch
from wharf.store.model import MessageInput, StoredMessage

if TYPE_CHECKING:
    from wharf.broker.frontends.frontend_kit import FrontEndKit
    from wharf.broker.kit.remoting.server import Connection

__all__ = ["RemotingTransactions", "check_body"]

log = logging.getLogger("broker.remoting")
_MAX_RECORD = 2**31 - 1


class _WrongEnd(Exception):
    """An END naming an open half with another producer group or log offset."""


def check_body(message: StoredMessage, offset: int) -> bytes:
    """The half record as RocketMQ's check-back sends it: its real topic and queue id, queue
    offset the transaction id, every property kept."""
    props = message.properties
    queue = props.get(PROPERTY_REAL_QUEUE_ID, "")
    encoded = encode_batch(
        props.get(PROPERTY_REAL_TOPIC) or message.topic,
        int(queue) if queue.isdigit() else message.queue_id,
        offset,
        [
            MessageInput(
                body=message.body,
                properties=dict(props),
                flag=message.flag,
                sys_flag=message.sys_flag,
                born_timestamp=message.born_timestamp,
                born_host=message.born_host,
                reconsume_times=message.reconsume_times,
                prepared_transaction_offset=message.prepared_transaction_offset,
            )
        ],
        message.commit_log_offset,
        message.store_timestamp,
        message.store_host,
        _MAX_RECORD,
    )
    return encoded.data


class RemotingTransactions:
    """END_TRANSACTION and the check-back of one remoting port: a producer group's check goes
    to the connection its newest producer heartbeat on (the client registry's ``connection``,
    attached at HEART_BEAT)."""

    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx
        self._opaque = itertools.count(1)
        self.checks_sent = 0

    # --- END_TRANSACTION ------------------------------------------------------------------------
    async def end(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        if header.commit_or_rollback == TRANSACTION_NOT_TYPE:
            # UNKNOW: nothing to do, the check-back asks again (RocketMQ answers nothing; the
            # clients send END oneway anyway).
            log.debug("remoting: END_TRANSACTION %d unknown (from check: %s)",
                      header.tran_state_table_offset, header.from_transaction_check)  # fmt: skip
            return response_to(request, ResponseCode.SUCCESS)
        offset = header.tran_state_table_offset
        if offset < 0:
            return response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"tranStateTableOffset {offset} < 0"
            )

        def check(half: StoredMessage) -> None:
            group = half.properties.get(PROPERTY_PRODUCER_GROUP)
            if group is not None and group != header.producer_group:
                raise _WrongEnd("The producer group wrong")
            if half.commit_log_offset != header.commit_log_offset:
                raise _WrongEnd("The commit log offset wrong")

        # The core's resolution by offset (wharf.v1's ResolveHalfMessage too): an open half ends
        # by its own id (clients send the UNIQ_KEY; one that sends the offset id is matched by
        # its offset), one no longer open by the id sent (how it was resolved, or unknown).
        try:
            how = await self.ctx.port.transactions.resolve(
                offset,
                header.commit_or_rollback == TRANSACTION_COMMIT_TYPE,
                fallback_id=header.msg_id,
                check=check,
            )
        except _WrongEnd as exc:
            return response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except UnknownTransaction as exc:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"Find prepared transaction message failed: {exc}",
            )
        log.debug("remoting: transaction %d %s (from check: %s)", offset, how,
                  header.from_transaction_check)  # fmt: skip
        return response_to(request, ResponseCode.SUCCESS)

    # --- CHECK_TRANSACTION_STATE ----------------------------------------------------------------
    def targets(self, topic: str) -> list[CheckTarget]:
        """The check targets of a topic (``CheckTargets.add_source``): this port's producers,
        chosen per half by its ``PGROUP``."""
        return [self.check]  # (False, at once, when the group has no remoting connection)

    def _connection_of(self, group: str) -> Connection | None:
        """The connection of the group's producer seen last (RocketMQ: any live channel)."""
        seen = self.ctx.port.clients.producers.get(group) or {}
        for client_id in sorted(seen, key=seen.__getitem__, reverse=True):
            conn = self.ctx.port.clients.connection_of(client_id)
            if conn is not None and not conn.closed:
                return conn
        return None

    def check(self, message: StoredMessage, offset: int) -> bool:
        group = message.properties.get(PROPERTY_PRODUCER_GROUP, "")
        conn = self._connection_of(group) if group else None
        if conn is None:
            return False
        unique_id = message.unique_id or None
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=offset,
            commit_log_offset=message.commit_log_offset,
            msg_id=unique_id,
            transaction_id=unique_id,
            offset_msg_id=self.ctx.offset_ids.format(message.commit_log_offset),
        )
        conn.send(
            RemotingCommand(
                code=RequestCode.CHECK_TRANSACTION_STATE,
                opaque=next(self._opaque),
                flag=FLAG_ONEWAY,
                ext_fields=header.to_ext_fields(),
                body=check_body(message, offset),
            )
        )
        self.checks_sent += 1
        return True
