"""Listing 25,000 topics (issue 33): the broker's cached ListTopics reply follows every change,
a page of a listing (``wharf.client.admin.page_topics``, ``wharf topic list``), and the
NameServer telling watchers only about the routes a re-registration changed."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace
from typing import Any, cast

import pytest
from wharf.broker.core.admin import AdminCore
from wharf.broker.core.processor import CoreProcessor
from wharf.broker.frontends.v1.admin import AdminService
from wharf.broker.meta.topics import TopicConfig, TopicConfigManager
from wharf.broker.namesrv.routes import RouteTable, TopicQueues
from wharf.client.admin import page_topics
from wharf.client.cli import topic_commands
from wharf.client.cli.output import Output
from wharf.v1 import admin_pb2


class _Store:
    def get_max_offset(self, topic: str, queue_id: int) -> int:
        return 10 + queue_id

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        return 2


def _service(topics: TopicConfigManager) -> Any:
    metrics = SimpleNamespace(observe_rpc=lambda *args: None)
    # The core's admin over a stand-in store (the listing's counts read min/max offsets only).
    admin = AdminCore(cast(Any, _Store()), topics, cast(Any, None), cast(Any, None),
                      cast(Any, None), 16, lambda name: None)  # fmt: skip
    services = dict.fromkeys(
        ("send", "read", "pop", "retry", "transactions", "clients"), cast(Any, None)
    )  # the listing needs the topic table and the admin's counts only
    port = CoreProcessor(cast(Any, _Store()), topics, cast(Any, None), cast(Any, None),
                         admin=admin, **services)  # fmt: skip
    return AdminService(SimpleNamespace(port=port, metrics=metrics))  # type: ignore[arg-type]


async def test_the_cached_listing_follows_every_change_of_the_topic_table() -> None:
    topics = TopicConfigManager(default_queue_nums=4, auto_create=True)
    for i in range(25_000):
        topics.create(f"topic-{i:05d}", 4, 4, 6, {})
    service = _service(topics)

    async def names(**kw: Any) -> list[str]:
        request = admin_pb2.ListTopicsRequest(**kw)
        return [t.name for t in (await service.ListTopics(request, None)).topics]

    first = await names()
    assert len(first) == 25_000 and first == sorted(first)
    _, cached = service._topic_listing(False)
    assert service._topic_listing(False)[1] is cached  # no change: not built again
    topics.create("a-new", 2, 2, 6, {"message.type": "FIFO"})
    topics.delete("topic-00007")
    topics.replace(TopicConfig("topic-00008", 4, 4, 4, {}))
    topics.ensure_system("%RETRY%g", 1)
    listed = await names()
    assert listed[0] == "a-new" and "topic-00007" not in listed and "%RETRY%g" not in listed
    assert "%RETRY%g" in await names(include_system=True)
    reply = await service.ListTopics(admin_pb2.ListTopicsRequest(with_stats=True), None)
    by_name = {t.name: t for t in reply.topics}
    assert by_name["topic-00008"].perm == 4
    assert dict(by_name["a-new"].attributes) == {"message.type": "FIFO"}
    assert [s.name for s in reply.stats] == [t.name for t in reply.topics]
    assert (reply.stats[0].total_messages, reply.stats[0].written_messages) == (17, 21)
    plain = await service.ListTopics(admin_pb2.ListTopicsRequest(), None)
    assert len(plain.stats) == 0  # the stats went into a copy, not the cached reply


def _reply(n: int, stats: bool = True) -> admin_pb2.ListTopicsResponse:
    reply = admin_pb2.ListTopicsResponse()
    for i in reversed(range(n)):  # a merged cluster reply need not be sorted
        reply.topics.add(name=f"t{i:04d}", read_queue_nums=1, write_queue_nums=1, perm=6)
        if stats:
            reply.stats.add(name=f"t{i:04d}", total_messages=i, written_messages=i)
    return reply


def test_a_page_of_topics_by_prefix_after_and_limit_keeps_their_stats() -> None:
    reply = _reply(300)
    page = page_topics(reply, prefix="t01", after="t0105", limit=3)
    assert [t.name for t in page.topics] == ["t0106", "t0107", "t0108"]
    assert [(s.name, s.total_messages) for s in page.stats] == [
        ("t0106", 106),
        ("t0107", 107),
        ("t0108", 108),
    ]
    assert len(page_topics(reply, prefix="t02").topics) == 100
    assert [t.name for t in page_topics(reply, after="t0297").topics] == ["t0298", "t0299"]
    assert len(page_topics(_reply(5, stats=False), limit=2).stats) == 0


async def _cli_list(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool, **kw: Any
) -> str:
    class FakeAdmin:
        async def __aenter__(self) -> FakeAdmin:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        async def list_topics(self, *, include_system: bool) -> admin_pb2.ListTopicsResponse:
            return _reply(1_200, stats=False)

    monkeypatch.setattr(topic_commands, "admin_of", lambda args: FakeAdmin())
    options = {"system": False, "prefix": "", "after": "", "limit": None, **kw}
    assert await topic_commands.topic_list(argparse.Namespace(**options), Output(as_json)) == 0
    return capsys.readouterr().out


async def test_topic_list_shows_a_page_and_how_to_get_the_next_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = await _cli_list(monkeypatch, capsys, False)
    assert "t0499" in table and "t0500" not in table
    assert "500 of 1200 topics; the next page: --after t0499" in table
    following = await _cli_list(monkeypatch, capsys, False, after="t0499", limit=2)
    assert "t0500" in following and "t0501" in following and "t0502" not in following
    filtered = await _cli_list(monkeypatch, capsys, False, prefix="t011")
    assert "t0119" in filtered and "next page" not in filtered
    everything = json.loads(await _cli_list(monkeypatch, capsys, True))
    assert len(everything) == 1_200  # --json: all unless --limit
    assert [t["name"] for t in json.loads(await _cli_list(monkeypatch, capsys, True, limit=2))] == [
        "t0000",
        "t0001",
    ]


def test_a_re_registration_tells_watchers_only_the_routes_it_changed() -> None:
    table = RouteTable(clock=lambda: 0.0)
    told: list[set[str]] = []
    table.watch(told.append)
    topics = {f"topic-{i:05d}": TopicQueues(4, 4, 6) for i in range(25_000)}
    key = ("c", "b", 0)
    assert table.register(key, "h:1", 1, dict(topics))
    assert len(told.pop()) == 25_000
    table.register(key, "h:1", 1, dict(topics))
    assert told == []  # the same registration again: no route moved
    more = {**topics, "new": TopicQueues(2, 2, 6), "topic-00003": TopicQueues(4, 4, 4)}
    del more["topic-00004"]
    table.register(key, "h:1", 2, more)
    assert told.pop() == {"new", "topic-00003", "topic-00004"}
    route = table.route("topic-00003")
    assert route is not None and route.queues[0][1].perm == 4
    assert table.route("topic-00004") is None
    table.register(key, "h:2", 3, more)  # moved: every route names the new address
    assert len(told.pop()) == 25_000  # (one topic more, one less)
