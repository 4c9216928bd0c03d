"""The coordinator's WriteTxnMarkers (API 27, v0) to the masters of other broker groups: the
markers of a transaction's partitions they lead (``TxnMetadata.remote``), Kafka's way, so the
partition leader's code path is Kafka's (``handlers.write_txn_markers`` there).

Where: each partition's group (its brokerName) is looked up afresh in the topic's layout
(``KafkaEnv.layout``: the NameServers' routes), its master's advertised Kafka address, the
partition numbered as there; the pseudo-partition ``OFFSETS_TOPIC`` (a group's offsets
pending at its coordinator) goes to that group's master as the NameServers list it. How:
``link.py``'s connections (kept per peer, SASL PLAIN as the link account under ACL); a
failure returns the partitions not acknowledged unsent (the coordinator retries every second
until all are).

A cluster whose Kafka listeners are TLS-only is dialled over TLS (``link.py``).
"""

from __future__ import annotations

import logging

from wharf.broker.frontends.kafka.cluster import NO_LEADER
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.txn.link import link_pool
from wharf.broker.frontends.kafka.txn.state import OFFSETS_TOPIC

__all__ = ["MarkerSender"]

log = logging.getLogger("broker.kafka")

WRITE_TXN_MARKERS = 27


class MarkerSender:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env
        self.links = link_pool(env)

    async def send(
        self, broker_name: str, pid: int, epoch: int, commit: bool,
        partitions: list[tuple[str, int]],
    ) -> set[tuple[str, int]]:  # fmt: skip
        """The markers of ``partitions`` (topic, queue id of group ``broker_name``) written
        there: the partitions acknowledged (the others failed, to be retried)."""
        cluster = self.env.cluster
        if cluster is None:
            return set()
        numbered: dict[tuple[str, int], tuple[str, int]] = {}  # (topic, partition) -> part
        address: tuple[str, int] | None = None
        for topic, queue in partitions:
            if topic == OFFSETS_TOPIC:  # the group's pending offsets at its coordinator
                master = await cluster.master(broker_name)
                if master is not None:
                    address = (master.host, master.port)
                    numbered[(topic, queue)] = (topic, queue)
                continue
            spans = [s for s in (await self.env.layout(topic, fresh=True)).spans
                     if s.broker_name == broker_name]  # fmt: skip
            peer = cluster.peers.get(spans[0].leader) if spans else None
            if not spans or spans[0].leader == NO_LEADER or peer is None or queue >= spans[0].count:
                continue  # its master is gone: later
            address = (peer.host, peer.port)
            numbered[(topic, spans[0].first + queue)] = (topic, queue)
        if address is None or not numbered:
            return set()
        topics: dict[str, list[int]] = {}
        for topic, index in numbered:
            topics.setdefault(topic, []).append(index)
        body = {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
            "coordinator_epoch": 0,
            "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
        }]}  # fmt: skip
        try:
            reply = await self.links.get(*address).call(WRITE_TXN_MARKERS, 0, body)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            log.warning("kafka: transaction markers to %s (%s:%d): %r",
                        broker_name, *address, exc)  # fmt: skip
            return set()
        done: set[tuple[str, int]] = set()
        for marker in reply["markers"]:
            for t in marker["topics"]:
                for p in t["partitions"]:
                    part = numbered.get((t["name"], p["partition_index"]))
                    if part is not None and p["error_code"] == 0:
                        done.add(part)
                    elif part is not None:
                        log.info("kafka: transaction marker of %s partition %d at %s: error %d",
                                 t["name"], p["partition_index"], broker_name,
                                 p["error_code"])  # fmt: skip
        return done

    def close(self) -> None:
        self.links.close()
