"""QueueGaps: a dispatch run that starts past its queue's end is not written over blank units
while the records of the missing offsets may be in the commit log; dispatch goes back to
index them first.

A queue's units follow the queue offsets its records carry, so a run whose first offset is
past the queue's end means units were lost, never that the records do not exist: a fault
campaign (seed 31337) restored a queue from a positions journal record older than its D, and
the re-dispatch wrote 169 blank units over acknowledged messages, silently. Blanks are right
only where there is nothing to index: below a fresh queue's min offset
(``ConsumeQueue.missing_before`` counts no gap there) or where the records are gone.

Design (the simplest that repairs without a restart or a scan on the event loop): the run and
the queue's later runs of the chunk are held (not applied), and once the chunk is applied
dispatch goes on from the queue's last indexed record (``max_physical_offset``: its end)
instead of the chunk's end (``rewind``). Re-dispatch is idempotent (units present are skipped
by offset, index entries too), so the other queues lose nothing, and the held queue's
records are indexed in order as dispatch passes them again, in its usual bounded chunks (the
ReputService yields between them; recovery runs in a thread). A gap met again at the same
queue end after its re-dispatch has no records in the log (retention deleted them, or they
never took a unit): then, and only then, blanks fill it, logged as an error too.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from wharf.store.queue.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)


class _Gap(NamedTuple):
    rewind: int  # commit log offset to re-dispatch from: the end of the queue's last record
    end: int  # the queue's max offset when the gap was met
    first: int  # the held run's first queue offset


class QueueGaps:
    """The gaps of a ``Dispatcher`` (loop or recovery's thread: one user at a time)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], _Gap] = {}  # met in the chunk being applied
        self._rewound: dict[tuple[str, int], int] = {}  # queue end when re-dispatched for it
        self.rewinds = 0  # re-dispatches asked (health, tests)
        self.blank_filled = 0  # gaps filled with blanks: no record of them in the log

    def hold(self, queue: ConsumeQueue, key: tuple[str, int], first: int) -> bool:
        """Whether the run of ``key`` from queue offset ``first`` must wait (not be applied):
        its queue's gap re-dispatched first. False for the usual run, and for a gap its
        re-dispatch found no record of (blanks fill it)."""
        if key in self._held:
            return True  # a later run of a queue held in this chunk
        missing = queue.missing_before(first)
        if not missing:
            return False
        end = queue.max_offset
        if self._rewound.pop(key, None) == end:
            self.blank_filled += 1
            log.error(
                "consume queue %s/%d: the commit log from %d holds no record of queue offsets "
                "%d..%d; blank units fill them",
                *key, queue.max_physical_offset, end, first - 1,
            )  # fmt: skip
            return False
        self._held[key] = _Gap(queue.max_physical_offset, end, first)
        return True

    def rewind(self, start: int) -> int | None:
        """After the chunk from commit log offset ``start`` is applied: where dispatch must go
        on from (its held queues' last records, at most ``start``: a queue claiming a record
        past the chunk cannot be mended by moving on, so the chunk is read again, and the gap
        met again is blanked), or None when no run was held."""
        held = self._held
        if not held:
            return None
        (topic, queue_id), gap = min(held.items(), key=lambda item: item[1].rewind)
        target = min(gap.rewind, start)
        log.error(
            "consume queue %s/%d ends at offset %d but dispatch met offset %d (%d units "
            "missing; %d queue(s) so): re-dispatching from commit log offset %d to index "
            "their records instead of blank units",
            topic, queue_id, gap.end, gap.first, gap.first - gap.end, len(held), target,
        )  # fmt: skip
        for key, each in held.items():
            self._rewound[key] = each.end
        held.clear()
        self.rewinds += 1
        return target
