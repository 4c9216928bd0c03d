"""The campaign's nemeses: each a small class with a ``kind`` (the summary's row), ``inject``
and ``heal``. ``inject`` records a ``Fault`` in the history (its window ends at the heal) and
returns what it did; ``heal`` undoes it, whatever happened meanwhile. ``TABLE`` is what the
runner draws from (weights: how often).

A new nemesis is a class in a module of this folder, added to ``TABLE``."""

from __future__ import annotations

from tests.fault.campaign.nemeses.base import Context, Nemesis
from tests.fault.campaign.nemeses.kill import Kill
from tests.fault.campaign.nemeses.partition import (
    BrokersToNamesrvOneWay,
    IsolateEtcd,
    IsolateMaster,
    IsolateReplica,
    MasterToReplicaOneWay,
    SplitNamesrv,
)
from tests.fault.campaign.nemeses.pause import Pause
from tests.fault.campaign.nemeses.power import PowerCut

TABLE: list[tuple[type[Nemesis], int]] = [
    (IsolateMaster, 2),
    (IsolateReplica, 2),
    (MasterToReplicaOneWay, 1),
    (SplitNamesrv, 1),
    (BrokersToNamesrvOneWay, 1),
    (IsolateEtcd, 1),
    (Kill, 3),
    (Pause, 2),
    (PowerCut, 3),
]

__all__ = ["TABLE", "Context", "Nemesis"]
