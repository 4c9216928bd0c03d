"""Consumer group pages: the list with lag, one group, offset reset, skip, DLQ resend.

``/groups`` lists subscription groups by name, ``PAGE_SIZE`` (100) a page, filtered by ``q``:
total lag (a plain number), online clients and consume TPS (growth of the sum of committed
offsets per second since this console last saw the group, ``rates.CounterRates``). One
``consumer_progress`` call per row of the page (at most 64 in flight); a group that has no
offsets yet shows lag 0.

``/groups/{name}``: lag per (topic, queue) with broker and committed offsets, the online client
ids, consume TPS, the group's retry (``%RETRY%<group>``) and dead-letter (``%DLQ%<group>``)
topics with their message counts, and the newest ``DLQ_SHOWN`` (20) dead letters, each with a
button that resends it to its original topic (the ``RETRY_TOPIC`` property the broker wrote
when it moved the message) with its body, tags, keys and user properties.

Actions (CSRF-checked POSTs): reset the group's offsets on a topic to a time (each queue moves
to its first message stored at or after it: ``Admin.reset_offsets``), and skip the backlog
(a reset to now: every message stored before the click is skipped).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from wharf.client import MessageQueue, NotFoundError, ReceivedMessage
from wharf.client.console.context import (
    UserError,
    console_of,
    done,
    gather_limited,
    int_field,
    page_slice,
)
from wharf.client.console.render import parse_time, time_input

PAGE_SIZE = 100
DLQ_SHOWN = 20
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
# Properties the broker or producer sets; a resent message gets fresh ones.
SYSTEM_PROPERTIES = frozenset(
    {
        "RETRY_TOPIC",
        "ORIGIN_MESSAGE_ID",
        "DELAY",
        "REAL_TOPIC",
        "REAL_QID",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "TRAN_MSG",
        "PGROUP",
        "CONSUME_START_TIME",
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_SEC",
    }
)


def routes() -> list[Route]:
    return [
        Route("/groups", group_list, methods=["GET"]),
        Route("/groups/{name}", group_page, methods=["GET"]),
        Route("/groups/{name}/reset", reset, methods=["POST"]),
        Route("/groups/{name}/skip", skip, methods=["POST"]),
        Route("/groups/{name}/resend", resend, methods=["POST"]),
    ]


def _consumed(progress: Any) -> int:
    return sum(max(q.consumer_offset, 0) for q in progress.queues)


async def group_list(request: Request) -> Response:
    console = console_of(request)
    broker = console.broker(request)
    query = request.query_params.get("q", "").strip()
    page = int_field(request.query_params.get("page"), "page", default=1, low=1, high=10**9)
    listing = await broker.admin.list_groups()
    matching = sorted(
        (g for g in listing.groups if query.lower() in g.group_name.lower()),
        key=lambda g: g.group_name,
    )
    shown, pages = page_slice(matching, page, PAGE_SIZE)
    progress = await gather_limited(broker.admin.consumer_progress(g.group_name) for g in shown)
    rows = []
    for group, found in zip(shown, progress, strict=True):
        row: dict[str, Any] = {"group": group, "lag": 0, "clients": 0, "tps": None, "topics": 0}
        if isinstance(found, NotFoundError):
            pass  # no offsets yet
        elif isinstance(found, BaseException):
            row["lag"] = None
            row["error"] = str(found)
        else:
            row["lag"] = found.total_lag
            row["clients"] = found.online_clients
            row["topics"] = len({q.topic for q in found.queues})
            key = (broker.index, group.group_name)
            row["tps"] = console.group_rates.observe(key, _consumed(found))
        rows.append(row)
    return console.page(
        request,
        "groups.html",
        rows=rows,
        total=len(matching),
        page=min(page, pages),
        pages=pages,
        query=query,
    )


async def _optional_stats(request: Request, topic: str) -> Any | None:
    try:
        return await console_of(request).broker(request).admin.topic_stats(topic)
    except NotFoundError:
        return None


async def dead_letters(request: Request, stats: Any) -> list[ReceivedMessage]:
    """The newest ``DLQ_SHOWN`` messages of a DLQ topic, newest first."""
    broker = console_of(request).broker(request)
    found: list[ReceivedMessage] = []
    for queue in stats.queues:
        start = max(queue.min_offset, queue.max_offset - DLQ_SHOWN)
        if start >= queue.max_offset:
            continue
        result = await broker.pull.pull(
            MessageQueue(stats.name, queue.queue_id), start, max_messages=DLQ_SHOWN
        )
        found.extend(result.messages)
    found.sort(key=lambda m: m.store_timestamp, reverse=True)
    return found[:DLQ_SHOWN]


async def group_page(request: Request) -> Response:
    console = console_of(request)
    broker = console.broker(request)
    name = request.path_params["name"]
    listing = await broker.admin.list_groups()
    config = next((g for g in listing.groups if g.group_name == name), None)
    try:
        progress = await broker.admin.consumer_progress(name)
    except NotFoundError:
        if config is None:
            raise NotFoundError(f"consumer group {name!r} does not exist on this broker") from None
        progress = None
    clients = list((await broker.admin.consumer_list(name)).client_ids)
    tps = None
    topics: list[str] = []
    if progress is not None:
        tps = console.group_rates.observe((broker.index, name), _consumed(progress))
        topics = sorted({q.topic for q in progress.queues if not q.topic.startswith("%")})
    retry = await _optional_stats(request, RETRY_PREFIX + name)
    dlq = await _optional_stats(request, DLQ_PREFIX + name)
    letters = await dead_letters(request, dlq) if dlq is not None else []
    return console.page(
        request,
        "group.html",
        name=name,
        config=config,
        progress=progress,
        clients=clients,
        tps=tps,
        topics=topics,
        retry=retry,
        dlq=dlq,
        letters=letters,
        now_input=time_input(int(time.time() * 1000) - 3600_000),
    )


def _topic(form: dict[str, str]) -> str:
    topic = form.get("topic", "").strip()
    if not topic:
        raise UserError("choose the topic whose offsets to move")
    return topic


async def reset(request: Request) -> Response:
    console = console_of(request)
    form = await console.guard.checked_form(request)
    name = request.path_params["name"]
    topic = _topic(form)
    when = form.get("time", "").strip()
    if not when:
        raise UserError("give the time to reset to (YYYY-MM-DDTHH:MM, UTC)")
    at_ms = parse_time(when)
    reply = await console.broker(request).admin.reset_offsets(name, topic, at_ms)
    moved = ", ".join(f"q{q}={o}" for q, o in sorted(reply.offsets.items()))
    return done(f"/groups/{quote(name, safe='')}", f"offsets of {topic} reset: {moved}")


async def skip(request: Request) -> Response:
    console = console_of(request)
    form = await console.guard.checked_form(request)
    name = request.path_params["name"]
    topic = _topic(form)
    now_ms = int(time.time() * 1000) + 1
    reply = await console.broker(request).admin.reset_offsets(name, topic, now_ms)
    moved = ", ".join(f"q{q}={o}" for q, o in sorted(reply.offsets.items()))
    return done(f"/groups/{quote(name, safe='')}", f"backlog of {topic} skipped: {moved}")


async def resend(request: Request) -> Response:
    console = console_of(request)
    form = await console.guard.checked_form(request)
    name = request.path_params["name"]
    msg_id = form.get("msg_id", "").strip()
    if not msg_id:
        raise UserError("no message id given")
    broker = console.broker(request)
    view = (await broker.admin.view_message(msg_id)).message
    message = ReceivedMessage.from_view(view)
    origin = message.properties.get("RETRY_TOPIC", "")
    if not origin:
        raise UserError(f"message {msg_id} names no original topic (RETRY_TOPIC)")
    properties = {k: v for k, v in message.properties.items() if k not in SYSTEM_PROPERTIES}
    producer = await broker.producer()
    result = await producer.send(
        origin, message.body, tags=message.tags or None, keys=message.keys, properties=properties
    )
    return done(
        f"/groups/{quote(name, safe='')}",
        f"resent {msg_id} to {origin} as {result.offset_msg_id}",
    )
