"""RouteWatch and the route caches that follow it, with a fake NameServer client: pushed
changes call back with the topic's version, a broken watch is retried on the next NameServer
and reported unhealthy, and ClusterSender keeps a route while the watch is healthy (no TTL),
drops it on a change of version, and falls back to its TTL while the watch is broken."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from wharf.client.cluster import ClusterSender
from wharf.client.namesrv import TopicRoute
from wharf.client.route_watch import RouteWatch
from wharf.v1 import namesrv_pb2


class _Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


class _Call:
    def __init__(self, changes: list[tuple[str, int]], then_fail: bool) -> None:
        self._changes = changes
        self._fail = then_fail

    def cancel(self) -> None:
        pass

    def __aiter__(self) -> Any:
        return self._gen()

    async def _gen(self) -> Any:
        for topic, version in self._changes:
            yield namesrv_pb2.RouteChange(topic=topic, version=version)
        if self._fail:
            raise _Unavailable()
        await asyncio.Event().wait()  # open until cancelled


class _FakeNames:
    def __init__(self, calls: list[_Call]) -> None:
        self.calls = calls
        self.opened: list[list[str]] = []
        self.failed: list[str] = []

    def watch(self, topics: list[str]) -> tuple[str, Any]:
        self.opened.append(topics)
        return f"ns{len(self.opened)}", self.calls.pop(0) if self.calls else _Call([], True)

    def watch_failed(self, address: str) -> None:
        self.failed.append(address)


async def test_changes_call_back_and_a_broken_watch_is_retried_unhealthy() -> None:
    seen: list[tuple[str, int]] = []
    names = _FakeNames([_Call([("a", 3), ("a", 4)], then_fail=True)])
    watch = RouteWatch(names, lambda t, v: seen.append((t, v)), retry_s=0.01)  # type: ignore[arg-type]
    watch.add(["a"])
    watch.add(["a"])  # nothing new: no reopening
    await asyncio.sleep(0.1)
    assert seen == [("a", 3), ("a", 4)]
    assert not watch.healthy  # it broke and every retry fails
    assert len(names.failed) >= 3 and names.failed[:2] == ["ns1", "ns2"]  # next NameServer
    await watch.close()


async def test_a_new_topic_reopens_the_stream_with_it() -> None:
    names = _FakeNames([_Call([("a", 1)], False), _Call([("a", 1), ("b", 2)], False)])
    seen: list[tuple[str, int]] = []
    watch = RouteWatch(names, lambda t, v: seen.append((t, v)))  # type: ignore[arg-type]
    watch.add(["a"])
    await asyncio.sleep(0.02)
    assert watch.healthy
    watch.add(["b"])
    await asyncio.sleep(0.02)
    assert names.opened == [["a"], ["a", "b"]] and seen[-1] == ("b", 2) and watch.healthy
    await watch.close()
    assert not watch.healthy


async def test_the_sender_keeps_routes_while_watched_and_polls_while_the_watch_is_broken() -> None:
    sender: ClusterSender[object] = ClusterSender("127.0.0.1:1", lambda a: object(), 3.0, 2, 0.0)
    versions = iter(range(1, 100))
    queried: list[int] = []

    async def query_route(topic: str) -> TopicRoute:
        version = next(versions)
        queried.append(version)
        return TopicRoute(topic, {}, {}, version)

    sender.namesrv.query_route = query_route  # type: ignore[method-assign]
    sender.watch.add = lambda topics: None  # type: ignore[method-assign]
    sender.watch.healthy = True
    await sender.route("t")
    await sender.route("t")  # route_ttl_s is 0, but the watch is healthy: cached
    assert queried == [1]
    sender._route_changed("t", 1)  # the stream's opening message: same version, kept
    await sender.route("t")
    assert queried == [1]
    sender._route_changed("t", 7)  # pushed change
    await sender.route("t")
    assert queried == [1, 2]
    sender.watch.healthy = False  # broken: the TTL (0 s) applies again
    await asyncio.sleep(0.01)
    await sender.route("t")
    assert queried == [1, 2, 3]
    await sender.namesrv.close()


async def test_pull_queues_forget_master_addresses_when_the_route_moves() -> None:
    from wharf.client.cluster import ClusterQueues
    from wharf.client.message import MessageQueue
    from wharf.client.namesrv import BrokerGroup

    queues: ClusterQueues[str] = ClusterQueues("127.0.0.1:1", lambda address: address)
    masters = iter(["10.0.0.1:8081", "10.0.0.2:8081"])

    async def query_route(topic: str) -> TopicRoute:
        master = next(masters)
        data = namesrv_pb2.QueueData(broker_name="a", read_queue_nums=1, write_queue_nums=1, perm=6)
        return TopicRoute(topic, {"a": data}, {"a": BrokerGroup("C", "a", {0: master})}, 5)

    class _Started:
        def __init__(self, address: str) -> None:
            self.address = address

        async def start(self) -> None:
            pass

    queues._clients._make = _Started  # type: ignore[assignment]
    queues.namesrv.query_route = query_route  # type: ignore[method-assign]
    queues.watch.add = lambda topics: None  # type: ignore[method-assign]
    found = await queues.queues("t")
    assert found == [MessageQueue("t", 0, "a")]
    client, _ = await queues.client(found[0])
    assert client.address == "10.0.0.1:8081"  # type: ignore[attr-defined]
    queues._route_changed("t", 5)  # same version (a stream's opening message): kept
    assert (await queues.client(found[0]))[0].address == "10.0.0.1:8081"  # type: ignore[attr-defined]
    queues._route_changed("t", 6)  # the route moved: the master is looked up again
    assert (await queues.client(found[0]))[0].address == "10.0.0.2:8081"  # type: ignore[attr-defined]
    await queues.namesrv.close()
