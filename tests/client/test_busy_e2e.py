"""A broker whose dispatch lags past ``maxDispatchLagBytes`` holds a send at most
``waitTimeMillsInSendQueue`` and then answers "broker busy" (nothing written) on every
protocol, and the SDK backs off and retries it: sent once the dispatch has room, with the
broker's words in the error when its deadline runs out first. Before (issue 33) the hold was
syncFlushTimeout (5 s), past the SDK's 3 s deadline: the SDK said DeadlineExceededError and the
broker wrote the send afterwards. The 4.x clients (subprocesses) fail the send at once with
the broker's words: Apache's C++ client after retrying SYSTEM_BUSY itself, ali-ons.

In process (``inproc_broker``, the real store), so that the dispatch can be stalled."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from wharf.broker.controller import BrokerController
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.broker.settings import load_settings
from wharf.client import Producer
from wharf.client.errors import DeadlineExceededError, ResourceExhaustedError
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.store.message_store import MessageStore

from tests.broker.remoting.test_server import Client as RemotingClient
from tests.broker.remoting.test_server import _send_fields
from tests.harness import REPO_ROOT
from tests.inproc import InProcBroker
from tests.store.helpers import msg

META = (("x-mq-client-id", "host@1@0@busy"), ("authorization", "MQv2-HMAC-SHA1 Credential=, x"))


class Stall:
    """The store's dispatch stopped (its limit held at 0) and more than its lag bound written."""

    def __init__(self, store: MessageStore) -> None:
        self.source = store.insides.reput_service.source
        self.limit = self.source.dispatch_limit
        self.source.dispatch_limit = lambda: 0  # type: ignore[method-assign]
        for _ in range(8):
            store.append("elsewhere", 0, [msg(b"x" * 1000)])  # append() never waits

    def end(self) -> None:
        self.source.dispatch_limit = self.limit  # type: ignore[method-assign]


@pytest.fixture
async def busy(tmp_path: Path) -> AsyncIterator[tuple[InProcBroker, Stall]]:
    settings = {
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "store_path_root_dir": str(tmp_path),
        "max_dispatch_lag_bytes": "4096",
        "wait_time_mills_in_send_queue": "200",
        "remoting_listen": "127.0.0.1:0",  # RocketMQ 4.x remoting too
        "kafka_listen": "off",
    }
    controller = BrokerController(load_settings(None, {}, settings))
    await controller.start()
    broker = InProcBroker(
        controller, grpc.aio.insecure_channel(f"127.0.0.1:{controller.grpc_port}")
    )
    store = controller.store
    assert isinstance(store, MessageStore)
    stall = Stall(store)
    try:
        yield broker, stall
    finally:
        stall.end()
        await broker.close()


def _endpoint(broker: InProcBroker) -> str:
    return f"127.0.0.1:{broker.controller.grpc_port}"


async def test_sdk_send_is_answered_busy_then_retried_once_the_dispatch_has_room(
    busy: tuple[InProcBroker, Stall],
) -> None:
    broker, stall = busy
    store = broker.controller.store
    written = store.stats().commit_log_max_offset
    async with Producer(_endpoint(broker), retry_times=0) as once:
        started = time.monotonic()
        with pytest.raises(ResourceExhaustedError, match="broker busy") as refused:
            await once.send("orders", b"refused")
        assert time.monotonic() - started < 2.0  # the broker's 200 ms hold, not 5 s
        assert refused.value.retriable and "waitTimeMillsInSendQueue" in str(refused.value)
        with pytest.raises(ResourceExhaustedError, match="broker busy"):
            await once.send_batch("orders", [b"a", b"b"])
    assert store.stats().commit_log_max_offset == written  # nothing of them stored

    async with Producer(_endpoint(broker), send_timeout=10.0, retry_times=30) as patient:
        sending = asyncio.create_task(patient.send("orders", b"retried"))
        await asyncio.sleep(0.6)  # refused at least twice meanwhile
        assert not sending.done()
        stall.end()
        result = await asyncio.wait_for(sending, 10)
    assert result.queue_offset == 0  # stored once, the first message of its queue
    assert store.stats().sends_refused_busy >= 4  # wharf_store_sends_refused_busy_total


async def test_sdk_deadline_names_the_busy_answer(busy: tuple[InProcBroker, Stall]) -> None:
    broker, _ = busy
    async with Producer(_endpoint(broker), send_timeout=1.0, retry_times=30) as producer:
        with pytest.raises(DeadlineExceededError, match="broker busy"):
            await producer.send("orders", b"late")


async def test_v2_send_is_answered_too_many_requests(busy: tuple[InProcBroker, Stall]) -> None:
    broker, _ = busy
    message = d.Message(body=b"v2")
    message.topic.name = "orders"
    message.system_properties.message_id = "01BUSY"
    message.system_properties.message_type = d.NORMAL
    message.system_properties.body_encoding = d.IDENTITY
    stub = service_pb2_grpc.MessagingServiceStub(broker.channel)
    sent = await stub.SendMessage(s.SendMessageRequest(messages=[message]), metadata=META)
    assert sent.status.code == d.Code.TOO_MANY_REQUESTS
    assert "broker busy" in sent.status.message


async def test_remoting_send_is_answered_system_busy(busy: tuple[InProcBroker, Stall]) -> None:
    """A 4.x client gets SYSTEM_BUSY (2), which its producers retry (retryResponseCodes)."""
    broker, _ = busy
    host, _, port = broker.controller.ready()["remoting"].rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        client = RemotingClient(reader, writer)
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("orders", 0), b"4.x")
        assert sent.code == ResponseCode.SYSTEM_BUSY and "broker busy" in sent.remark
    finally:
        writer.close()


RMQ4_PYTHON = REPO_ROOT / ".venv-rmq4" / "bin" / "python"
CPP_SCRIPT = REPO_ROOT / "tests" / "broker" / "remoting" / "cpp_client_script.py"


async def _cpp_send(broker: InProcBroker, home: Path, **args: object) -> dict[str, object]:
    """``cpp_client_script.py send`` against the in-process broker's remoting port (also its
    NameServer), awaited as a subprocess: the broker runs on this test's loop."""
    if not RMQ4_PYTHON.exists():
        pytest.skip("the RocketMQ 4.x C++ client's venv is missing: run `make rmq4-client`")
    await asyncio.to_thread(home.mkdir, exist_ok=True)  # the library logs to ~/logs/rocketmq-cpp
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    proc = await asyncio.create_subprocess_exec(
        str(RMQ4_PYTHON), str(CPP_SCRIPT), broker.controller.ready()["remoting"], "send",
        json.dumps(args), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"{out.decode()}\n{err.decode()}"
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def _cpp_logs_blocking(home: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in home.glob("logs/rocketmq-cpp/*"))


@pytest.mark.slow
async def test_the_cpp_4x_client_is_refused_busy_and_sends_once_the_dispatch_has_room(
    busy: tuple[InProcBroker, Stall], tmp_path: Path
) -> None:
    """Apache's 4.x C++ client, unchanged: each SYSTEM_BUSY answer (its log shows code 2 and
    the broker's words) is retried by the client itself, then the sync send fails at once (the
    library words that "No route info of this topic"), not at its 8 s time-out; nothing is
    stored; the same send once the dispatch resumes is stored once."""
    broker, stall = busy
    store = broker.controller.store
    written = store.stats().commit_log_max_offset
    home = tmp_path / "cpp"
    started = time.monotonic()
    refused = await _cpp_send(
        broker, home, group="busy", topic="orders", messages=[{"body": "refused"}],
        timeout_ms=8000,
    )  # fmt: skip
    assert refused["sent"] == [] and "ProducerSendSyncFailed" in str(refused["error"]), refused
    assert time.monotonic() - started < 6.0  # answered, not left to its 8 s time-out
    logs = await asyncio.to_thread(_cpp_logs_blocking, home)
    answers = [line for line in logs.splitlines() if "processSendResponse error" in line]
    assert len(answers) >= 2, logs[-3000:]  # the busy answer was retried
    assert all("broker busy" in line and "error code:2" in line for line in answers), answers
    assert store.stats().commit_log_max_offset == written
    stall.end()
    sent = await _cpp_send(
        broker, tmp_path / "cpp", group="busy", topic="orders", messages=[{"body": "after"}]
    )
    assert sent["error"] is None, sent
    assert [r["offset"] for r in sent["sent"]] == [0]  # type: ignore[union-attr, index]


NODE_DIR = REPO_ROOT / "tests" / "broker" / "remoting" / "node"


@pytest.mark.slow
async def test_the_node_4x_client_is_refused_busy_and_sends_once_the_dispatch_has_room(
    busy: tuple[InProcBroker, Stall], tmp_path: Path
) -> None:
    """ali-ons, unchanged: its send fails with an MQClientException carrying the broker's words
    (SYSTEM_BUSY), not a time-out; nothing is stored; the same send once the dispatch resumes
    is stored once."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        pytest.skip("ali-ons is not installed: `make test` installs it")
    broker, stall = busy
    store = broker.controller.store
    written = store.stats().commit_log_max_offset
    home = tmp_path / "node"
    await asyncio.to_thread(home.mkdir)

    async def send(body: str) -> tuple[dict[str, object], str]:
        args = {"group": "busy", "topic": "orders", "messages": [{"body": body}]}
        proc = await asyncio.create_subprocess_exec(
            node, str(NODE_DIR / "scenario.js"), broker.controller.ready()["remoting"], "send",
            json.dumps(args), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=NODE_DIR, env={**os.environ, "HOME": str(home)},
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        return dict(json.loads(out.decode().strip().splitlines()[-1])), err.decode()

    started = time.monotonic()
    refused, log = await send("refused")
    assert "broker busy" in str(refused["error"]), (refused, log[-3000:])
    assert time.monotonic() - started < 20.0
    assert store.stats().commit_log_max_offset == written
    stall.end()
    sent, log = await send("after")
    assert sent["error"] is None, (sent, log[-3000:])
    assert [r["queueOffset"] for r in sent["sent"]] == [0]  # type: ignore[union-attr, index]
