"""Blocking wrappers for scripts: the asyncio clients run on a private event-loop thread.

    from wharf.client.sync import Producer
    with Producer("127.0.0.1:8081") as producer:
        print(producer.send("orders", b"hello").msg_id)

Every public coroutine method of the wrapped client becomes a plain blocking method.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

from wharf.client.admin import Admin as _AsyncAdmin
from wharf.client.consumer.pull import PullConsumer as _AsyncPullConsumer
from wharf.client.consumer.push import PushConsumer as _AsyncPushConsumer
from wharf.client.producer import Producer as _AsyncProducer

C = TypeVar("C")
T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, daemon=True, name="wharf-sync"
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class _SyncClient(Generic[C]):
    _async_cls: type

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._runner = _LoopThread()

        async def build() -> C:
            return self._async_cls(*args, **kwargs)  # type: ignore[no-any-return]

        # Built on the loop thread: asyncio primitives bind to the loop that runs them.
        self._client: C = self._runner.run(build())
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._runner.run(self._client.start())  # type: ignore[attr-defined]
            self._started = True

    def close(self) -> None:
        try:
            if self._started:
                self._runner.run(self._client.close())  # type: ignore[attr-defined]
        finally:
            self._started = False
            self._runner.stop()

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(attr(*args, **kwargs))

        return blocking


class Producer(_SyncClient[_AsyncProducer]):
    """Blocking :class:`wharf.client.producer.Producer` (``send``, ``send_batch``, ``send_oneway``)."""

    _async_cls = _AsyncProducer


class PullConsumer(_SyncClient[_AsyncPullConsumer]):
    _async_cls = _AsyncPullConsumer


class Admin(_SyncClient[_AsyncAdmin]):
    _async_cls = _AsyncAdmin


class PushConsumer(_SyncClient[_AsyncPushConsumer]):
    """Blocking start/close around :class:`wharf.client.consumer.push.PushConsumer`; the handler
    (an async callable) runs on the private loop thread."""

    _async_cls = _AsyncPushConsumer
