"""Message pages: search, one message with its trace, body download, send a test message.

``/messages`` searches one of three ways (``GET``, so a search is a link):
- ``msg_id=ID`` (an offset msg id, 32 hex, or a unique id with ``topic``): redirects to the
  message page;
- ``topic=T&key=K``: the index lookup (``Admin.query_messages``, up to ``KEY_RESULTS`` = 64
  results, optionally within ``begin`` / ``end``);
- ``topic=T`` with ``begin`` / ``end`` (UTC ``YYYY-MM-DDTHH:MM``, or epoch ms; empty = the
  queue's first / last message): ``search.browse`` pages through the range, ``PAGE_SIZE`` (20) a
  page, in queue order then offset order.
Each result links to ``/messages/{offset_msg_id}``.

``/messages/{id}`` shows headers, properties, the body (``render.body_view``: ``fmt`` = auto,
text, json, hex; over 64 KiB it is cut and ``/messages/{id}/body`` downloads all of it) and the
trace (``trace.trace_of``). ``POST /messages/send`` sends a test message (topic, body, optional
key and tag) and redirects to the stored message's page.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from wharf.client import ReceivedMessage
from wharf.client.console.context import UserError, console_of, done, int_field
from wharf.client.console.render import FORMATS, body_view, parse_time
from wharf.client.console.search import browse
from wharf.client.console.trace import trace_of

KEY_RESULTS = 64
PAGE_SIZE = 20


def routes() -> list[Route]:
    return [
        Route("/messages", search_page, methods=["GET"]),
        Route("/messages/send", send, methods=["POST"]),
        Route("/messages/{msg_id}", message_page, methods=["GET"]),
        Route("/messages/{msg_id}/body", download, methods=["GET"]),
    ]


def message_url(msg_id: str, topic: str = "") -> str:
    url = f"/messages/{quote(msg_id, safe='')}"
    return f"{url}?{urlencode({'topic': topic})}" if topic else url


def _time(value: str, name: str) -> int:
    try:
        return parse_time(value) if value.strip() else 0
    except ValueError as exc:
        raise UserError(f"{name}: {exc}") from None


async def search_page(request: Request) -> Response:
    console = console_of(request)
    broker = console.broker(request)
    params = request.query_params
    topic = params.get("topic", "").strip()
    key = params.get("key", "").strip()
    msg_id = params.get("msg_id", "").strip()
    begin_text, end_text = params.get("begin", ""), params.get("end", "")
    form = {"topic": topic, "key": key, "msg_id": msg_id, "begin": begin_text, "end": end_text}
    if msg_id:
        return RedirectResponse(message_url(msg_id, topic), 303)
    results: list[ReceivedMessage] | None = None
    total = pages = page = 0
    mode = ""
    if topic:
        begin = _time(begin_text, "from")
        end = _time(end_text, "to")
        if begin and end and end <= begin:
            raise UserError("'to' must be after 'from'")
        if key:
            mode = "key"
            reply = await broker.admin.query_messages(
                topic, key, begin_ms=begin, end_ms=end, max_num=KEY_RESULTS
            )
            results = [ReceivedMessage.from_view(v) for v in reply.messages]
            results.sort(key=lambda m: m.store_timestamp)
            total = len(results)
        else:
            mode = "range"
            page = int_field(params.get("page"), "page", default=1, low=1, high=10**9)
            found = await browse(broker.admin, broker.pull, topic, begin, end, page, PAGE_SIZE)
            results, total, pages, page = found.messages, found.total, found.pages, found.page
    elif key or begin_text or end_text:
        raise UserError("a topic is required to search by key or time")
    return console.page(
        request,
        "messages.html",
        form=form,
        mode=mode,
        results=results,
        total=total,
        page=page,
        pages=pages,
        page_query={k: v for k, v in form.items() if v and k != "msg_id"},
        message_url=message_url,
    )


async def _message(request: Request) -> ReceivedMessage:
    broker = console_of(request).broker(request)
    msg_id = request.path_params["msg_id"].strip()
    topic = request.query_params.get("topic", "").strip()
    reply = await broker.admin.view_message(msg_id, topic)
    return ReceivedMessage.from_view(reply.message)


async def message_page(request: Request) -> Response:
    console = console_of(request)
    message = await _message(request)
    wanted = request.query_params.get("fmt", "auto")
    if wanted not in FORMATS:
        raise UserError(f"fmt must be one of {', '.join(FORMATS)}, got {wanted!r}")
    view = body_view(message.body, wanted)
    trace = await trace_of(console.broker(request).admin, message)
    return console.page(
        request,
        "message.html",
        m=message,
        body=view,
        trace=trace,
        msg_id=request.path_params["msg_id"],
        topic_param=request.query_params.get("topic", ""),
        formats=FORMATS,
        message_url=message_url,
    )


async def download(request: Request) -> Response:
    message = await _message(request)
    name = f"{message.offset_msg_id or 'message'}.bin"
    return Response(
        message.body,
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


async def send(request: Request) -> Response:
    console = console_of(request)
    form = await console.guard.checked_form(request)
    topic = form.get("topic", "").strip()
    body = form.get("body", "")
    if not topic:
        raise UserError("a topic is required")
    if not body:
        raise UserError("the message body must not be empty")
    key = form.get("key", "").strip()
    tags = form.get("tags", "").strip()
    producer = await console.broker(request).producer()
    result = await producer.send(topic, body.encode(), tags=tags or None, keys=[key] if key else ())
    return done(
        message_url(result.offset_msg_id),
        f"sent to {topic} queue {result.queue_id} offset {result.queue_offset}",
    )
