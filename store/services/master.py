"""``MasterServices``: what only a master runs, owned in one place: delay levels
(``schedule.py``), timers (``timer.py``), transaction checks (``transactions.py``) and pop
consumption (``wharf.store.pop``).

The facade builds one after recovery. The three message services read and re-put through the
store's ``StoreHost`` view (``host.py``), handed on to them; pop is made by the factory the
facade passes (this layer does not import ``pop/``, a sibling: ``new_pop`` returns whatever
satisfies ``PopLike``, so the facade gets its ``PopService`` back typed). ``start`` runs at
start on a master, or when a replica is promoted (``Role.promote``); ``stop`` first at
shutdown, pop before the others (its DLQ copies still go through ``put``). The delay levels'
offsets live on a replica too: it follows its master's (``follow_delay_offsets``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from wharf.store.codec.properties import SCHEDULE_TOPIC, TIMER_TOPIC
from wharf.store.paths import StorePaths
from wharf.store.services.host import StoreHost
from wharf.store.services.schedule import ScheduleMessageService
from wharf.store.services.timer import TimerMessageService
from wharf.store.services.transactions import TransactionService

__all__ = ["MasterServices", "PopLike"]

# An arrival listener's registration (``Arrivals.add``): listener, topic, quiet.
Listen = Callable[..., None]


class PopLike(Protocol):
    """What the master services do with pop (``wharf.store.pop.PopService``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None: ...

    def quiet(self) -> bool: ...

    def forget(self, *, topics: Sequence[str] = (), groups: Sequence[str] = ()) -> int: ...


P = TypeVar("P", bound=PopLike)


class MasterServices(Generic[P]):
    def __init__(
        self,
        paths: StorePaths,
        host: StoreHost,
        delay_levels_ms: list[int],
        *,
        max_put_bytes: int,
        listen: Listen,
        marks_since: Callable[[int, str], list[int]],
        new_pop: Callable[[], P],
    ) -> None:
        """``listen``: ``Arrivals.add``; ``marks_since(offset, prop)``: the ledgers' walk of
        the log at load (``read.lookups.marks_since``)."""
        self.schedule = ScheduleMessageService(host, delay_levels_ms, paths.delay_offset_file)
        self.timer = TimerMessageService(
            host, paths.timer_checkpoint_file, max_put_bytes=max_put_bytes
        )
        self.transactions = TransactionService(host, paths.transaction_checkpoint_file)
        self._listen = listen
        self._marks_since = marks_since
        self._new_pop = new_pop
        self.pop: P | None = None  # set by start()

    async def start(self) -> None:
        """Load the ledgers, start the services, hear of their topics' arrivals."""
        # Loaded here, not at start: a replica's log grows with its master's deliveries and
        # resolutions, so the walk for them from the checkpoint's P must happen when it takes
        # over (a ledger loaded at a replica's start would deliver them again).
        await asyncio.to_thread(self.timer.load_blocking, self._marks_since)
        await asyncio.to_thread(self.transactions.load_blocking, self._marks_since)
        self.schedule.start()
        self._listen(self.schedule.on_arrival, SCHEDULE_TOPIC)
        self.timer.start()
        self._listen(self.timer.on_arrival, TIMER_TOPIC)
        self.transactions.start()
        pop = self.pop = self._new_pop()
        await pop.start()
        self._listen(pop.on_arrival, quiet=pop.quiet)

    async def stop(self) -> None:
        if self.pop is not None:
            await self.pop.stop()
        await self.schedule.stop()
        await self.timer.stop()
        await self.transactions.stop()

    def health(self) -> list[dict[str, object]]:
        """The delay levels' and the timer's service state."""
        return [self.schedule.health(), self.timer.health()]

    def delay_offsets(self) -> dict[int, int]:
        return dict(self.schedule.offset_table)

    def follow_delay_offsets(
        self, table: Mapping[int, int], spawn: Callable[[Coroutine[Any, Any, None]], None]
    ) -> None:
        """A replica takes its master's delay offsets (``spawn``: their persist)."""
        schedule = self.schedule
        if table == schedule.offset_table:
            return
        schedule.offset_table = dict(table)
        spawn(schedule.persist())

    def forget(self, topics: Sequence[str]) -> None:
        """Deleted topics: pop forgets their state."""
        if self.pop is not None:
            self.pop.forget(topics=topics)
