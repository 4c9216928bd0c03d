"""Nemeses for a Wharf cluster on a ``Network`` (tests/fault/netns.py): each fault is a
context manager that partitions, records a ``Fault`` window in the history, and heals on exit.

    nemesis = Nemesis(net, history)
    with nemesis.isolate_master(master, etcd=[etcd], replicas=[replica]):
        ...  # the master reaches neither etcd nor its replicas; clients still reach it
    with nemesis.isolate(replica): ...               # a replica reaches nothing at all
    with nemesis.isolate_etcd_member(e1): ...        # one etcd member reaches nothing
    with nemesis.isolate_etcd_member(e1, peers=[e2, e3]): ...  # cut from its peers only
    with nemesis.split(namesrvs, brokers): ...       # NameServers <-/-> brokers
    with nemesis.split(brokers, namesrvs, one_way=True): ...  # brokers -> NameServers only

The partition starts when the ``with`` block is entered and is healed when it ends, whatever
happened inside; the history's ``Fault`` op holds the window (``check`` lists it) and a kind
(the campaign's summary groups faults by it; ``isolate`` takes one: "replica isolated").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

from tests.fault.checker import History
from tests.fault.netns import Host, Network


class Nemesis:
    def __init__(self, network: Network, history: History | None = None) -> None:
        self.network = network
        self.history = history or History()

    @contextlib.contextmanager
    def _fault(self, what: str, start: Callable[[], None], kind: str) -> Iterator[None]:
        op = self.history.fault(what, kind)
        try:
            start()
            yield
        finally:
            self.network.heal()
            op.end = time.monotonic()

    def isolate_master(
        self, master: Host, etcd: Sequence[Host], replicas: Sequence[Host]
    ) -> contextlib.AbstractContextManager[None]:
        """The master loses etcd (its lease) and its replicas; clients and NameServers still
        reach it: the split brain its lease must fence."""
        return self._fault(
            f"master {master.name} cut from etcd and replicas",
            lambda: self.network.partition([master], [*etcd, *replicas]),
            "master cut from etcd and replicas",
        )

    def isolate(
        self, host: Host, kind: str = "host isolated"
    ) -> contextlib.AbstractContextManager[None]:
        """``host`` reaches nothing (a replica falling out of the sync-state set, ...)."""
        return self._fault(f"{host.name} isolated", lambda: self.network.isolate(host), kind)

    def isolate_etcd_member(
        self, member: Host, peers: Sequence[Host] = ()
    ) -> contextlib.AbstractContextManager[None]:
        """One member of an etcd cluster cut off: from everyone (no ``peers``), or from its
        ``peers`` only, brokers still reaching it (a minority member: it has no leader, so it
        can grant and refresh no lease, while the majority goes on)."""
        if peers:
            names = " ".join(p.name for p in peers)
            return self._fault(
                f"etcd {member.name} cut from its peers {names}",
                lambda: self.network.partition([member], peers),
                "etcd member cut from its peers",
            )
        return self._fault(
            f"etcd {member.name} isolated", lambda: self.network.isolate(member), "etcd isolated"
        )

    def split(
        self, a: Sequence[Host], b: Sequence[Host], one_way: bool = False
    ) -> contextlib.AbstractContextManager[None]:
        """``a`` and ``b`` cannot talk (``one_way``: packets from ``a`` to ``b`` dropped only),
        e.g. NameServers from brokers: registrations and route updates stop."""
        arrow = "-/->" if one_way else "<-/->"
        what = f"{' '.join(h.name for h in a)} {arrow} {' '.join(h.name for h in b)}"
        kind = "split one way" if one_way else "split"
        return self._fault(what, lambda: self.network.partition(a, b, one_way=one_way), kind)
