"""The raw remoting client every module here talks through: ``client`` is one connection to
the module's own ``broker`` fixture (a daemon with ``--remoting-listen``), closed after the
test. ``test_transactions.py`` overrides it with its ``TxClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.broker.remoting.test_server import Client
from tests.harness import BrokerProcess


@pytest.fixture
async def client(broker: BrokerProcess) -> AsyncIterator[Client]:
    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    yield Client(reader, writer)
    writer.close()
