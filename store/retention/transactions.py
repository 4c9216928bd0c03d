"""What compaction asks of Kafka transactions (the broker's ``TxnIndex``, broker/core/txn_index.py,
handed over with the policies): like Kafka's cleaner, a pass never cleans past a queue's last
stable offset (the first record of a transaction still open: its fate is unknown) and drops the
records of aborted transactions, so an aborted value never replaces a key's committed one. Both
are asked on the event loop (the dirty records are read there), never from the pass's thread.
"""

from __future__ import annotations

from typing import Protocol


class TransactionView(Protocol):
    def lso(self, topic: str, queue_id: int, max_offset: int) -> int: ...

    def skip_aborted(self, topic: str, queue_id: int, offset: int) -> int: ...


class NoTransactions:
    """A store with no Kafka transactions (the default, and every non-Kafka topic)."""

    def lso(self, topic: str, queue_id: int, max_offset: int) -> int:
        return max_offset

    def skip_aborted(self, topic: str, queue_id: int, offset: int) -> int:
        return offset
