"""Admin.list_topics(with_stats=True): every topic's counts in the one listing call."""

from __future__ import annotations

from wharf.client.sync import Admin, Producer

from tests.console.helpers import wait_dispatched
from tests.harness import BrokerProcess


def test_listing_carries_each_topics_counts(broker: BrokerProcess, name: str) -> None:
    with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
        admin.create_topic(f"{name}-a", queue_nums=2)
        admin.create_topic(f"{name}-b", queue_nums=3)
        producer.send_batch(f"{name}-a", [b"x"] * 5, queue_id=1)
        producer.send_batch(f"{name}-b", [b"y"] * 2, queue_id=0)
        producer.send_batch(f"{name}-b", [b"y"] * 4, queue_id=2)
        wait_dispatched(broker.endpoint, f"{name}-b", 6)
        wait_dispatched(broker.endpoint, f"{name}-a", 5)
        plain = admin.list_topics()
        assert len(plain.stats) == 0  # only when asked
        listing = admin.list_topics(with_stats=True)
    assert [s.name for s in listing.stats] == [t.name for t in listing.topics]
    counts = {s.name: (s.total_messages, s.written_messages) for s in listing.stats}
    assert counts[f"{name}-a"] == (5, 5)
    assert counts[f"{name}-b"] == (6, 6)
