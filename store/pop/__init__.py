"""Pop consumption with invisible time (RocketMQ 5 POP, RIP-19), durable: the engine side of
the v2 protocol's ReceiveMessage / AckMessage / ChangeInvisibleDuration. No gRPC here.

USE (the v2 layer, on the store's loop; ``store.pop`` is the running ``PopService``)::

    # ReceiveMessage: pop from any readable queue of the topic (queue_ids=None), long-polling
    found = await store.pop.pop_wait(group, topic, None, parse_tag_expression("a||b"),
                                     batch=32, invisible_ms=30_000, max_attempts=17,
                                     fifo=group_is_fifo, timeout_ms=long_polling_ms)
    for message, receipt_handle, attempt in found: ...   # StoredMessage, str, 1, 2, ...
    # AckMessage: one handle, or all of a request's entries in one journal write and sync
    await store.pop.ack(group, topic, receipt_handle)
    failures = await store.pop.ack_many(group, topic, handles)  # None or the error, per handle
    # ChangeInvisibleDuration: the duration counts from this call; returns the NEW handle
    new_handle = await store.pop.change_invisible(group, topic, receipt_handle, 30_000)
    # ForwardMessageToDeadLetterQueue: the consumer gave up; %DLQ%<group> now
    await store.pop.dead_letter(group, topic, receipt_handle)

    # a deleted consumer group (deleted topics are forgotten by the store's delete_topics)
    store.pop.forget(groups=[group])

``pop(...)`` is the same as ``pop_wait`` without the wait (returns [] at once); every call
accepts ``now`` (ms since the epoch) for tests, else the service's clock.

CONTRACT

- A message is handed out to one consumer at a time: after a pop it is in flight and invisible
  until ``now + invisible_ms``; then the next pop hands it out again with attempt + 1 and a new
  receipt handle. An ack finishes it; a finished message is never handed out again.
- Receipt handles (``handles.py``): ASCII ``<queue>.<offset>.<16 hex nonce>``, unique per
  delivery and per change of invisible time. A malformed, forged or stale handle (the message
  was acked, redelivered, dead-lettered, or its invisible time changed since) raises
  ``wharf.store.errors.InvalidReceiptHandleError`` (v2: INVALID_RECEIPT_HANDLE) and changes
  nothing. An ack after the invisible time passed is accepted while the message has not been
  handed out again.
- Max attempts: an expired message whose attempt already equals ``max_attempts`` is not handed
  out again: the next pop that finds it copies it to ``%DLQ%<group>`` queue 0 (through the
  store's ``put``; properties kept, plus ``DLQ_ORIGIN_TOPIC`` / ``DLQ_ORIGIN_MESSAGE_ID``,
  reconsume times = attempts) and journals it DONE. A failed put leaves it in flight; the next
  pop retries. So a message is delivered at most ``max_attempts`` times (RocketMQ: 17).
  ``dead_letter`` does the same copy at once for a live handle, whatever the attempt (a failed
  put raises and leaves the delivery as it was).
- Tag filter: messages that do not match are finished for the group (RocketMQ's pop does the
  same); a new group starts at its committed offset (``committed``: the broker's consumer
  offset, which carries a group's progress over a failover; ``progress()`` is what the broker
  commits), else at the queue's minimum offset (everything still stored); messages
  retention deleted before they were finished are skipped.
- FIFO (``fifo=True``, the group's setting): within a queue, a message is not handed out while
  an earlier message of the same message group is in flight (visible again or not); message
  group = property ``__SHARDINGKEY`` (``service.MESSAGE_GROUP_PROPERTY``, RocketMQ's
  PROPERTY_SHARDING_KEY; absent or empty: not ordered). So at most one message per message
  group is in flight; later messages of other groups keep flowing (FIFO scan window 2048).
- Limits: batch 1..1024, invisible_ms 1 ms..24 h (the v2 layer enforces its own, narrower range),
  max_attempts 1..1000, group 1-122 chars of [%a-zA-Z0-9._-] (so ``%DLQ%<group>`` is a topic);
  InvalidMessageError otherwise. Per queue at most 65,536 offsets lie between the pop offset
  and the newest handed out (a message in flight holds that window).
- Wake-ups: ``pop_wait`` waits on the store's arrival listener (``on_arrival``), on acks /
  dead-letters of the group that may free a FIFO message group or a full window, and on a
  timer at the earliest in-flight expiry of the group's queues -- no polling loop. The caller
  bounds how many receives wait at once.

DURABILITY (``journal.py``): every change is a record (POP / ACK / CHANGE / DONE / RESET, a
CRC each) in ``<store>/pop/journal``; a pop returns its messages, an ack or change its answer,
only after its records are fdatasync'd (batched: one write and one fdatasync per event-loop
burst, the fdatasync on the commit log's sync engine; ``ack_many`` journals its handles in one).
At start the journal is replayed and a torn tail dropped (those calls were never answered).
After a restart or kill -9, an acked message is never delivered again; an un-acked one comes
back when the invisible time journaled with it passes (wall clock: the consumer may still ack
it with its handle meanwhile), with attempt + 1. The journal is compacted (snapshot + new
file) once it passes 16 MiB. A failed journal write/sync is sticky (FlushFailedError / SyncDiskFullError):
pop, ack and change fail until the store restarts.

Modules: ``records`` (journal record codec; layout in ``wharf.store.codec.layout``), ``state``
(per-queue state, changed only by records), ``journal`` (file, batched sync, compaction),
``handles``, ``wakeups``, ``service`` (``PopService``).
"""

from wharf.store.model import PoppedMessage
from wharf.store.pop.service import MESSAGE_GROUP_PROPERTY, PopService

__all__ = ["MESSAGE_GROUP_PROPERTY", "PopService", "PoppedMessage"]
