"""Helpers shared by the console tests and the SDK listing test."""

from __future__ import annotations

import time


def wait_dispatched(endpoint: str, topic: str, count: int, timeout: float = 10.0) -> None:
    """Until ``topic`` holds ``count`` messages in its consume queues (and so in the key index):
    a send returns once the commit log has the message, dispatch follows asynchronously."""
    from wharf.client import NotFoundError
    from wharf.client.sync import Admin

    deadline = time.monotonic() + timeout
    with Admin(endpoint) as admin:
        while True:
            try:
                total = admin.topic_stats(topic).total_messages
            except NotFoundError:
                total = 0
            if total >= count:
                return
            assert time.monotonic() < deadline, f"{topic}: {total} of {count} dispatched"
            time.sleep(0.02)
