"""The in-process broker the ``inproc_broker`` fixture (``tests/conftest.py``) starts: a
``BrokerController`` in the test's event loop and a channel to it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from wharf.broker.controller import BrokerController
from wharf.broker.settings import load_settings


@dataclass
class InProcBroker:
    """A started in-process broker and a channel to its gRPC port."""

    controller: BrokerController
    channel: grpc.aio.Channel

    async def close(self) -> None:
        await self.channel.close(None)  # no grace: the broker stops next
        await self.controller.shutdown()


async def start_inproc(root: Path, store_factory: Any = None, **settings: str) -> InProcBroker:
    """A ``BrokerController`` on ephemeral ports with its store under ``root``; ``settings``
    (snake_case, as strings) over its defaults; ``store_factory`` the controller's (``None``:
    the real ``MessageStore``)."""
    overrides = {
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "store_path_root_dir": str(root),
        # Off unless a test asks: their defaults are fixed ports (10911, 9092).
        "remoting_listen": "off",
        "kafka_listen": "off",
        **settings,
    }
    controller = BrokerController(load_settings(None, {}, overrides), store_factory)
    await controller.start()
    return InProcBroker(controller, grpc.aio.insecure_channel(f"127.0.0.1:{controller.grpc_port}"))


InProcFactory = Callable[..., Awaitable[InProcBroker]]
