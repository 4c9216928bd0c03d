"""Transactional sends: messages invisible to every consumer until the transaction commits.

USE::

    async with Producer(endpoint, transaction_checker=is_paid, transaction_topics=["orders"]) as p:
        async with p.transaction() as tx:       # commit on a clean exit, rollback on an error
            await tx.send("orders", b"paid #17")
            await db.commit()                   # your local transaction

Each ``tx.send`` stores a half message (property ``TRAN_MSG=true``); leaving the block sends
EndTransaction COMMIT for every one of them (or ROLLBACK when the block raised, and the error
goes on). A producer that dies between the send and the END leaves the halves open: after the
broker's ``transactionTimeOut`` it asks a producer of the topic through the ``TransactionChecks``
stream this module keeps open (``CheckListener``, started by the Producer when it has a
``transaction_checker``): the checker gets the message as sent and answers True (commit), False
(roll back) or None (not known yet: asked again later). An END the broker has already seen
answers how it went and changes nothing, so a commit retried after a lost reply is harmless.

Over a cluster (``Producer(namesrv=...)``) each half goes to a group as a send does (retried
on another group when one fails) and its END to the broker that stored it; a checker answers
the check-backs of every master holding ``transaction_topics`` (the producer keeps a client,
so a ``TransactionChecks`` stream, on each of them as the routes change).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from wharf.client.errors import InvalidArgumentError, WharfError, from_rpc_error
from wharf.client.message import TRANSACTION_PREPARED, SendResult
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

log = logging.getLogger(__name__)

# The checker: a message as sent -> True commit, False roll back, None not known yet.
TransactionChecker = Callable[[Any], "bool | Awaitable[bool | None] | None"]
RECONNECT_S = 1.0


# A send that also names the stub of the broker that stored the message (where it ends).
RoutedSend = Callable[..., Awaitable[tuple[SendResult, messaging_pb2_grpc.MessagingServiceStub]]]


class Transaction:
    """Half messages sent together and resolved together (see the module docstring)."""

    def __init__(self, send: RoutedSend, timeout_s: float) -> None:
        self._send = send
        self._timeout_s = timeout_s
        # (topic, result, the storing broker's stub)
        self._halves: list[tuple[str, SendResult, messaging_pb2_grpc.MessagingServiceStub]] = []
        self.resolution = ""

    @property
    def sent(self) -> list[tuple[str, SendResult]]:
        """(topic, send result) of every half sent so far."""
        return [(topic, result) for topic, result, _ in self._halves]

    async def send(self, topic: str, body: bytes | str, **options: Any) -> SendResult:
        """``Producer.send`` of a half message (not ``delay_level`` / ``deliver_at``)."""
        if self.resolution:
            raise InvalidArgumentError(f"the transaction is {self.resolution} already")
        if options.get("delay_level") or options.get("deliver_at") or options.get("delay"):
            raise InvalidArgumentError("a transactional message cannot be delayed or timed")
        properties = {**(options.pop("properties", None) or {}), TRANSACTION_PREPARED: "true"}
        result, stub = await self._send(topic, body, properties=properties, **options)
        self._halves.append((topic, result, stub))
        return result

    async def commit(self) -> None:
        await self._end(True)

    async def rollback(self) -> None:
        await self._end(False)

    async def _end(self, commit: bool) -> None:
        if self.resolution:
            return
        for topic, result, stub in self._halves:
            await end_transaction(
                stub, topic, result.msg_id, str(result.queue_offset), commit,
                self._timeout_s,
            )  # fmt: skip
        self.resolution = "committed" if commit else "rolled back"

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()


async def end_transaction(
    stub: messaging_pb2_grpc.MessagingServiceStub,
    topic: str,
    msg_id: str,
    transaction_id: str,
    commit: bool,
    timeout_s: float,
    from_check: bool = False,
) -> str:
    request = messaging_pb2.EndTransactionRequest(
        topic=topic,
        msg_id=msg_id,
        transaction_id=transaction_id,
        commit=commit,
        from_check=from_check,
    )
    try:
        reply = await stub.EndTransaction(request, timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc) from None
    return str(reply.resolution)


class CheckListener:
    """Keeps a ``TransactionChecks`` stream open for ``topics`` and answers each check with
    the checker's verdict; reconnects after RECONNECT_S when the stream breaks."""

    def __init__(
        self,
        stub: messaging_pb2_grpc.MessagingServiceStub,
        topics: Sequence[str],
        checker: TransactionChecker,
        timeout_s: float,
        group: str = "",
    ) -> None:
        if not topics:
            raise InvalidArgumentError("a transaction_checker needs transaction_topics")
        self._stub = stub
        self._topics = list(topics)
        self._checker = checker
        self._timeout_s = timeout_s
        self._group = group
        self._task: asyncio.Task[None] | None = None
        self.answered = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tx-checks")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        request = messaging_pb2.TransactionChecksRequest(
            topics=self._topics, producer_group=self._group
        )
        while True:
            try:
                async for check in self._stub.TransactionChecks(request):
                    await self._answer(check)
            except asyncio.CancelledError:
                raise
            except (grpc.aio.AioRpcError, WharfError) as exc:
                log.debug("transaction check stream: %s; reconnecting", exc)
            await asyncio.sleep(RECONNECT_S)

    async def _answer(self, check: messaging_pb2.TransactionCheck) -> None:
        view = check.message
        try:
            verdict = self._checker(view)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception:
            log.exception("transaction checker failed for %s; asked again later", view.msg_id)
            return
        if verdict is None:
            return
        try:
            await end_transaction(
                self._stub, view.topic, view.msg_id, check.transaction_id, bool(verdict),
                self._timeout_s, from_check=True,
            )  # fmt: skip
            self.answered += 1
        except WharfError as exc:
            log.warning("answering the check of %s failed: %s", view.msg_id, exc)
