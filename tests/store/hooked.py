"""A store as the broker makes it: with the broker's put hook (``broker/core/addressing.py``), so
delayed, timed and half messages park in their system topics for the store's services."""

from __future__ import annotations

from typing import Any

from wharf.broker.core.addressing import system_topics
from wharf.store.config import StoreConfig, parse_delay_levels
from wharf.store.message_store import MessageStore


def hooked_store(config: StoreConfig, **kwargs: Any) -> MessageStore:
    hook = system_topics(
        len(parse_delay_levels(config.message_delay_level)), config.timer_max_delay_sec
    )
    return MessageStore(config, put_hook=hook, **kwargs)
