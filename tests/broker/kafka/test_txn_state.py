"""The transaction coordinator's rules (broker/frontends/kafka/txn/state.py) and its log record
(layout.py), without a broker: Kafka's transitions, fencing by epoch, timeouts, retries."""

from __future__ import annotations

from dataclasses import replace

import pytest
from wharf.broker.frontends.kafka.txn import layout
from wharf.broker.frontends.kafka.txn.state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    MAX_EPOCH,
    PRODUCER_FENCED,
    TxnError,
    TxnMetadata,
    TxnState,
    add_groups,
    add_partitions,
    complete,
    end_txn,
    expired,
    init_producer_id,
    txn_offsets,
)

MAX_TIMEOUT = 3_600_000  # Flink's default transaction.timeout.ms is one hour


def code(call: object) -> int:
    with pytest.raises(TxnError) as info:
        call()  # type: ignore[operator]
    return info.value.code


def test_a_transaction_commits_through_prepare_and_complete() -> None:
    meta = init_producer_id(None, "tx", 60_000, MAX_TIMEOUT, 1_000, new_producer_id=7)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (7, 0, TxnState.EMPTY)
    meta = add_partitions(meta, 7, 0, {("out", 0), ("out", 1)}, 2_000)
    meta = add_groups(meta, 7, 0, "app", 2_100)
    meta = txn_offsets(meta, 7, 0, "app", {("in", 0, ""): (41, "")}, 2_200)
    meta = txn_offsets(meta, 7, 0, "app", {("in", 0, ""): (42, "m")}, 2_300)  # replaces 41
    # the same queue number of another group's is another queue
    meta = txn_offsets(meta, 7, 0, "app", {("in", 0, "broker-b"): (9, "")}, 2_400)
    assert meta.offsets == {("app", "in", 0, 42, "m", ""), ("app", "in", 0, 9, "", "broker-b")}
    assert (meta.state, meta.start_ms) == (TxnState.ONGOING, 2_000)
    prepared = end_txn(meta, 7, 0, True, 3_000)
    assert prepared is not None and prepared.state is TxnState.PREPARE_COMMIT
    assert code(lambda: end_txn(prepared, 7, 0, True, 3_001)) == CONCURRENT_TRANSACTIONS
    done = complete(prepared, 3_100)
    assert done.state is TxnState.COMPLETE_COMMIT
    assert end_txn(done, 7, 0, True, 3_200) is None  # a retried EndTxn: answered, no-op
    assert code(lambda: end_txn(done, 7, 0, False, 3_200)) == INVALID_TXN_STATE
    # The next transaction starts empty.
    again = add_partitions(done, 7, 0, {("out", 2)}, 4_000)
    assert (again.partitions, again.groups, again.offsets) == ({("out", 2)}, set(), set())
    assert again.start_ms == 4_000


def test_a_new_producer_fences_the_old_and_aborts_its_open_transaction() -> None:
    meta = init_producer_id(None, "tx", 60_000, MAX_TIMEOUT, 0, new_producer_id=7)
    meta = add_partitions(meta, 7, 0, {("out", 0)}, 10)
    fencing = init_producer_id(meta, "tx", 60_000, MAX_TIMEOUT, 20, new_producer_id=8)
    assert (fencing.producer_id, fencing.producer_epoch) == (7, 1)
    assert fencing.state is TxnState.PREPARE_ABORT and fencing.partitions == {("out", 0)}
    # While the abort completes, the new producer is told to retry.
    assert code(lambda: init_producer_id(fencing, "tx", 60_000, MAX_TIMEOUT, 21, 9)) == (
        CONCURRENT_TRANSACTIONS
    )
    aborted = complete(fencing, 30)
    assert code(lambda: add_partitions(aborted, 7, 0, {("out", 1)}, 40)) == PRODUCER_FENCED
    assert code(lambda: add_partitions(aborted, 99, 1, {("out", 1)}, 40)) == (
        INVALID_PRODUCER_ID_MAPPING
    )
    resumed = init_producer_id(aborted, "tx", 60_000, MAX_TIMEOUT, 50, new_producer_id=9)
    assert (resumed.producer_id, resumed.producer_epoch, resumed.state) == (7, 2, TxnState.EMPTY)


def test_the_epoch_overflows_into_a_new_producer_id() -> None:
    meta = TxnMetadata("tx", 7, MAX_EPOCH, 60_000, TxnState.COMPLETE_COMMIT)
    meta = init_producer_id(meta, "tx", 60_000, MAX_TIMEOUT, 0, new_producer_id=8)
    assert (meta.producer_id, meta.producer_epoch) == (8, 0)


def test_timeouts_abort_with_the_epoch_bumped_and_are_bounded() -> None:
    assert code(lambda: init_producer_id(None, "tx", MAX_TIMEOUT + 1, MAX_TIMEOUT, 0, 1)) == (
        INVALID_TRANSACTION_TIMEOUT
    )
    meta = init_producer_id(None, "tx", 1_000, MAX_TIMEOUT, 0, new_producer_id=7)
    meta = add_partitions(meta, 7, 0, {("out", 0)}, 100)
    assert expired(meta, 1_100, 8) is None
    lapsed = expired(meta, 1_101, 8)
    assert lapsed is not None
    assert (lapsed.state, lapsed.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert code(lambda: end_txn(complete(lapsed, 1_200), 7, 0, True, 1_300)) == PRODUCER_FENCED


def test_offsets_need_their_group_added_first() -> None:
    meta = init_producer_id(None, "tx", 60_000, MAX_TIMEOUT, 0, new_producer_id=7)
    meta = add_partitions(meta, 7, 0, {("out", 0)}, 10)
    assert code(lambda: txn_offsets(meta, 7, 0, "app", {("in", 0, ""): (1, "")}, 20)) == (
        INVALID_TXN_STATE
    )


def test_the_log_record_round_trips_and_refuses_what_it_cannot_read() -> None:
    meta = TxnMetadata(
        "tx", 7, 3, 60_000, TxnState.PREPARE_COMMIT,
        frozenset({("out", 0), ("com.acme.orders.v1", 5)}), frozenset({"app"}),
        frozenset({("app", "in", 0, 42, "m", "")}), 1_000, 2_000,
    )  # fmt: skip
    data = layout.encode(meta)
    assert layout.decode("tx", data) == meta
    assert data[:2] == b"\x00\x01"  # no other group's partition: what older brokers read
    with pytest.raises(ValueError, match="version 4"):
        layout.decode("tx", b"\x00\x04" + data[2:])
    with pytest.raises(ValueError, match="bytes after"):
        layout.decode("tx", data + b"\x00")
    # another group's partitions: version 2, round trip
    remote = replace(meta, remote=frozenset({("broker-b", "out", 1), ("broker-c", "x", 0)}))
    data = layout.encode(remote)
    assert data[:2] == b"\x00\x02"
    assert layout.decode("tx", data) == remote
    # an offset of another group's queue: version 3 (its home kept), round trip
    homed = replace(remote, offsets=meta.offsets | {("app", "in", 0, 7, "", "broker-b")})
    data = layout.encode(homed)
    assert data[:2] == b"\x00\x03"
    assert layout.decode("tx", data) == homed
