"""Transactions in the core (broker/core/transactions.py): ending one through the store's
service with a neutral refusal, and the one list of check-back targets every front end adds
to."""

from __future__ import annotations

import pytest
from wharf.broker.core.errors import Reason
from wharf.broker.core.transactions import (
    CHANNEL_QUEUE_MAX,
    CheckTarget,
    CheckTargets,
    TransactionCore,
    UnknownTransaction,
)
from wharf.broker.errors import NotFoundError
from wharf.store.errors import InvalidMessageError
from wharf.store.model import StoredMessage


class FakeTransactions:
    def __init__(self) -> None:
        self.ended: list[tuple[int, str, bool, str]] = []

    async def end(self, offset: int, message_id: str, commit: bool, topic: str = "") -> str:
        if offset != 7:
            raise InvalidMessageError(f"transaction {offset} is unknown")
        self.ended.append((offset, message_id, commit, topic))
        return "COMMITTED" if commit else "ROLLED_BACK"


async def test_end_resolves_through_the_store_and_refuses_an_unknown_id_neutrally() -> None:
    tx = FakeTransactions()
    core = TransactionCore(lambda: tx)
    assert await core.end(7, "id", True, "t") == "COMMITTED"
    assert tx.ended == [(7, "id", True, "t")]
    with pytest.raises(UnknownTransaction) as refused:
        await core.end(8, "id", False)
    # wharf.v1 maps it as NOT_FOUND by its error table, v2 by its reason.
    assert isinstance(refused.value, NotFoundError)
    assert refused.value.reason is Reason.UNKNOWN_TRANSACTION
    assert "8" in str(refused.value)


def test_targets_are_sdk_streams_newest_first_then_each_source_in_order() -> None:
    targets = CheckTargets()
    taken: list[str] = []

    def source(name: str, takes: bool) -> CheckTarget:
        def target(message: StoredMessage, offset: int) -> bool:
            taken.append(name)
            return takes

        return target

    targets.add_source(lambda topic: [source(f"a:{topic}", False)])
    targets.add_source(lambda topic: [source(f"b:{topic}", True)])
    older = targets.open(["t"])
    newer = targets.open(["t", "u"])
    found = targets.targets("t")
    assert len(found) == 4
    message = StoredMessage.__new__(StoredMessage)
    assert found[0](message, 1) and newer.get_nowait() == (message, 1) and older.empty()
    assert not found[2](message, 1) and found[3](message, 1) and taken == ["a:t", "b:t"]
    targets.close(["t", "u"], newer)
    assert len(targets.targets("t")) == 3 and len(targets.targets("u")) == 2


def test_a_full_sdk_stream_declines_a_check() -> None:
    targets = CheckTargets()
    queue = targets.open(["t"])
    message = StoredMessage.__new__(StoredMessage)
    (target,) = targets.targets("t")
    for offset in range(CHANNEL_QUEUE_MAX):
        assert target(message, offset)
    assert not target(message, CHANNEL_QUEUE_MAX) and queue.qsize() == CHANNEL_QUEUE_MAX
