"""The campaign's workload, recorded in a ``History``: producers, a consumer, a term monitor.

- Producers through the NameServer (they follow failovers), one attempt per send
  (``retry_times=0``: a retry could write a message twice on its own), unique bodies of
  0.2-4 KiB (``power_campaign.body_of``: the id, then bytes derived from it). A send is ``ok``
  only on SEND_OK, with its queue, offset and the replica that acknowledged it (the store
  host of its offset message id); ``unknown`` on any error (maybe written).
- A consumer pulling every queue and committing what it read (``Commit`` ops, ``unknown``
  until the broker answered); beside it, readers through the remoting and v2 protocols
  (``readers.py``), recording reads only.
- The same topic through Kafka (an idempotent ``acks=all`` producer and a consumer group) and
  RocketMQ 4.x remoting (a producer and a consumer committing): ``protocols.py``.
- A term monitor asking each replica every 100 ms for its role and term (``Term`` ops): what
  the checker's "two masters" rule judges the acknowledgements against, and the replica
  nemeses target as master (``master()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

from tests.fault.campaign.cluster import BROKER, Cluster, Process
from tests.fault.campaign.protocols import KafkaLoad, RemotingLoad
from tests.fault.campaign.readers import RemotingReader, V2Reader
from tests.fault.checker import OK, UNKNOWN, History, Read
from tests.fault.power_campaign import body_of, id_of

TOPIC = "FaultCampaign"
GROUP = "fault-campaign-live"
MONITOR_PERIOD_S = 0.1


class Workload:
    def __init__(
        self, cluster: Cluster, history: History, rng: random.Random, producers: int = 2,
        senders: int = 2, pause_s: float = 0.01,
    ) -> None:  # fmt: skip
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.namesrv = cluster.processes["ns"].daemon.endpoint
        self.pause_s = pause_s
        self.done = False
        self.seq = 0
        self.errors: dict[str, int] = {}
        self.terms: dict[str, int] = {}  # replica name -> last term it reported as master
        self._by_address = {p.host.address: p for p in cluster.replicas}
        self._tasks = [asyncio.create_task(self._producer(n, senders)) for n in range(producers)]
        self._tasks.append(asyncio.create_task(self._consumer()))
        # The same records read through RocketMQ 4.x remoting and RocketMQ 5's v2 pulls.
        for reader in (RemotingReader, V2Reader):
            run = reader(TOPIC, f"{GROUP}-{reader.name}", history).run
            self._tasks.append(
                asyncio.create_task(run(cluster.replicas, lambda: self.done, self._error))
            )
        self._tasks += [asyncio.create_task(self._monitor(p)) for p in cluster.replicas]
        # Bodies of the same sizes; the generator is drawn from on the loop only (the Kafka
        # threads take a size from their own, so the draws stay seeded).
        kafka_rng = random.Random(rng.random())
        self.kafka = KafkaLoad(cluster, history, TOPIC, lambda: kafka_rng.randint(200, 4096),
                               self._error)  # fmt: skip
        self.remoting = RemotingLoad(history, TOPIC, lambda: rng.randint(200, 4096),
                                     self.master, self._error, lambda: self.done)  # fmt: skip

    def master(self) -> Process:
        """The replica that reported the highest term (a1 before anyone did)."""
        if not self.terms:
            return self.cluster.replicas[0]
        name = max(self.terms, key=lambda n: self.terms[n])
        return self.cluster.processes[name]

    def _error(self, exc: BaseException | str) -> None:
        name = exc if isinstance(exc, str) else type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1

    async def _producer(self, n: int, senders: int) -> None:
        from wharf.client import Producer

        while not self.done:
            producer = Producer(namesrv=self.namesrv, retry_times=0, send_timeout=3.0)
            try:
                await producer.start()
                await asyncio.gather(*(self._sender(producer, n) for _ in range(senders)))
            except Exception as exc:
                self._error(exc)
                await asyncio.sleep(0.2)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.close(), 5)

    async def _sender(self, producer: Any, n: int) -> None:
        from wharf.client.message import SendStatus
        from wharf.store.codec.ids import decode_offset_msg_id

        while not self.done:
            self.seq += 1
            id = f"p{n}-{self.seq:08d}"
            op = self.history.send_started(id, id)
            try:
                result = await producer.send(TOPIC, body_of(id, self.rng.randint(200, 4096)))
            except Exception as exc:  # maybe written
                self._error(exc)
                self.history.send_done(op, UNKNOWN, f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                host = decode_offset_msg_id(result.offset_msg_id)[0].rpartition(":")[0]
                replica = self._by_address[host].name if host in self._by_address else host
                self.history.send_done(op, OK, broker=BROKER, queue=result.queue_id,
                                       offset=result.queue_offset, replica=replica)  # fmt: skip
            else:
                self.history.send_done(op, UNKNOWN, result.status.name)
            await asyncio.sleep(self.pause_s)

    async def _consumer(self) -> None:
        from wharf.client import PullConsumer

        positions: dict[Any, int] = {}
        while not self.done:
            try:
                async with PullConsumer(namesrv=self.namesrv, group=GROUP) as consumer:
                    while not self.done:
                        if not positions:
                            positions = dict.fromkeys(await consumer.queues(TOPIC), 0)
                        for queue, offset in positions.items():
                            result = await asyncio.wait_for(
                                consumer.pull(queue, offset, max_messages=64), 5
                            )
                            for m in result.messages:
                                self.history.read(BROKER, queue.queue_id, m.queue_offset,
                                                  id_of(m.body)[0] or f"?{m.queue_offset}")  # fmt: skip
                            if result.messages:
                                positions[queue] = result.next_begin_offset
                                op = self.history.commit(GROUP, BROKER, queue.queue_id,
                                                         positions[queue], status=UNKNOWN)  # fmt: skip
                                await asyncio.wait_for(consumer.commit(queue, positions[queue]), 5)
                                op.status = OK
                        await asyncio.sleep(0.05)
            except Exception as exc:
                self._error(exc)
                await asyncio.sleep(0.2)

    async def _monitor(self, replica: Process) -> None:
        from wharf.client import Admin

        while not self.done:
            try:
                async with Admin(replica.daemon.endpoint) as admin:
                    while not self.done:
                        status = await asyncio.wait_for(admin.broker_status(), 1)
                        rep = status.replication
                        if "MASTER" in rep.role.upper() and rep.epoch > 0:
                            self.history.term(BROKER, replica.name, rep.epoch)
                            self.terms[replica.name] = rep.epoch
                        await asyncio.sleep(MONITOR_PERIOD_S)
            except Exception:  # down, paused or cut off: ask again
                await asyncio.sleep(MONITOR_PERIOD_S)

    async def stop(self) -> None:
        self.done = True
        await asyncio.gather(self.kafka.stop(), self.remoting.stop())
        _, pending = await asyncio.wait(self._tasks, timeout=30)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def read_all(namesrv: str, history: History) -> list[Read]:
    """Every message of every queue from the current master, and the group's committed offsets
    (``observed`` commits in ``history``)."""
    from wharf.client import PullConsumer

    out: list[Read] = []
    async with PullConsumer(namesrv=namesrv, group=GROUP) as consumer:
        for queue in await consumer.queues(TOPIC):
            offset = 0
            while True:
                result = await consumer.pull(queue, offset, max_messages=500, max_wait_ms=0)
                if not result.messages:
                    break
                out += [Read(BROKER, queue.queue_id, m.queue_offset, id_of(m.body)[0] or "?")
                        for m in result.messages]  # fmt: skip
                offset = result.next_begin_offset
            committed = await consumer.committed(queue)
            history.commit(GROUP, BROKER, queue.queue_id, committed, observed=True)
    return out


async def read_replica(endpoint: str) -> dict[tuple[int, int], str]:
    """(queue id, offset) -> id of every message one replica holds (its own copy)."""
    from wharf.client import PullConsumer

    held: dict[tuple[int, int], str] = {}
    async with PullConsumer(endpoint, "fault-campaign-copy") as consumer:
        for queue in await consumer.queues(TOPIC):
            _, high = await consumer.bounds(queue)
            offset = 0
            while offset < high:
                result = await consumer.pull(queue, offset, max_messages=500, max_wait_ms=0)
                for m in result.messages:
                    held[(queue.queue_id, m.queue_offset)] = id_of(m.body)[0] or "?"
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
    return held


async def copies_differing(master: str, replica: str, within_s: float = 60.0) -> list[str]:
    """Once the replica has every queue up to the master's end (or ``within_s`` passed): the
    queue offsets whose message differs between the two copies (missing on one included)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        ours, theirs = await read_replica(master), await read_replica(replica)
        if ours == theirs or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.5)
    return [f"{BROKER}/{q}@{o}: master {ours.get((q, o))}, replica {theirs.get((q, o))}"
            for q, o in sorted(ours.keys() | theirs.keys())
            if ours.get((q, o)) != theirs.get((q, o))]  # fmt: skip
