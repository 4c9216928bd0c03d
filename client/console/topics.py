"""Topic pages: the list, one topic (queues, route, update, send), create and delete.

``/topics`` lists topics by name, ``PAGE_SIZE`` (100) a page, filtered by ``q`` (a substring)
and, with ``system=1``, including system topics (``%RETRY%``, ``%DLQ%`` ...). A row shows the
read/write queue counts, permission, message type (RocketMQ 5's ``message.type`` attribute;
"any" when absent), the message count (sum over queues of max - min offset, a plain number) and
the throughput (messages written per second since this console last listed the topic,
``rates.CounterRates``). The listing is one ``list_topics`` call (the broker answers it from a
cached reply: ~5 ms for 25,000 topics, tests/bench/metadata_scale.py); up to
``STATS_IN_LISTING`` topics a second one ``with_stats=True`` carries every topic's counts
(min/max offsets only, no commit log read). Beyond that, or from a broker that does not fill
them, the counts come from one ``topic_stats`` call per row of the page (at most 64 in flight):
the counts of 25,000 topics in one call held the broker's event loop for ~60 ms, for the 100
rows shown.

``/topics/{name}``: configuration, per-queue min/max offsets and last store time, the route
(``QueryRoute``: broker and endpoint clients dial), a form to update queues / permission /
message type, a form to send a test message, and a delete link. Deleting asks for confirmation
on its own page (``/topics/{name}/delete``) whose form repeats the topic name.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from wharf.client import Admin, NotFoundError
from wharf.client.console.context import (
    UserError,
    console_of,
    done,
    gather_limited,
    int_field,
    page_slice,
)

PAGE_SIZE = 100
STATS_IN_LISTING = 1000  # more topics: their counts per shown row, not all in the listing
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
TYPE_ATTRIBUTE = "message.type"
PERMS = {"6": 6, "4": 4, "2": 2}


def routes() -> list[Route]:
    return [
        Route("/topics", topic_list, methods=["GET"]),
        Route("/topics", create, methods=["POST"]),
        Route("/topics/{name}", topic_page, methods=["GET"]),
        Route("/topics/{name}/update", update, methods=["POST"]),
        Route("/topics/{name}/delete", confirm_delete, methods=["GET"]),
        Route("/topics/{name}/delete", delete, methods=["POST"]),
    ]


async def topic_list(request: Request) -> Response:
    console = console_of(request)
    broker = console.broker(request)
    query = request.query_params.get("q", "").strip()
    system = request.query_params.get("system") == "1"
    page = int_field(request.query_params.get("page"), "page", default=1, low=1, high=10**9)
    listing = await broker.admin.list_topics(include_system=system)
    if len(listing.topics) <= STATS_IN_LISTING:
        listing = await broker.admin.list_topics(include_system=system, with_stats=True)
    matching = sorted(
        (t for t in listing.topics if query.lower() in t.name.lower()), key=lambda t: t.name
    )
    shown, pages = page_slice(matching, page, PAGE_SIZE)
    counts = await _counts(broker.admin, listing, shown)
    rows = []
    for topic in shown:
        count = rate = None
        if topic.name in counts:
            count, written = counts[topic.name]
            rate = console.topic_rates.observe((broker.index, topic.name), written)
        rows.append(
            {
                "topic": topic,
                "type": topic.attributes.get(TYPE_ATTRIBUTE, "any"),
                "messages": count,
                "rate": rate,
            }
        )
    return console.page(
        request,
        "topics.html",
        rows=rows,
        total=len(matching),
        page=min(page, pages),
        pages=pages,
        query=query,
        system=system,
        message_types=MESSAGE_TYPES,
    )


async def _counts(admin: Admin, listing: Any, shown: list[Any]) -> dict[str, tuple[int, int]]:
    """name -> (message count, messages written) of the shown topics: from the listing's own
    stats, or (a broker without ``with_stats``) one ``topic_stats`` call per shown topic."""
    if listing.stats or not shown:
        return {s.name: (s.total_messages, s.written_messages) for s in listing.stats}
    found = await gather_limited(admin.topic_stats(t.name) for t in shown)
    return {
        stat.name: (stat.total_messages, sum(q.max_offset for q in stat.queues))
        for stat in found
        if not isinstance(stat, BaseException)
    }


async def find_topic(request: Request, name: str):  # type: ignore[no-untyped-def]
    listing = await console_of(request).broker(request).admin.list_topics(include_system=True)
    for topic in listing.topics:
        if topic.name == name:
            return topic
    raise NotFoundError(f"topic {name!r} does not exist on this broker")


async def topic_page(request: Request) -> Response:
    console = console_of(request)
    broker = console.broker(request)
    name = request.path_params["name"]
    topic = await find_topic(request, name)
    stats = await broker.admin.topic_stats(name)
    route = await broker.admin.topic_route(name)
    return console.page(
        request,
        "topic.html",
        topic=topic,
        stats=stats,
        route=route,
        type=topic.attributes.get(TYPE_ATTRIBUTE, ""),
        message_types=MESSAGE_TYPES,
    )


def _message_type(form: dict[str, str]) -> str:
    value = form.get("message_type", "").strip().upper()
    if value and value not in MESSAGE_TYPES:
        raise UserError(f"message type must be one of {', '.join(MESSAGE_TYPES)}, got {value!r}")
    return value


def _perm(form: dict[str, str]) -> int:
    value = form.get("perm", "6").strip() or "6"
    if value not in PERMS:
        raise UserError(f"permission must be 6 (read-write), 4 (read) or 2 (write), got {value!r}")
    return PERMS[value]


async def create(request: Request) -> Response:
    console = console_of(request)
    form = await console.guard.checked_form(request)
    name = form.get("name", "").strip()
    if not name:
        raise UserError("a topic name is required")
    queues = int_field(form.get("queues"), "queues", default=8, low=1, high=1024)
    message_type = _message_type(form)
    attributes = {TYPE_ATTRIBUTE: message_type} if message_type else {}
    await console.broker(request).admin.create_topic(
        name, queue_nums=queues, perm=_perm(form), attributes=attributes
    )
    return done(f"/topics/{quote(name, safe='')}", f"topic {name} created with {queues} queues")


async def update(request: Request) -> Response:
    console = console_of(request)
    form = await console.guard.checked_form(request)
    name = request.path_params["name"]
    read = int_field(form.get("read_queues"), "read queues", default=-1, low=1, high=1024)
    write = int_field(form.get("write_queues"), "write queues", default=-1, low=1, high=1024)
    await console.broker(request).admin.update_topic(
        name,
        read_queue_nums=None if read < 0 else read,
        write_queue_nums=None if write < 0 else write,
        perm=_perm(form),
        attributes={TYPE_ATTRIBUTE: _message_type(form)},  # "" removes it: any type
    )
    return done(f"/topics/{quote(name, safe='')}", f"topic {name} updated")


async def confirm_delete(request: Request) -> Response:
    console = console_of(request)
    topic = await find_topic(request, request.path_params["name"])
    stats = await console.broker(request).admin.topic_stats(topic.name)
    return console.page(request, "topic_delete.html", topic=topic, stats=stats)


async def delete(request: Request) -> Response:
    console = console_of(request)
    form = await console.guard.checked_form(request)
    name = request.path_params["name"]
    if form.get("confirm", "").strip() != name:
        raise UserError(f"type the topic name {name!r} to confirm the deletion")
    await console.broker(request).admin.delete_topic(name)
    return done("/topics", f"topic {name} deleted")
