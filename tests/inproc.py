"""The in-process broker the ``inproc_broker`` fixture (``tests/conftest.py``) starts: a
``BrokerController`` in the test's event loop and a channel to it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from wharf.broker.controller import BrokerController


@dataclass
class InProcBroker:
    """A started in-process broker and a channel to its gRPC port."""

    controller: BrokerController
    channel: grpc.aio.Channel


InProcFactory = Callable[..., Awaitable[InProcBroker]]
