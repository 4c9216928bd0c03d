"""What every page handler shares: the ``Console`` (brokers, sampler, rates, templates, guard)
reached through ``request.app.state.console``, and ``UserError`` for bad input (answered 400).

The broker a page works on is the first of ``--endpoints`` unless the ``wharf_console_broker``
cookie (set by ``/select?broker=N`` from the overview) names another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from wharf.client.console import render
from wharf.client.console.brokers import Broker, BrokerPool, RateSampler
from wharf.client.console.rates import CounterRates
from wharf.client.console.security import Guard

HERE = Path(__file__).parent
T = TypeVar("T")
BROKER_COOKIE = "wharf_console_broker"


class UserError(Exception):
    """Bad input a person typed (answered 400 with the message)."""


class Console:
    """What every page handler reaches through ``request.app.state.console``."""

    def __init__(self, pool: BrokerPool, guard: Guard, *, sample_interval_s: float = 2.0) -> None:
        self.pool = pool
        self.guard = guard
        self.sampler = RateSampler(pool, interval_s=sample_interval_s)
        self.topic_rates = CounterRates()
        self.group_rates = CounterRates()
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(["html"]),
            auto_reload=False,
        )
        self.templates.filters.update(
            time=render.fmt_time,
            duration=render.fmt_duration,
            size=render.fmt_bytes,
            rate=render.fmt_rate,
            perm=render.fmt_perm,
        )
        self.templates.globals["page_url"] = page_url

    def broker(self, request: Request) -> Broker:
        return self.pool.pick(request.cookies.get(BROKER_COOKIE, "0"))

    def page(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        broker = self.broker(request)
        html = self.templates.get_template(template).render(
            request=request,
            csrf_token=self.guard.csrf_token,
            broker=broker,
            brokers=self.pool.brokers,
            done=request.query_params.get("done", ""),
            **context,
        )
        return HTMLResponse(html, status_code=status)


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def int_field(value: str | None, name: str, *, default: int, low: int, high: int) -> int:
    """A whole number a person typed, in [low, high]; UserError naming the field otherwise."""
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise UserError(f"{name} must be a whole number, got {value!r}") from None
    if not low <= number <= high:
        raise UserError(f"{name} must be between {low} and {high}, got {number}")
    return number


async def gather_limited(calls: Iterable[Awaitable[T]], limit: int = 64) -> list[T | BaseException]:
    """Await ``calls`` with at most ``limit`` in flight; exceptions are returned, not raised."""
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T | BaseException:
        async with semaphore:
            try:
                return await call
            except Exception as exc:
                return exc

    return list(await asyncio.gather(*(one(c) for c in calls)))


def done(url: str, message: str) -> RedirectResponse:
    """303 to ``url`` with the confirmation line the page shows."""
    joiner = "&" if "?" in url else "?"
    return RedirectResponse(f"{url}{joiner}{urlencode({'done': message})}", 303)


def page_slice(items: list[T], page: int, size: int) -> tuple[list[T], int]:
    """The items of 1-based ``page`` and the number of pages (at least 1)."""
    pages = max(1, -(-len(items) // size))
    page = min(max(page, 1), pages)
    return items[(page - 1) * size : page * size], pages


def page_url(request: Request, page: int) -> str:
    """This page's URL with ``page`` replaced (for the pager)."""
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "page"]
    return f"{request.url.path}?{urlencode([*params, ('page', str(page))])}"
