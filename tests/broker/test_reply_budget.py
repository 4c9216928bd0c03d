"""The budget of pull-reply bytes clients have not read yet (broker/frontends/reply_budget.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from wharf.broker.errors import ResourceExhaustedError
from wharf.broker.frontends.reply_budget import MIB, ReplyBudget


class FakeCall:
    """The two things of a grpc.aio ServicerContext the budget uses."""

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self.callbacks: list[Callable[[Any], None]] = []

    def peer(self) -> str:
        return self._peer

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)

    def finish(self) -> None:
        for callback in self.callbacks:
            callback(self)


def pull(budget: ReplyBudget, peer: str, nbytes: int) -> FakeCall:
    call = FakeCall(peer)
    replies = budget.for_call(call)
    replies.admit()
    replies.hold(nbytes)
    return call


def test_a_client_at_its_budget_is_refused_before_reading_and_others_are_not() -> None:
    budget = ReplyBudget(per_client=4 * MIB, total=100 * MIB)
    held = [pull(budget, "ipv4:10.0.0.1:1", 3 * MIB), pull(budget, "ipv4:10.0.0.1:1", 3 * MIB)]
    # One reply past the budget is allowed (a read is admitted while under it), not two.
    with pytest.raises(ResourceExhaustedError, match=r"6\.0 MiB .*maxUnreadPullBytesPerClient"):
        budget.for_call(FakeCall("ipv4:10.0.0.1:1")).admit()
    pull(budget, "ipv4:10.0.0.2:2", 3 * MIB)  # another connection has its own budget
    assert budget.refused == 1
    for call in held:
        call.finish()  # gRPC sent the replies: the client read them
    pull(budget, "ipv4:10.0.0.1:1", 3 * MIB)
    assert budget.held == 6 * MIB


def test_the_total_caps_many_stalled_clients_together() -> None:
    budget = ReplyBudget(per_client=4 * MIB, total=8 * MIB)
    pull(budget, "a", 4 * MIB)
    pull(budget, "b", 4 * MIB)
    with pytest.raises(ResourceExhaustedError, match="maxUnreadPullBytes is 8 MiB"):
        budget.for_call(FakeCall("c")).admit()
