"""Messages parked in a system topic until the store's services put them where they were sent:
delay levels (SCHEDULE_TOPIC_XXXX), timers (rmq_sys_wheel_timer) and half messages
(RMQ_SYS_TRANS_HALF_TOPIC) keep their destination in REAL_TOPIC / REAL_QID, as RocketMQ does.
One place for the rewrite in (``to_schedule_topic``, ``to_timer_topic``, ``to_half_topic``,
with the batch's ``delay_level_of``, ``timer_times``, ``is_half``) and the rewrite out
(``unpark``), so the three services cannot drift apart.

Sans-IO rules over message values: which messages are parked is decided by the put hook the
store is given (the broker's core, ``broker/core/addressing.py``), never by the writer."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from wharf.store.codec.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
)
from wharf.store.errors import InvalidMessageError
from wharf.store.model import MessageInput, StoredMessage

TIMER_QUEUE = 0  # the timer topic's queue of timed messages (queue 1: cancel markers)
HALF_QUEUE = 0  # the half topic's one queue


def park(
    m: MessageInput,
    topic: str,
    queue_id: int,
    set_props: Mapping[str, str] = {},
    drop: Iterable[str] = (),
) -> MessageInput:
    """``m`` with its destination (and ``set_props``, without ``drop``) in its properties."""
    props = dict(m.properties)
    for name in drop:
        props.pop(name, None)
    props.update(set_props)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return dataclasses.replace(m, properties=props)


def unpark(
    msg: StoredMessage,
    set_props: Mapping[str, str] = {},
    drop: Iterable[str] = (),
    keep_destination: bool = False,
) -> tuple[str, int, MessageInput]:
    """(topic, queue id, message) to put a parked message where it was sent: ``set_props``
    added, ``drop`` removed, REAL_TOPIC / REAL_QID removed unless ``keep_destination`` (the
    delay-level path keeps them, as RocketMQ's). ValueError when it has no destination."""
    props = dict(msg.properties)
    topic = props.get(PROPERTY_REAL_TOPIC, "")
    queue = props.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not queue.isdigit():
        raise ValueError(f"message at {msg.commit_log_offset} has no REAL_TOPIC/REAL_QID")
    if not keep_destination:
        del props[PROPERTY_REAL_TOPIC], props[PROPERTY_REAL_QUEUE_ID]
    for name in drop:
        props.pop(name, None)
    props.update(set_props)
    return (
        topic,
        int(queue),
        MessageInput(
            body=msg.body,
            properties=props,
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        ),
    )


def delay_level_of(messages: Sequence[MessageInput]) -> int:
    """The batch's DELAY level (0 = none). InvalidMessageError for mixed or bad levels."""
    levels = {m.properties.get(PROPERTY_DELAY_TIME_LEVEL) or "0" for m in messages}
    if levels == {"0"}:
        return 0
    if len(levels) > 1:
        raise InvalidMessageError(
            "all messages of a batch must carry the same DELAY level (a batch goes to "
            "one queue); send delayed messages in their own batch"
        )
    text = levels.pop()
    try:
        level = int(text)
    except ValueError:
        raise InvalidMessageError(f"DELAY level {text!r} is not an integer") from None
    if level < 0:
        raise InvalidMessageError(f"DELAY level {level} must be >= 0")
    return level


def to_schedule_topic(
    topic: str, queue_id: int, level: int, messages: Sequence[MessageInput]
) -> tuple[str, int, list[MessageInput]]:
    """RocketMQ's CommitLog.asyncPutMessage delay rewrite (``level`` already clamped to the
    configured count): SCHEDULE_TOPIC_XXXX queue level-1, real destination in properties."""
    level_prop = {PROPERTY_DELAY_TIME_LEVEL: str(level)}
    return SCHEDULE_TOPIC, level - 1, [park(m, topic, queue_id, level_prop) for m in messages]


def timer_times(
    messages: Sequence[MessageInput], now_ms: int, max_delay_s: int
) -> list[int] | None:
    """Each message's delivery time when the batch must wait in the timer, None when no
    message of it lies ahead (no timer property, or all due: store it now). A batch may mix
    times, and untimed messages (due now): every record carries its own time. An
    InvalidMessageError for a bad value or a time more than ``max_delay_s`` ahead."""
    if not any(
        PROPERTY_TIMER_DELIVER_MS in m.properties or PROPERTY_TIMER_DELAY_SEC in m.properties
        for m in messages
    ):
        return None  # every put asks: no list built for the untimed ones
    times: list[int] = []
    ahead = False
    for m in messages:
        props = m.properties
        if PROPERTY_TIMER_DELIVER_MS in props:
            text, scale, base = props[PROPERTY_TIMER_DELIVER_MS], 1, 0
        elif PROPERTY_TIMER_DELAY_SEC in props:
            text, scale, base = props[PROPERTY_TIMER_DELAY_SEC], 1000, now_ms
        else:
            times.append(now_ms)
            continue
        try:
            deliver_ms = base + int(text) * scale
        except ValueError:
            raise InvalidMessageError(f"timer property {text!r} is not an integer") from None
        if deliver_ms - now_ms > max_delay_s * 1000:
            raise InvalidMessageError(
                f"delivery time {deliver_ms} is {(deliver_ms - now_ms) // 1000} s ahead; the "
                f"limit is timerMaxDelaySec = {max_delay_s} s"
            )
        ahead |= deliver_ms > now_ms
        # A time already past (even before 1970: a negative timestamp) is due now: it waits
        # in the timer only beside a later one of its batch, with now as its time.
        times.append(max(deliver_ms, now_ms))
    return times if ahead else None


def to_timer_topic(
    topic: str, queue_id: int, times: Sequence[int], messages: Sequence[MessageInput]
) -> tuple[str, int, list[MessageInput]]:
    """The rewrite of a timed batch: TIMER_TOPIC queue 0, destination and time in properties."""
    out = [
        park(m, topic, queue_id, {PROPERTY_TIMER_DELIVER_MS: str(t)}, (PROPERTY_TIMER_DELAY_SEC,))
        for m, t in zip(messages, times, strict=True)
    ]
    return TIMER_TOPIC, TIMER_QUEUE, out


def is_half(messages: Sequence[MessageInput]) -> bool:
    """True when the batch is transactional (all or none: InvalidMessageError for a mix)."""
    flags = {m.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true" for m in messages}
    if len(flags) > 1:
        raise InvalidMessageError("a batch is transactional as a whole or not at all")
    return flags == {True}


def to_half_topic(
    topic: str, queue_id: int, messages: Sequence[MessageInput]
) -> tuple[str, int, list[MessageInput]]:
    return TRANS_HALF_TOPIC, HALF_QUEUE, [park(m, topic, queue_id) for m in messages]
