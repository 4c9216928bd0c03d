"""Messages parked in a system topic until the broker puts them where they were sent: delay
levels (SCHEDULE_TOPIC_XXXX), timers (rmq_sys_wheel_timer) and half messages
(RMQ_SYS_TRANS_HALF_TOPIC) keep their destination in REAL_TOPIC / REAL_QID, as RocketMQ does.
One place for the rewrite in and the rewrite out, so the three services cannot drift apart."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from wharf.store.codec.properties import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from wharf.store.model import MessageInput, StoredMessage


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
