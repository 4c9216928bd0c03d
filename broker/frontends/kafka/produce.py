"""Produce: record batches -> one stored message per record, one append per batch into the
partition's queue, answered with the first record's queue offset (Kafka offset = ConsumeQueue
offset, dense).

- Per partition: PUB on the topic (ACL); the topic admitted by the core as every send is
  (``SendCore.topic``: not shutting down, a legal name, not the broker's own, auto-created,
  writable; its refusals as Kafka codes, ``errors.code_for``) and the
  partition < its write queues (UNKNOWN_TOPIC_OR_PARTITION), led by this broker
  (``env.queue_of``: in a cluster NOT_LEADER_OR_FOLLOWER, so the client refreshes its
  metadata and sends to the leader; the partition's queue is this broker's); the batches decoded and checked
  (records.py: CRC-32C, magic 2, codecs); the idempotent producer's sequence check
  (producers.py): a duplicate is answered with its first offset and not stored again, once
  that first copy is durable as an append's answer requires (its wait again, if the first
  one did not come back PUT_OK: a retry after NOT_ENOUGH_REPLICAS_AFTER_APPEND must not be
  acknowledged before the replicas have the record).
- Appends run in request order per connection (each request's turn taken before its first
  await: the previous request's appends done; after the store's dispatch back-pressure wait),
  then every partition waits for durability together. A store still busy after that wait
  (StoreBusyError, "broker busy") refuses the whole request, nothing written: every
  partition REQUEST_TIMED_OUT (retriable). A batch refused before its append for any reason
  that passes (busy, the master's lease, the in-sync replicas, the role, the disk:
  ``_passing``) makes its producer's batches pipelined behind it refused alike until it comes
  again (``ProducerTable.refused``), even once the reason passed: not
  OUT_OF_ORDER_SEQUENCE_NUMBER for the gap, on which librdkafka bumps its epoch and re-sends
  every batch it had no answer for under new sequences (a stored one twice). Every error of the core or the store is a partition's
  code (``errors.code_for``); none escapes the handler (that would close the connection).
- acks: 0 = no response at all (the records are still stored as with 1); 1 and -1 (all) both
  wait for what Wharf's acknowledgement waits for (flushDiskType SYNC_FLUSH: on disk;
  SYNC_MASTER: on the in-sync replicas): a broker with ASYNC_FLUSH acks once in memory.
  FLUSH_DISK_TIMEOUT answers REQUEST_TIMED_OUT, a replica timeout
  NOT_ENOUGH_REPLICAS_AFTER_APPEND: the records ARE stored (an idempotent retry is then
  recognised as a duplicate). Any other failure after the append (a master fenced before
  its acknowledgement) is REQUEST_TIMED_OUT too: a code the client reads as "possibly
  persisted" (librdkafka), never one it reads as "not persisted".
- Transactional batches (KIP-98) go in like idempotent ones (the same sequence checks) once
  the transaction coordinator admits them (``TxnCoordinator.check_produce``: the producer's
  open transaction added the partition, its epoch not fenced), and are noted in the core's
  transaction index (hidden below the LSO until their transaction ends). A batch of a
  producer id another broker group handed out belongs to that group's coordinator: its first
  batch in a partition verified there first (txn/verify.py, KIP-890: INVALID_TXN_STATE for
  a partition not in the open transaction, NOT_ENOUGH_REPLICAS while the coordinator cannot
  answer), then registered durably (txn/partition_leader.py). Control batches are
  the coordinator's to write: INVALID_RECORD from a client.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from wharf.broker.core.errors import Refused
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError, code_for
from wharf.broker.frontends.kafka.producers import ProducerTable, Seen, producer_mark
from wharf.broker.frontends.kafka.records import Batch, iter_batches
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.frontends.kafka.txn.coordinator import TxnCoordinator
from wharf.broker.frontends.kafka.txn.state import TxnError
from wharf.broker.frontends.kafka.txn.verify import TxnVerifier
from wharf.broker.kit.acl.rules import Perm
from wharf.store import kafka_compiled, kafka_send_records
from wharf.store.codec.kafka_records import (
    KAFKA_PRODUCER,
    properties_bytes,
    record_body_properties,
)
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.store.errors import InvalidMessageError
from wharf.store.model import PutStatus

__all__ = ["ProduceHandler"]

# Kafka's messages for a batch its transaction's coordinator did not verify
_UNVERIFIED = "Unable to verify the partition has been added to the transaction"
_NOT_ADDED = {Code.INVALID_TXN_STATE: "Partition was not added to the transaction"}
_PUT_CODES = {
    PutStatus.PUT_OK: Code.NONE,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.REQUEST_TIMED_OUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    PutStatus.SLAVE_NOT_AVAILABLE: Code.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
}

# Refusals of an append that may pass (the lease, the in-sync replicas, the role, a full
# disk, busy): retriable codes the client re-sends the same batch on. A KafkaError is about
# the batch itself (its sequence, its epoch, its records) and not one.
_PASSING = frozenset(
    {
        Code.REQUEST_TIMED_OUT,
        Code.NOT_LEADER_OR_FOLLOWER,
        Code.NOT_ENOUGH_REPLICAS,
        Code.KAFKA_STORAGE_ERROR,
    }
)


def _passing(exc: BaseException) -> bool:
    return not isinstance(exc, KafkaError) and code_for(exc) in _PASSING


@dataclass(slots=True)
class _Part:
    """One partition of the request on its way."""

    topic: str
    index: int  # the Kafka partition
    queue: int = -1  # this broker's queue of it
    code: Code = Code.NONE
    message: str | None = None
    born_host: str = ""
    # each batch with its records in the send-batch form and their body sizes
    batches: list[tuple[Batch, bytes, list[int]]] = field(default_factory=list)
    base_offset: int = -1
    written: list[Any] = field(default_factory=list)  # the store's Written of each append
    # the idempotent entries of this request's batches: appended here, or earlier copies
    # (duplicates) whose first wait has not come back PUT_OK yet
    seen: list[Seen] = field(default_factory=list)
    pending: list[Seen] = field(default_factory=list)  # duplicates to wait for
    transactional_id: str | None = None

    def fail(self, exc: BaseException) -> None:
        self.code = code_for(exc)
        self.message = str(exc)


class _Turn:
    """A Produce's turn to append on its connection (``conn.appended`` chains them): taken when
    its handler starts, entered once the connection's previous Produce appended, passed on
    when this one has (or its handler ended without: failed, cancelled). Not a FIFO lock
    taken after the admission's awaits: a partition lookup waiting ~1 s on a NameServer cut
    off would let the next request of the connection append first, and librdkafka takes the
    OUT_OF_ORDER_SEQUENCE_NUMBER for a lost sequence (fatal; the fault campaign)."""

    def __init__(self, conn: KafkaConnection) -> None:
        self._before = conn.appended
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.appended = self._done
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(self._pass)

    def _pass(self, _: object = None) -> None:
        if not self._done.done():
            self._done.set_result(None)

    async def __aenter__(self) -> None:
        if self._before is not None:
            await self._before

    async def __aexit__(self, *_: object) -> None:
        self._pass()


class ProduceHandler:
    def __init__(
        self, env: KafkaEnv, producers: ProducerTable, txns: TxnCoordinator,
        verifier: TxnVerifier,
    ) -> None:  # fmt: skip
        self.env = env
        self.producers = producers
        self.txns = txns
        self.verifier = verifier

    async def produce(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        # This request's turn to append, taken before its first await (handlers start in
        # arrival order): see _Turn.
        turn = _Turn(conn)
        acks = body["acks"]
        parts: list[_Part] = []
        for topic_data in body["topic_data"]:
            for partition in topic_data["partition_data"]:
                part = _Part(topic_data["name"], partition["index"])
                part.transactional_id = body["transactional_id"]
                parts.append(part)
                if acks not in (0, 1, -1):
                    part.code = Code.INVALID_REQUIRED_ACKS
                    continue
                try:
                    await self._prepare(conn, part, partition["records"])
                except Exception as exc:  # a lookup failing (the cluster's layout): answered
                    part.fail(exc)
        await self._verify(parts)
        async with turn:  # request order per connection
            refusal = await self._room()
            for part in parts:
                if part.code != Code.NONE:
                    continue
                if refusal is None:
                    self._append(part)
                else:
                    self._refuse(part, refusal)
        await asyncio.gather(*(self._durable(p) for p in parts if p.written or p.pending))
        if acks == 0:
            return None
        return self._response(conn, parts)

    async def _verify(self, parts: list[_Part]) -> None:
        """The first batch of another group's transaction in a partition, verified with its
        coordinator before its turn (txn/verify.py): once per producer of the request, the
        partitions together; refused partitions answer the code. A retriable refusal
        (NOT_ENOUGH_REPLICAS) is noted as any passing one (``_refuse``): the batches
        pipelined behind it are not OUT_OF_ORDER_SEQUENCE_NUMBER for its gap."""
        wanted: dict[tuple[int, int], list[_Part]] = {}
        for part in parts:
            if part.code != Code.NONE:
                continue
            for batch, _records, _sizes in part.batches:
                pid, epoch = batch.producer_id, batch.producer_epoch
                if (
                    batch.transactional
                    and not self.producers.own(pid)
                    and self.verifier.needed(pid, epoch, part.topic, part.queue)
                ):
                    wanted.setdefault((pid, epoch), []).append(part)
                    break
        for (pid, epoch), group in wanted.items():
            codes = await self.verifier.verify(
                group[0].transactional_id, pid, epoch, [(p.topic, p.index, p.queue) for p in group]
            )
            for part in group:
                code = Code(codes[(part.topic, part.index)])
                if code == Code.NOT_ENOUGH_REPLICAS:
                    self._refuse(part, KafkaError(code, _UNVERIFIED))
                elif code != Code.NONE:
                    part.code, part.message = code, _NOT_ADDED.get(code, "not verified")

    async def _room(self) -> Exception | None:
        """The store's dispatch back-pressure wait, once for the request: None when it may
        append, else the refusal every partition answers (StoreBusyError: REQUEST_TIMED_OUT,
        retriable, nothing written), not a StoreBusyError out of the handler, which closes
        the connection: every request on it would lose its answer."""
        core = self.env.ctx.port.send
        if not core.dispatch_lagging():
            return None
        try:
            await core.dispatch_room()
        except Exception as exc:  # StoreBusyError (the store logs it once an episode)
            return exc
        return None

    def _refuse(self, part: _Part, refusal: Exception) -> None:
        """A partition of a request refused before its appends (the store busy, or not
        writable: ``check_writable``): its code, and its idempotent batches noted so that
        those pipelined behind them are refused alike, not answered
        OUT_OF_ORDER_SEQUENCE_NUMBER for the gap (``ProducerTable.refused``)."""
        part.fail(refusal)
        for batch, _records, _sizes in part.batches:
            self.producers.refused(part.topic, part.queue, batch)

    async def _prepare(self, conn: KafkaConnection, part: _Part, records: bytes | None) -> None:
        env = self.env
        if not env.allowed(conn, "topic", part.topic, Perm.PUB):
            part.code = Code.TOPIC_AUTHORIZATION_FAILED
            return
        try:  # the core's admission; its refusals as Kafka codes (errors.code_for)
            topic = env.ctx.port.send.topic(part.topic, own_topics=False)
        except Refused as exc:
            part.fail(exc)
            return
        part.queue, part.code = await env.queue_of(part.topic, part.index)
        if part.code == Code.NONE and part.queue >= topic.write_queue_nums:
            part.code = Code.UNKNOWN_TOPIC_OR_PARTITION
        if part.code != Code.NONE:
            return
        max_size = env.ctx.port.send.max_message_size
        part.born_host = conn.peer
        try:
            tail = topic_tail(part.topic)
            lazy = kafka_compiled()
            # Every batch's records first, each before the next batch is read (as
            # decode_batches decodes them: the same errors in the same order), then the checks
            # of each batch.
            now_ms = int(time.time() * 1000)
            batches = [
                (batch, self._compiled(batch, tail, max_size, now_ms) if lazy else None)
                for batch in iter_batches(records or b"", max(max_size, 1) * 4, lazy=lazy)
            ]
            if not batches:
                raise KafkaError(Code.CORRUPT_MESSAGE, "no record batch")
            for batch, converted in batches:
                if batch.control:
                    raise KafkaError(Code.INVALID_RECORD, "control batches are the broker's")
                if batch.transactional and batch.producer_id < 0:
                    raise KafkaError(Code.INVALID_RECORD, "a transactional batch without producer")
                if not batch.count:
                    raise KafkaError(Code.INVALID_RECORD, "an empty record batch")
                if converted is None:
                    converted = self._records(batch, tail, max_size)
                part.batches.append((batch, *converted))
        except (KafkaError, InvalidMessageError) as exc:
            part.fail(exc)

    def _compiled(
        self, batch: Batch, tail: bytes, max_size: int, now_ms: int
    ) -> tuple[bytes, list[int]] | None:
        """The batch's send-batch records and body sizes by the compiled converter
        (store/fast/kafka_convert.py, through ``wharf.store.kafka_send_records``),
        or None: then its records are decoded here (raising what decode_batches raises) for
        ``_records``, the Python path."""
        assert batch.section is not None
        converted = None
        # (a record takes at least 7 bytes: no ids drawn for a count the section cannot hold)
        if 0 < batch.count <= len(batch.section) // 7:
            converted = kafka_send_records(
                batch.section,
                batch.count,
                batch.base_timestamp,
                tail,
                self.env.ctx.unique_ids.next_ids(batch.count),
                now_ms,
                max_size,
                producer_mark(batch) if batch.producer_id >= 0 else None,
            )
        if converted is None:
            batch.decode_records()
        else:
            batch.section = None
        return converted

    def _records(self, batch: Batch, tail: bytes, max_size: int) -> tuple[bytes, list[int]]:
        """The batch's records, encoded as a producer encodes a send batch (the store checks
        them in columns and patches its own fields: wharf.store.codec.send_records), and
        their body sizes. Building MessageInputs for the store to encode cost ~2.5 us more a
        record (tests/bench/kafka.py). The Python path: ``_compiled`` does the same in C when
        it can."""
        # one clock read and format for the batch's ids (~4x cheaper than one by one)
        next_id = iter(self.env.ctx.unique_ids.next_ids(len(batch.records))).__next__
        out: list[bytes] = []
        sizes: list[int] = []
        now_ms = 0
        for index, record in enumerate(batch.records):
            body, props = record_body_properties(record, next_id)
            if len(body) > max_size:
                raise KafkaError(
                    Code.MESSAGE_TOO_LARGE,
                    f"a record of {len(body)} bytes; maxMessageSize is {max_size}",
                )
            if index == 0 and batch.producer_id >= 0:
                props[KAFKA_PRODUCER] = producer_mark(batch)
            born = record.timestamp
            if born <= 0:  # no timestamp: the store time, as the message form does
                born = now_ms = now_ms or int(time.time() * 1000)
            # (properties over the store's limit: InvalidMessageError, INVALID_RECORD)
            out.append(encode_record(tail, body, properties_bytes(props), born_ts=born))
            sizes.append(len(body))
        return b"".join(out), sizes

    def _append(self, part: _Part) -> None:
        """The appends of one partition (sync: nothing else runs in between)."""
        core = self.env.ctx.port.send
        producers = self.producers
        try:
            # Refused as the append would be, before the sequence check: when the master's
            # lease ran out between two pipelined requests of a producer, the second one was
            # OUT_OF_ORDER_SEQUENCE_NUMBER (the first one refused, not appended); librdkafka
            # then bumps its epoch and re-sends under new sequences what it had in flight
            # before them, a second copy of any stored (the fault campaign's CI form, 5 ids).
            core.check_writable()
        except Exception as exc:
            # A passing state (the lease, the in-sync replicas, a replica's role): when it has
            # passed by the next request's turn (a renewal answered between two requests read
            # after a 2 s SIGSTOP), that request must not be OUT_OF_ORDER_SEQUENCE_NUMBER for
            # the gap this one leaves: librdkafka bumps its epoch on it and re-sends the
            # batches it had no answer for on every partition under new sequences, a second
            # copy of each one stored (the fault campaign, seeds 20261129 and 31337).
            self._refuse(part, exc)
            return
        batch: Batch | None = None
        try:
            for batch, records, _sizes in part.batches:
                duplicate = producers.check(part.topic, part.queue, batch)
                if duplicate is not None:
                    if part.base_offset < 0:
                        part.base_offset = duplicate.base_offset
                    if duplicate.written is not None:
                        part.pending.append(duplicate)
                    continue
                if batch.transactional and not producers.own(batch.producer_id):
                    # another group's coordinator's transaction (txn/partition_leader.py)
                    registered = self.txns.leader.admit(
                        batch.producer_id, batch.producer_epoch, part.topic, part.queue
                    )
                    if registered is not None:
                        part.written.append(registered)
                elif batch.transactional:
                    self.txns.check_produce(
                        part.transactional_id, batch.producer_id, batch.producer_epoch,
                        part.topic, part.queue,
                    )  # fmt: skip
                written = core.append_records(part.topic, part.queue, records, part.born_host)
                first = written.appended.first_queue_offset
                if batch.transactional:
                    self.txns.index.append(
                        part.topic, part.queue, batch.producer_id, first, batch.count
                    )
                seen = producers.remember(part.topic, part.queue, batch, first, written)
                if seen is not None:
                    part.seen.append(seen)
                part.written.append(written)
                if part.base_offset < 0:
                    part.base_offset = first
        except TxnError as exc:
            part.code, part.message = Code(exc.code), str(exc)
        except Exception as exc:
            part.fail(exc)
            if batch is not None and _passing(exc):
                # nothing of this batch written, for a reason that may pass: the batches
                # pipelined behind it are refused alike until it comes again
                producers.refused(part.topic, part.queue, batch)
            if part.written and not isinstance(exc, KafkaError):
                part.code = Code.REQUEST_TIMED_OUT  # the batches before it are stored

    async def _durable(self, part: _Part) -> None:
        ctx = self.env.ctx
        # Appends of one partition are in order: the last one's wait covers the others. An
        # earlier copy a duplicate names is older than this request's appends, but when it
        # is the only one its own wait stands for it.
        written = part.written or [
            seen.written for seen in part.pending if seen.written is not None
        ]
        if not written:
            return  # another request's wait for those copies came back PUT_OK meanwhile
        try:
            results = await ctx.port.send.durable_many(written)
        except Exception as exc:
            # Stored, and then not acknowledged (a master fenced meanwhile, a failed sync):
            # a "possibly persisted" code. librdkafka reads KAFKA_STORAGE_ERROR as "not
            # persisted" and may send the records again under new sequences: a second copy.
            part.fail(exc)
            part.code = Code.REQUEST_TIMED_OUT
            return
        status = results[-1].status
        if status is not PutStatus.PUT_OK:
            part.code = _PUT_CODES[status]
            part.message = f"stored, but {status.value}"
            return
        for seen in (*part.seen, *part.pending):
            seen.written = None  # durable: a later retry of it is answered at once
        if not part.written:
            return  # duplicates only: nothing new came in
        count = sum(len(sizes) for _, _, sizes in part.batches)
        ctx.counters.messages_in += count
        ctx.metrics.on_messages_in(part.topic, [n for _, _, sizes in part.batches for n in sizes])

    def _response(self, conn: KafkaConnection, parts: list[_Part]) -> dict[str, Any]:
        port = self.env.ctx.port
        topics: dict[str, list[dict[str, Any]]] = {}
        for part in parts:
            ok = part.code == Code.NONE
            log_start = port.min_offset(part.topic, part.queue) if ok else -1
            topics.setdefault(part.topic, []).append(
                {
                    "index": part.index,
                    "error_code": part.code,
                    "base_offset": part.base_offset if ok or part.base_offset >= 0 else -1,
                    "log_append_time_ms": -1,
                    "log_start_offset": log_start,
                    "record_errors": [],
                    "error_message": part.message,
                }
            )
        return {
            "responses": [
                {"name": name, "partition_responses": rows} for name, rows in topics.items()
            ],
            "throttle_time_ms": 0,
        }
