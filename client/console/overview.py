"""The overview page (``/``): every broker, its live message rates and alerts.

Each broker row (name, endpoint, role, flush mode, writable, disk use, uptime, topics, groups,
messages in/out per second) comes from one ``Admin.broker_status`` call per broker, made in
parallel; a broker that does not answer is shown as DOWN with the error, and the other rows are
unaffected. Role is ``master`` for broker id 0 and ``slave`` otherwise (RocketMQ's brokerId).

Alerts: a broker down; not writable (with the broker's reason); disk use over
``DISK_ALERT_RATIO`` (75 %); dispatch behind by more than ``DISPATCH_ALERT_BYTES`` (1 MiB: the
commit log holds records the consume queues and index do not yet reference).

The live chart polls ``/api/rates`` (JSON: per broker, the sampler's rate series) every 2 s and
draws messages in/out per second with a few lines of vanilla JavaScript (``static/console.js``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from wharf.client import WharfError
from wharf.client.console.brokers import Broker
from wharf.client.console.context import console_of
from wharf.client.console.render import fmt_bytes

DISK_ALERT_RATIO = 0.75
DISPATCH_ALERT_BYTES = 1024 * 1024


@dataclass
class BrokerRow:
    broker: Broker
    status: Any | None  # admin_pb2.BrokerStatus
    error: str
    rate_in: float | None
    rate_out: float | None

    @property
    def up(self) -> bool:
        return self.status is not None

    @property
    def role(self) -> str:
        if self.status is None:
            return "-"
        broker_id = self.status.runtime.get("broker_id")
        if broker_id is None:
            return "-"
        return "master" if broker_id == "0" else f"slave (id {broker_id})"

    @property
    def alerts(self) -> list[str]:
        name = self.status.broker_name if self.status is not None else self.broker.endpoint
        if self.status is None:
            return [f"{self.broker.endpoint} is down: {self.error}"]
        found = []
        if not self.status.writable:
            reason = self.status.not_writable_reason or "no reason given"
            found.append(f"{name} is not writable: {reason}")
        if self.status.disk_used_ratio > DISK_ALERT_RATIO:
            found.append(f"{name}: disk {self.status.disk_used_ratio:.0%} used (over 75%)")
        if self.status.dispatch_behind_bytes > DISPATCH_ALERT_BYTES:
            behind = fmt_bytes(self.status.dispatch_behind_bytes)
            found.append(f"{name}: dispatch behind by {behind}")
        return found


async def broker_rows(request: Request) -> list[BrokerRow]:
    console = console_of(request)

    async def one(broker: Broker) -> BrokerRow:
        rate_in, rate_out = console.sampler.latest(broker.index)
        try:
            status = await broker.admin.broker_status()
        except WharfError as exc:
            return BrokerRow(broker, None, str(exc) or exc.code, None, None)
        return BrokerRow(broker, status, "", rate_in, rate_out)

    return list(await asyncio.gather(*(one(b) for b in console.pool.brokers)))


async def page(request: Request) -> Response:
    rows = await broker_rows(request)
    alerts = [alert for row in rows for alert in row.alerts]
    return console_of(request).page(request, "overview.html", rows=rows, alerts=alerts)


async def rates_json(request: Request) -> Response:
    console = console_of(request)
    return JSONResponse(
        {
            "interval_s": console.sampler.interval_s,
            "brokers": [
                {"endpoint": b.endpoint, "series": console.sampler.series(b.index)}
                for b in console.pool.brokers
            ],
        }
    )
