"""GET_BROKER_RUNTIME_INFO's ``earliestMessageTimeStamp`` on a real store, empty and not:
Apache's DefaultMessageStore.getEarliestMessageTime, the store time of the commit log's first
record, -1 while there is none (mqadmin clusterList's "#Hour" is the hours since it). The
daemon's answer, with the version name, is in test_admin.py's ``test_runtime_info``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from wharf.broker.core.processor import CoreProcessor
from wharf.broker.frontends.remoting.admin import RemotingAdmin
from wharf.store import message_store
from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput, PutStatus

from tests.store.helpers import small_config


async def test_earliest_message_time_is_the_logs_first_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_store, "statvfs_used_ratio", lambda path: 0.5)
    store = MessageStore(small_config(tmp_path / "store"))
    await store.start()
    try:
        services = dict.fromkeys(
            ("send", "read", "pop", "retry", "transactions", "clients", "admin"), cast(Any, None)
        )  # the lookups need only the store
        tables = (cast(Any, None),) * 3  # topics, groups, offsets
        port = CoreProcessor(store, *tables, **services)
        admin = RemotingAdmin(cast(Any, SimpleNamespace(port=port)))
        assert admin.earliest_log_store_time(store.stats().commit_log_min_offset) == -1
        before_ms = int(time.time() * 1000)
        for body in (b"first", b"second"):
            put = await store.put("T", 0, [MessageInput(body, {}, born_host="127.0.0.1:1")])
            assert put.status is PutStatus.PUT_OK
            await asyncio.sleep(0.01)  # the second one's store time differs
        assert await store.wait_dispatched()
        earliest = admin.earliest_log_store_time(store.stats().commit_log_min_offset)
        first = store.look_message_by_offset(store.stats().commit_log_min_offset)
        assert first is not None and first.body == b"first"
        assert earliest == first.store_timestamp
        assert before_ms <= earliest <= time.time() * 1000
        # An offset inside a record (not a record start) is no record: -1, not an error.
        assert admin.earliest_log_store_time(first.commit_log_offset + 1) == -1
    finally:
        await store.shutdown()
