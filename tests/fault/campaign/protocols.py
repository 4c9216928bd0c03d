"""The campaign's load through Kafka and RocketMQ 4.x remoting, recorded in the same ``History``
as the wharf.v1 workload (``workload.py``), on the same topic, so the checker judges every
protocol's records together (a queue offset one protocol was told is another's would be a
conflicting offset):

- ``KafkaLoad``: an idempotent producer (confluent-kafka / librdkafka, ``acks=all``,
  ``enable.idempotence``) with ids ``k<n>``, acknowledged at (partition = queue id, offset) by
  its delivery report; an error report is ``unknown`` (maybe written: librdkafka retried it).
  A duplicate the idempotence should have stopped is the checker's "duplicated" (one id at two
  offsets of a queue). A consumer group (``fault-campaign-kafka``, subscribe, manual
  synchronous commits every ``COMMIT_EVERY_S``) recording its reads and commits. Both run in
  threads (librdkafka's calls block); every broker's Kafka port is a bootstrap address.
- ``RemotingLoad``: a RocketMQ 4.x producer and consumer over the suite's raw remoting client
  (``tests/broker/remoting/test_server.py``), talking to the replica the term monitor calls
  master: ``SEND_MESSAGE`` (ids ``r<n>``; ``ok`` only on SUCCESS, with its queue, offset and
  the replica that answered; anything else ``unknown``), ``PULL_MESSAGE`` and
  ``UPDATE_CONSUMER_OFFSET`` for group ``fault-campaign-rmq4`` (``Commit`` ops).

``observe_commits`` (after the heal) adds each group's committed offsets as ``observed``
commits: "offsets moved back" then covers what a fault took back from an acknowledged commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.store.codec.records import decode_record, read_total_size

from tests.broker.remoting.test_server import Client, _send_fields
from tests.fault.campaign.cluster import BROKER, Cluster, Process
from tests.fault.checker import OK, UNKNOWN, History
from tests.fault.power_campaign import body_of, id_of

KAFKA_GROUP = "fault-campaign-kafka"
RMQ4_GROUP = "fault-campaign-rmq4"
QUEUES = 2  # the campaign's topic (runner.py)
# Between two produce() calls: ~20 records/s, about one wharf.v1 sender's acknowledged rate
# under faults. At 0.01 s (69 acks/s, 4x wharf.v1's) the CI form's replica fell out of the
# sync-state set and never took over in its held failover (seed 36, 2 shared cores).
KAFKA_PAUSE_S = 0.05
COMMIT_EVERY_S = 0.5
CALL_TIMEOUT_S = 5.0
SUBSCRIPTION_FLAG = 4  # PullSysFlag: the request carries its subscription; no suspend


class KafkaLoad:
    def __init__(
        self, cluster: Cluster, history: History, topic: str, sizes: Callable[[], int],
        error: Callable[[BaseException | str], None],
    ) -> None:  # fmt: skip
        self.bootstrap = ",".join(p.daemon.kafka_endpoint for p in cluster.replicas)
        self.history, self.topic, self.sizes, self.error = history, topic, sizes, error
        self.done = threading.Event()
        self._threads = [
            # daemon: a run that raises must not be held open by librdkafka's retries
            threading.Thread(
                target=self._guard, args=(fn,), name=f"campaign-{fn.__name__}", daemon=True
            )
            for fn in (self._produce, self._consume)
        ]
        for thread in self._threads:
            thread.start()

    def _guard(self, fn: Callable[[], None]) -> None:
        while not self.done.is_set():
            try:
                fn()
            except Exception as exc:  # a fatal client error: a new client
                self.error(exc)
                self.done.wait(0.2)

    def _produce(self) -> None:
        from confluent_kafka import KafkaError, Producer

        fatal: list[str] = []

        def on_error(err: KafkaError) -> None:
            if err.fatal():  # e.g. the idempotent producer's sequence broken: start over
                fatal.append(str(err))

        # message.timeout.ms: librdkafka's default (5 min), past any outage of a run. A
        # message that times out voids the idempotence of the others in flight: librdkafka
        # then bumps the producer epoch and re-sends them with new sequences, a second copy
        # of any the broker had stored (its INTRODUCTION.md, "Message timeout
        # considerations"). At 20 s the campaign's outages of 20 s and more stored such
        # copies, a client's doing that no broker can tell from new records.
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 300000, "socket.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 1000, "error_cb": on_error,
        })  # fmt: skip
        seq = 0
        name = f"k{id(producer) % 100000:05d}"  # a new producer: new ids
        try:
            while not self.done.is_set() and not fatal:
                seq += 1
                ident = f"{name}-{seq:08d}"
                op = self.history.send_started(ident, ident)

                def delivered(err: Any, msg: Any, op: Any = op) -> None:
                    if err is None:
                        # No offset: librdkafka marks a request it had no answer to delivered
                        # once a later one of the partition succeeds (possibly persisted, then
                        # in sequence): acknowledged, position unknown (-1, as unplaced).
                        offset = msg.offset()
                        self.history.send_done(op, OK, broker=BROKER, queue=msg.partition(),
                                               offset=-1 if offset is None else offset)  # fmt: skip
                    else:
                        self.error(f"kafka produce: {err.name()}")
                        self.history.send_done(op, UNKNOWN, str(err))

                try:
                    producer.produce(self.topic, value=body_of(ident, self.sizes()),
                                     on_delivery=delivered)  # fmt: skip
                except BufferError:
                    self.history.send_done(op, UNKNOWN, "local queue full")
                producer.poll(KAFKA_PAUSE_S)
        finally:
            producer.flush(25)  # every record reported (ok, or unknown on its timeout)
            if fatal:
                self.error(f"kafka producer fatal: {fatal[0][:80]}")

    def _consume(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": KAFKA_GROUP,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
            "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000,
        })  # fmt: skip
        consumer.subscribe([self.topic])
        positions: dict[int, int] = {}
        last_commit = time.monotonic()
        try:
            while not self.done.is_set():
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    part, offset = msg.partition() or 0, msg.offset() or 0  # set on a record
                    ident = id_of(msg.value() or b"")[0] or f"?{offset}"
                    self.history.read(BROKER, part, offset, ident)
                    positions[part] = offset + 1
                elif msg is not None:
                    self.error(f"kafka fetch: {getattr(msg.error(), 'name', str)()}")
                if positions and time.monotonic() - last_commit >= COMMIT_EVERY_S:
                    last_commit = time.monotonic()
                    ops = {p: self.history.commit(KAFKA_GROUP, BROKER, p, o, status=UNKNOWN)
                           for p, o in positions.items()}  # fmt: skip
                    try:
                        answered = consumer.commit(
                            offsets=[TopicPartition(self.topic, p, o)
                                     for p, o in positions.items()],
                            asynchronous=False,
                        )  # fmt: skip
                    except KafkaException as exc:
                        self.error(f"kafka commit: {exc.args[0].name()}")
                        positions.clear()  # a rebalance: restart from what is committed
                        continue
                    for tp in answered or ():
                        if tp.error is None:
                            ops[tp.partition].status = OK
                    positions.clear()
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    async def stop(self) -> None:
        self.done.set()
        for thread in self._threads:
            await asyncio.to_thread(thread.join, 40)

    def committed(self) -> dict[int, int]:
        """The group's committed offsets (after the heal; -1 ones left out). Retried for up
        to 30 s: right after the heal the coordinator may still move (NOT_COORDINATOR)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        deadline = time.monotonic() + 30
        while True:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": KAFKA_GROUP,
                                 "enable.auto.commit": False})  # fmt: skip
            try:
                got = consumer.committed([TopicPartition(self.topic, p) for p in range(QUEUES)], 10)
                return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
            finally:
                consumer.close()


class RemotingLoad:
    def __init__(
        self, history: History, topic: str, sizes: Callable[[], int],
        master: Callable[[], Process], error: Callable[[BaseException | str], None],
        done: Callable[[], bool],
    ) -> None:  # fmt: skip
        self.history, self.topic, self.sizes, self.master = history, topic, sizes, master
        self.error, self.done = error, done
        self.seq = 0
        self.positions: dict[int, int] = {}
        self._tasks = [asyncio.create_task(self._loop(self._send_once)),
                       asyncio.create_task(self._loop(self._consume_once))]  # fmt: skip

    async def _loop(self, step: Callable[[Client, Process], Any]) -> None:
        while not self.done():
            process = self.master()
            if not process.alive or process.paused:
                await asyncio.sleep(0.1)
                continue
            writer = None
            try:
                host, _, port = process.daemon.remoting_endpoint.rpartition(":")
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    reader, writer = await asyncio.open_connection(host, int(port))
                client = Client(reader, writer)
                while not self.done() and self.master() is process:
                    async with asyncio.timeout(CALL_TIMEOUT_S):
                        await step(client, process)
            except Exception as exc:
                self.error(exc)
                await asyncio.sleep(0.1)
            finally:
                if writer is not None:
                    writer.close()

    async def _send_once(self, client: Client, process: Process) -> None:
        self.seq += 1
        ident = f"r{self.seq:08d}"
        op = self.history.send_started(ident, ident)
        queue = self.seq % QUEUES
        try:
            reply = await client.call(RequestCode.SEND_MESSAGE, _send_fields(self.topic, queue),
                                      body_of(ident, self.sizes()))  # fmt: skip
        except BaseException as exc:
            self.history.send_done(op, UNKNOWN, f"{type(exc).__name__}: {exc}")
            raise
        if reply.code == ResponseCode.SUCCESS:
            fields = reply.ext_fields
            self.history.send_done(op, OK, broker=BROKER, queue=int(fields["queueId"]),
                                   offset=int(fields["queueOffset"]),
                                   replica=process.name)  # fmt: skip
        else:
            self.error(f"remoting send: code {reply.code}")
            self.history.send_done(op, UNKNOWN, f"code {reply.code}: {reply.remark}")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.01)

    async def _consume_once(self, client: Client, process: Process) -> None:
        for queue in range(QUEUES):
            offset = self.positions.get(queue, 0)
            fields = {
                "consumerGroup": RMQ4_GROUP, "topic": self.topic, "queueId": queue,
                "queueOffset": offset, "maxMsgNums": 64, "sysFlag": SUBSCRIPTION_FLAG,
                "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                "subVersion": 0,
            }  # fmt: skip
            reply = await client.call(RequestCode.PULL_MESSAGE, fields)
            if reply.code != ResponseCode.SUCCESS:
                continue
            body, pos = reply.body, 0
            while pos < len(body):
                record = decode_record(body, pos)
                self.history.read(BROKER, queue, record.queue_offset,
                                  id_of(record.body)[0] or f"?{record.queue_offset}")  # fmt: skip
                pos += read_total_size(body, pos)
            next_offset = int(reply.ext_fields.get("nextBeginOffset", offset))
            self.positions[queue] = next_offset
            op = self.history.commit(RMQ4_GROUP, BROKER, queue, next_offset, status=UNKNOWN)
            update = {"consumerGroup": RMQ4_GROUP, "topic": self.topic, "queueId": queue,
                      "commitOffset": next_offset}  # fmt: skip
            if (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, update)).code == 0:
                op.status = OK
        await asyncio.sleep(0.05)

    async def stop(self) -> None:
        _, pending = await asyncio.wait(self._tasks, timeout=30)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def committed(self, process: Process) -> dict[int, int]:
        host, _, port = process.daemon.remoting_endpoint.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        out = {}
        try:
            client = Client(reader, writer)
            for queue in range(QUEUES):
                query = {"consumerGroup": RMQ4_GROUP, "topic": self.topic, "queueId": queue}
                reply = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, query)
                if reply.code == 0:
                    out[queue] = int(reply.ext_fields.get("offset", -1))
        finally:
            writer.close()
        return out


def observe_commits(history: History, group: str, committed: dict[int, int]) -> None:
    for queue, offset in committed.items():
        history.commit(group, BROKER, queue, offset, observed=True)


def involves_kafka(violation: str) -> bool:
    """A checker violation naming a Kafka producer's record (ids ``k<n>-<seq>``) or the Kafka
    group: Kafka's known findings are judged apart (tests/fault/README.md)."""
    return bool(re.search(r"\bk\d+-\d+", violation)) or KAFKA_GROUP in violation
