"""When appended messages become visible to reads, and who learns of them how soon: the
dispatch position and what it will reach (``visible_end``: the written end, or a SYNC_MASTER's
confirm offset), the arrival listeners dispatch calls (schedule, timer, pop, the broker's long
polls) and, under SYNC_FLUSH, dispatch inside the group commit's callbacks while a reader waits.

``ConsumerLink.waiting()`` (given at construction): True while a reader waits for new messages
(the broker: a parked long poll). Then each sync reads and plans the dispatch of what it covers while the fdatasync
runs (``during_sync``) and applies it before its writers are answered (``after_sync``: up to
64 KiB, ``ReputService.dispatch_inline``; a larger sync wakes the reput task), so the parked
pull is woken before the writers' acks are built (~0.4 ms less from the sync to the pull reply
for a lone message). With nobody waiting, dispatch follows the writers: answering them first
keeps a producer's requests in flight short.

Ahead of the sync (``ConsumerLink.on_planned``): after planning, the queues the plan advances are reported
to the broker's long polls with the log offset the sync makes durable; a parked raw pull reads
them (``MessageStore.get_raw_records_ahead``) and has the sync thread write its reply after the
fdatasync (``CommitLog.write_when_durable``). Not under SYNC_MASTER: there a read also waits
for the replicas' confirm offset, which the sync thread does not know.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from operator import itemgetter

from wharf.store.dispatch.reput import CommitLogSource, QueueAdvance, ReputService
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import ArrivalListener, ConsumerLink, PlannedListener

log = logging.getLogger(__name__)

_TOPIC = itemgetter(0)  # of an advanced queue's key (topic, queue id)
_NO_CONSUMERS = ConsumerLink()

__all__ = ["ArrivalListener", "Arrivals", "PlannedListener"]


class Arrivals:
    def __init__(self, consumers: ConsumerLink = _NO_CONSUMERS) -> None:
        """``consumers``: whether a reader waits (``waiting``), who is told ahead of a sync
        (``on_planned``) and the first listener of every queue (``on_arrival``)."""
        # (listener, quiet): ``quiet()`` True when the listener has nobody to wake (no parked
        # pull, no waiting pop): it is left out of that report.
        self._listeners: list[tuple[ArrivalListener, Callable[[], bool] | None]] = []
        # Listeners of one topic's queues only (schedule, timer): not called for the others'.
        self._of_topic: dict[str, list[ArrivalListener]] = {}
        self._waiting = consumers.waiting
        self._ahead = consumers.on_planned
        self._reput: ReputService | None = None  # set by bind() at start
        self._commit_log: CommitLog | None = None
        self._source: CommitLogSource | None = None
        self._replicas_durable: Callable[[], None] = lambda: None
        if consumers.on_arrival is not None:
            self.add(consumers.on_arrival, quiet=consumers.quiet)

    def bind(
        self,
        reput: ReputService,
        commit_log: CommitLog,
        source: CommitLogSource,
        replicas_durable: Callable[[], None],
    ) -> None:
        """What recovery opened. Under SYNC_FLUSH (``source.sync_flush``) this takes the group
        commit's callbacks: a sync requested plans a waiting reader's dispatch
        (``during_sync``); after each sync the local readers come first (``after_sync``), then
        the replicas hear of it (``replicas_durable``)."""
        self._reput, self._commit_log, self._source = reput, commit_log, source
        if source.sync_flush:
            self._replicas_durable = replicas_durable
            group_commit = commit_log.group_commit
            group_commit.on_requested = self.during_sync
            group_commit.on_durable = self._synced

    # --- visibility --------------------------------------------------------------------------
    @property
    def offset(self) -> int:
        """The dispatch position: reads see everything below it."""
        return self._reput.reput_from_offset if self._reput is not None else 0

    @property
    def timestamp(self) -> int:
        """The store time of the last message dispatched."""
        return self._reput.last_timestamp if self._reput is not None else 0

    def position(self) -> tuple[int, int]:
        """The queue flush service's view of dispatch: (offset, last message's timestamp)."""
        return self.offset, self.timestamp

    def visible_end(self) -> int:
        """What dispatch will reach without new events: the written end, or under SYNC_MASTER
        the replicas' confirm offset (a paused replica holds it for up to
        haMaxTimeSlaveNotCatchup: a pull must not wait for that as for a flush)."""
        assert self._commit_log is not None
        end = self._commit_log.wrote_offset
        source = self._source
        if source is not None and source.confirm is not None:
            end = min(end, source.confirm())
        return end

    @property
    def replicated(self) -> bool:
        """Reads wait for the replicas' confirm offset too (SYNC_MASTER)."""
        return self._source is not None and self._source.confirm is not None

    @property
    def pending(self) -> bool:
        """Appended data is not yet visible to reads (acks precede dispatch)."""
        return self._commit_log is not None and self.offset < self.visible_end()

    async def wait_dispatched(self, timeout_s: float) -> bool:
        """True once everything appended so far is visible to reads (in SYNC_FLUSH mode that
        includes waiting for its sync)."""
        assert self._reput is not None and self._commit_log is not None
        return await self._reput.wait_dispatched(self.visible_end(), timeout_s)

    # --- listeners ---------------------------------------------------------------------------

    def add(
        self,
        listener: ArrivalListener,
        topic: str | None = None,
        quiet: Callable[[], bool] | None = None,
    ) -> None:
        """``listener`` hears of every queue, or of ``topic``'s queues only; ``quiet()`` (for
        a listener of every queue) True leaves it out of a report: asked once a report instead
        of a call a queue (a chunk advances ~64 queues at 256 topics)."""
        if topic is None:
            self._listeners.append((listener, quiet))
        else:
            self._of_topic.setdefault(topic, []).append(listener)

    def remove(self, listener: ArrivalListener) -> None:
        self._listeners = [entry for entry in self._listeners if entry[0] != listener]
        for topic, listeners in list(self._of_topic.items()):
            if listener in listeners:
                listeners.remove(listener)
                if not listeners:
                    del self._of_topic[topic]

    def notify(self, advanced: QueueAdvance) -> None:
        """Dispatch's report (``ReputService`` ``on_advance``): each listener, each queue it
        hears of. The listeners are chosen once per report, not once per queue, and one
        topic's listeners cost the other queues one dict lookup, not a call each."""
        listeners = tuple(
            listener for listener, quiet in self._listeners if quiet is None or not quiet()
        )
        if not listeners and (
            not self._of_topic or self._of_topic.keys().isdisjoint(map(_TOPIC, advanced))
        ):
            # The usual report: every listener quiet, and no queue of a topic with listeners
            # of its own (schedule, timer): one pass of C, where the loop below was a lookup
            # a queue (~34 a request at 256 topics).
            return
        if self._of_topic:
            of_topic = {topic: (*listeners, *some) for topic, some in self._of_topic.items()}
        else:
            of_topic = None
        for (topic, queue_id), max_offset in advanced.items():
            for listener in of_topic.get(topic, listeners) if of_topic else listeners:
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("arrival listener %r failed for %s/%d", listener, topic, queue_id)

    def after_sync(self) -> None:
        """SYNC_FLUSH, after each sync and before its writers are answered: while a reader
        waits, dispatch a small sync right here (a larger one wakes the reput task)."""
        waiting = self._waiting
        if waiting is not None and self._reput is not None and waiting():
            self._reput.dispatch_inline()

    def _synced(self) -> None:
        """SYNC_FLUSH, after each sync: local readers first, then the replicas."""
        self.after_sync()
        self._replicas_durable()

    def during_sync(self) -> None:
        """SYNC_FLUSH, right after a sync was requested: while a reader waits, read and plan
        the dispatch of what was written while the fdatasync runs, so ``after_sync`` only
        applies it (a lone 1 KiB record: the read and plan were ~70 of the ~110 us between
        the sync's end and the start of the ConsumeQueue writes, measured with hop stamps on
        this 2-core VM)."""
        waiting = self._waiting
        reput = self._reput
        if waiting is not None and reput is not None and waiting():
            assert self._commit_log is not None
            since = reput.planned_end
            reput.prepare_inline(self._commit_log.max_offset)
            ahead = self._ahead
            if ahead is not None and not self.replicated:
                for run, end in reput.prepared_runs(since):
                    topic, queue_id = run.key
                    try:
                        ahead(topic, queue_id, run.first + run.unit_count, end)
                    except Exception:
                        log.exception("planned-arrival listener failed for %s/%d", *run.key)

    # --- ahead of the sync -------------------------------------------------------------------
    def planned_units(self, topic: str, queue_id: int, offset: int) -> tuple[bytes, int] | None:
        """The planned units of a queue from ``offset`` and the log offset they wait for
        (``ReputService.planned_units``); None without a kept plan or under SYNC_MASTER."""
        reput = self._reput
        if reput is None or self.replicated:
            return None
        return reput.planned_units((topic, queue_id), offset)
