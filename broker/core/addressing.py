"""Where a message is stored: the put hook the broker gives its store (``PutHook``), as RocketMQ
5's BrokerController registers ``handleScheduleMessage`` on its store's put path. The store's
writer appends what it is handed and knows no message semantics; this is the broker's rule,
run before every append of messages, whoever sends them (every protocol through the core, and
the store's own services re-putting a message: a committed half message with a DELAY level is
delayed then, as RocketMQ's EndTransaction is):

- a DELAY level > 0 (the batch as a whole): parked in SCHEDULE_TOPIC_XXXX, queue level - 1, the
  level clamped to the configured count (messageDelayLevel), as RocketMQ's put path does;
- else a half message (TRAN_MSG=true) not already in a system topic: parked in the half topic
  until its producer commits or rolls it back;
- else a delivery time ahead (TIMER_DELIVER_MS / TIMER_DELAY_SEC) of any message of the batch,
  outside the timer topic itself: parked in the timer topic (at most timerMaxDelaySec ahead,
  InvalidMessageError past it).

Producer-encoded records (the SDK's send batches, Kafka) are stored as sent: their front ends
send delayed, timed and transactional messages as messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from wharf.store import MessageInput, PutHook
from wharf.store.codec.parking import (
    delay_level_of,
    is_half,
    timer_times,
    to_half_topic,
    to_schedule_topic,
    to_timer_topic,
)
from wharf.store.codec.properties import TIMER_TOPIC, TRANS_HALF_TOPIC

__all__ = ["system_topics"]


def system_topics(delay_levels: int, timer_max_delay_s: int) -> PutHook:
    """The put hook of a broker with ``delay_levels`` delay levels and timers at most
    ``timer_max_delay_s`` ahead."""

    def where(
        topic: str, queue_id: int, messages: Sequence[MessageInput], now_ms: int
    ) -> tuple[str, int, Sequence[MessageInput]]:
        level = delay_level_of(messages)
        if level > 0:
            return to_schedule_topic(topic, queue_id, min(level, delay_levels), messages)
        if topic not in (TIMER_TOPIC, TRANS_HALF_TOPIC) and is_half(messages):
            return to_half_topic(topic, queue_id, messages)
        if topic != TIMER_TOPIC:
            times = timer_times(messages, now_ms, timer_max_delay_s)
            if times is not None:
                return to_timer_topic(topic, queue_id, times, messages)
        return topic, queue_id, messages

    return where
