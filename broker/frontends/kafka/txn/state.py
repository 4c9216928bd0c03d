"""A Kafka transactional id's state and the coordinator's rules over it, without I/O.

Kafka's transaction coordinator keeps, per ``transactional.id``, the producer id and epoch it
handed out and the transaction in progress (the partitions and groups it touched), in the
states and transitions of Kafka's ``TransactionState`` (KIP-98):

    Empty -> Ongoing -> PrepareCommit -> CompleteCommit -> Ongoing ...
                     \\-> PrepareAbort -> CompleteAbort -> ...

Each call below checks a request against the current metadata and returns the metadata to
persist next (the caller writes it to the transaction log, then answers), or raises
``TxnError`` with Kafka's error code. Ending a transaction is two steps, as Kafka's: the
Prepare state is persisted first (from then on the outcome is decided, and a new master that
reads it finishes it), then the markers go to every partition, then the Complete state.

A new epoch fences: ``init_producer_id`` of an id whose transaction is open aborts it with the
epoch bumped (the old producer's next call is PRODUCER_FENCED); so does a timeout. An epoch
that would pass 32767 takes a fresh producer id at epoch 0 (Kafka's overflow rule); when that
happens to an open transaction's abort, ``last_producer_id`` keeps the id its records carry,
persisted with the PREPARE_ABORT, so the markers after a crash end that producer's records
(before, the replay looked for the new id's: the aborted records were found by nobody, not
hidden, and read as committed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

__all__ = [
    "MAX_EPOCH",
    "OFFSETS_TOPIC",
    "Offset",
    "Offsets",
    "TxnError",
    "TxnMetadata",
    "TxnState",
    "add_groups",
    "add_partitions",
    "complete",
    "end_txn",
    "expired",
    "init_producer_id",
    "merge_offsets",
    "txn_offsets",
]

# a pending offset: (group, topic, queue id, offset, metadata, home brokerName or "")
Offset = tuple[str, str, int, int, str, str]
# TxnOffsetCommit's offsets by (topic, queue id, home) -> (offset, metadata)
Offsets = dict[tuple[str, int, str], tuple[int, str]]

# A transaction's pseudo-partition (brokerName, OFFSETS_TOPIC, 0) names the group
# coordinator holding its pending offsets; the WriteTxnMarkers for it ends them, as Kafka's
# marker for the group's __consumer_offsets partition does (a reserved name: never a topic).
OFFSETS_TOPIC = "__consumer_offsets"
MAX_EPOCH = 32767  # a short; past it the coordinator hands out a new producer id

# Kafka's error codes for the coordinator's answers (errors.py holds the rest of the table).
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90


class TxnError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class TxnState(enum.IntEnum):
    """Kafka's states, with Kafka's numbers (its transaction log's value schema)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    # TxnOffsetCommit's offsets, applied to the groups' tables when the transaction commits:
    # (group, topic, queue id, offset, metadata, home) where home is the brokerName of the
    # group holding the queue, "" for this broker's own (its table)
    offsets: frozenset[Offset] = field(default_factory=frozenset)
    start_ms: int = -1  # when the open transaction began (its first AddPartitions)
    update_ms: int = 0
    # partitions other broker groups lead (brokerName, topic, their queue id): their markers
    # go there by WriteTxnMarkers (txn/markers.py)
    remote: frozenset[tuple[str, str, int]] = field(default_factory=frozenset)
    # the producer id the open transaction's records carry when an epoch overflow gave the
    # abort a new one (-1: none); persisted, so a replay ends the right producer's records
    last_producer_id: int = -1

    @property
    def open(self) -> bool:
        return self.state in (TxnState.ONGOING, *_PREPARED)


def _check_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> None:
    if producer_id != meta.producer_id:
        raise TxnError(
            INVALID_PRODUCER_ID_MAPPING,
            f"transactional id {meta.transactional_id!r} is producer {meta.producer_id}, "
            f"not {producer_id}: call initTransactions again",
        )
    if epoch < meta.producer_epoch:
        raise TxnError(
            PRODUCER_FENCED,
            f"producer epoch {epoch} of {meta.transactional_id!r} was fenced by epoch "
            f"{meta.producer_epoch} (another producer with this transactional id started)",
        )
    if epoch > meta.producer_epoch:
        raise TxnError(INVALID_PRODUCER_EPOCH, f"producer epoch {epoch} is not known")


def init_producer_id(
    meta: TxnMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    max_timeout_ms: int,
    now_ms: int,
    new_producer_id: int,
) -> TxnMetadata:
    """InitProducerId with a transactional id. ``new_producer_id``: a fresh id, used for a new
    transactional id or an epoch overflow. An open transaction is aborted first: the answer
    is then the PREPARE_ABORT metadata with the bumped epoch (the caller writes the abort
    markers, completes, and tells the client CONCURRENT_TRANSACTIONS so it retries)."""
    if not 1 <= timeout_ms <= max_timeout_ms:
        raise TxnError(
            INVALID_TRANSACTION_TIMEOUT,
            f"transaction.timeout.ms {timeout_ms} is outside 1..{max_timeout_ms} "
            "(the broker's transactionMaxTimeoutMs)",
        )
    if meta is None or meta.state is TxnState.DEAD:
        return TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms, update_ms=now_ms)
    if meta.state in _PREPARED or meta.state is TxnState.PREPARE_EPOCH_FENCE:
        raise TxnError(CONCURRENT_TRANSACTIONS, "the previous transaction is still completing")
    producer_id, epoch = meta.producer_id, meta.producer_epoch + 1
    if epoch > MAX_EPOCH:
        producer_id, epoch = new_producer_id, 0
    if meta.state is TxnState.ONGOING:  # fence the old producer: abort under the new epoch
        return replace(
            meta,
            producer_id=producer_id,
            producer_epoch=epoch,
            state=TxnState.PREPARE_ABORT,
            update_ms=now_ms,
            last_producer_id=_data_pid(meta, producer_id),
        )
    return TxnMetadata(transactional_id, producer_id, epoch, timeout_ms, update_ms=now_ms)


def add_partitions(
    meta: TxnMetadata,
    producer_id: int,
    epoch: int,
    partitions: set[tuple[str, int]],
    now_ms: int,
    remote: frozenset[tuple[str, str, int]] = frozenset(),
) -> TxnMetadata:
    """AddPartitionsToTxn: the transaction is open (ONGOING) with these partitions added
    (``remote``: other groups')."""
    _check_producer(meta, producer_id, epoch)
    return _ongoing(meta, now_ms, frozenset(partitions), frozenset(), remote)


def add_groups(
    meta: TxnMetadata, producer_id: int, epoch: int, group: str, now_ms: int,
    remote: frozenset[tuple[str, str, int]] = frozenset(),
) -> TxnMetadata:  # fmt: skip
    """AddOffsetsToTxn: the group's offsets commit or abort with the transaction (``remote``:
    the group's coordinator when another broker group's master, as its pseudo-partition
    (brokerName, OFFSETS_TOPIC, 0): its marker ends the offsets pending there)."""
    _check_producer(meta, producer_id, epoch)
    return _ongoing(meta, now_ms, frozenset(), frozenset({group}), remote)


def txn_offsets(
    meta: TxnMetadata,
    producer_id: int,
    epoch: int,
    group: str,
    offsets: Offsets,
    now_ms: int,
) -> TxnMetadata:
    """TxnOffsetCommit: the group's offsets held until the transaction ends (a later commit
    of the same partition in the transaction replaces an earlier one)."""
    _check_producer(meta, producer_id, epoch)
    if meta.state is not TxnState.ONGOING or group not in meta.groups:
        raise TxnError(
            INVALID_TXN_STATE,
            f"group {group!r} is not in the open transaction: call sendOffsetsToTransaction "
            "(AddOffsetsToTxn) first",
        )
    return replace(meta, offsets=merge_offsets(meta.offsets, group, offsets), update_ms=now_ms)


def merge_offsets(held: frozenset[Offset], group: str, offsets: Offsets) -> frozenset[Offset]:
    """``held`` with the group's ``offsets`` replacing its earlier ones of the same queues."""
    kept = {o for o in held if o[0] != group or (o[1], o[2], o[5]) not in offsets}
    new = {(group, t, q, off, md, home) for (t, q, home), (off, md) in offsets.items()}
    return frozenset(kept | new)


def _ongoing(
    meta: TxnMetadata,
    now_ms: int,
    partitions: frozenset[tuple[str, int]],
    groups: frozenset[str],
    remote: frozenset[tuple[str, str, int]] = frozenset(),
) -> TxnMetadata:
    if meta.state in _PREPARED:
        raise TxnError(CONCURRENT_TRANSACTIONS, "the previous transaction is still completing")
    if meta.state is TxnState.ONGOING:
        return replace(
            meta,
            partitions=meta.partitions | partitions,
            groups=meta.groups | groups,
            remote=meta.remote | remote,
            update_ms=now_ms,
        )
    if meta.state not in _IDLE:
        raise TxnError(INVALID_TXN_STATE, f"cannot add to a transaction in {meta.state.name}")
    return replace(  # a new transaction: what it touches starts empty
        meta,
        state=TxnState.ONGOING,
        partitions=partitions,
        groups=groups,
        offsets=frozenset(),
        remote=remote,
        last_producer_id=-1,
        start_ms=now_ms,
        update_ms=now_ms,
    )


def end_txn(
    meta: TxnMetadata, producer_id: int, epoch: int, commit: bool, now_ms: int
) -> TxnMetadata | None:
    """EndTxn: the PREPARE_* metadata to persist, or None when the request repeats an end
    already made (a retry after a lost answer: answered NONE, nothing to do)."""
    _check_producer(meta, producer_id, epoch)
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if meta.state is done:
        return None
    if meta.state is prepared:
        raise TxnError(CONCURRENT_TRANSACTIONS, "the transaction is completing")
    if meta.state is not TxnState.ONGOING:
        word = "commit" if commit else "abort"
        raise TxnError(INVALID_TXN_STATE, f"cannot {word} a transaction in {meta.state.name}")
    return replace(meta, state=prepared, update_ms=now_ms)


def complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """After the markers of a PREPARE_* reached every partition: its COMPLETE_* state."""
    if meta.state not in _PREPARED:
        raise ValueError(f"nothing to complete in {meta.state.name}")
    state = (
        TxnState.COMPLETE_COMMIT
        if meta.state is TxnState.PREPARE_COMMIT
        else TxnState.COMPLETE_ABORT
    )
    return replace(meta, state=state, update_ms=now_ms, last_producer_id=-1)


def expired(meta: TxnMetadata, now_ms: int, new_producer_id: int) -> TxnMetadata | None:
    """The abort of a transaction open past its timeout, with the epoch bumped so the producer
    that let it lapse is fenced (Kafka's rule); None when it has not expired."""
    if meta.state is not TxnState.ONGOING or now_ms - meta.start_ms <= meta.timeout_ms:
        return None
    producer_id, epoch = meta.producer_id, meta.producer_epoch + 1
    if epoch > MAX_EPOCH:
        producer_id, epoch = new_producer_id, 0
    return replace(
        meta,
        producer_id=producer_id,
        producer_epoch=epoch,
        state=TxnState.PREPARE_ABORT,
        update_ms=now_ms,
        last_producer_id=_data_pid(meta, producer_id),
    )


def _data_pid(meta: TxnMetadata, producer_id: int) -> int:
    """The id the open transaction's records carry, when the abort's id is another."""
    return meta.producer_id if producer_id != meta.producer_id else -1
