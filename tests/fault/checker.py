"""A checker over a recorded history of a fault test: what clients were told, against what a
full read of every queue returned once the faults were healed.

    history = History()
    op = history.send_started(body_id, body)          # before the call
    history.send_done(op, "ok", broker="broker-a", queue=1, offset=42)   # or "fail"/"unknown"
    history.read("broker-a", 1, 42, body_id)          # a consumer saw it during the run
    history.commit("g", "broker-a", 1, 43)            # a consumer group committed offset 43
    report = check(history.ops, final_reads)          # final_reads: list[Read] of every queue
    assert report.ok, report.table()

Operations are dataclasses (``Send``, ``Read``, ``Commit``, ``Fault``) or dicts with their
fields and a ``"type"`` key (``op_from_dict``). A send's status: ``ok`` = acknowledged, ``fail``
= definitely not written (the client was told so), ``unknown`` = maybe written (a timeout).
A queue is ``(broker, queue id)``; a message is named by its unique ``id`` (a unique body).

What ``check`` finds (each a list of violations in the report):

- **lost**: an acknowledged send whose id no final read holds;
- **misplaced**: an acknowledged send read at another queue or offset than it was told;
- **duplicated**: one id at two different offsets of the same queue (final reads);
- **conflicting offsets**: one queue offset holding two different ids, anywhere in the history
  (acknowledged positions, reads during the run, final reads): e.g. a read of a message a
  failover truncated, whose offset then got another message;
- **offsets moved back**: a committed offset (a ``Commit``: a commit a client made, or an
  ``observed`` one, the broker's answer to a query) lower than an earlier acknowledged one
  of the same group and queue;
- **two masters**: two replicas of a group reporting the same term (``Term``: what a monitor
  asking each replica heard), or a send acknowledged by a replica (``Send.replica``) after
  another replica had acknowledged one in a higher term than the first can have held then.

``unavailable_s`` is the time the clients could not write: the sum of the gaps between two
consecutive acknowledgements (or the first send and the first acknowledgement) that hold at
least one failed or unknown send.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK, FAIL, UNKNOWN = "ok", "fail", "unknown"


@dataclass
class Send:
    id: str
    body: str = ""
    status: str = UNKNOWN
    broker: str = ""
    queue: int = -1
    offset: int = -1
    start: float = 0.0
    end: float = 0.0
    error: str = ""
    replica: str = ""  # who acknowledged it (the store host of its offset message id), if known


@dataclass
class Read:
    broker: str
    queue: int
    offset: int
    id: str
    time: float = 0.0


@dataclass
class Commit:
    group: str
    broker: str
    queue: int
    offset: int
    status: str = OK  # ok: acknowledged; fail / unknown: not known to have happened
    observed: bool = False  # the offset a query returned, not one the client wrote
    time: float = 0.0


@dataclass
class Fault:
    """A nemesis window (for the report; not checked)."""

    what: str
    start: float
    end: float = 0.0
    kind: str = ""  # the nemesis kind, for the per-kind summary of a campaign


@dataclass
class Term:
    """A replica of ``broker`` answered, at ``time``, that it was master of term ``epoch``
    (``epoch`` 0: it was not master)."""

    broker: str
    replica: str
    epoch: int
    time: float = 0.0


Op = Send | Read | Commit | Fault | Term
TYPES: dict[str, type] = {
    "send": Send, "read": Read, "commit": Commit, "fault": Fault, "term": Term
}  # fmt: skip


def op_from_dict(d: dict[str, Any]) -> Op:
    d = dict(d)
    return TYPES[d.pop("type")](**d)  # type: ignore[no-any-return]


def op_to_dict(op: Op) -> dict[str, Any]:
    name = {v: k for k, v in TYPES.items()}[type(op)]
    return {"type": name, **dataclasses.asdict(op)}


class History:
    """Operations in the order they were recorded (one asyncio loop, or under the GIL)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def send_started(self, id: str, body: str = "") -> Send:
        op = Send(id, body, start=time.monotonic())
        self.ops.append(op)
        return op

    def send_done(self, op: Send, status: str, error: str = "", **where: Any) -> Send:
        op.status, op.error, op.end = status, error, time.monotonic()
        for key, value in where.items():
            setattr(op, key, value)
        return op

    def read(self, broker: str, queue: int, offset: int, id: str) -> Read:
        op = Read(broker, queue, offset, id, time.monotonic())
        self.ops.append(op)
        return op

    def commit(self, group: str, broker: str, queue: int, offset: int, **kw: Any) -> Commit:
        op = Commit(group, broker, queue, offset, time=time.monotonic(), **kw)
        self.ops.append(op)
        return op

    def fault(self, what: str, kind: str = "") -> Fault:
        op = Fault(what, time.monotonic(), kind=kind)
        self.ops.append(op)
        return op

    def term(self, broker: str, replica: str, epoch: int) -> Term:
        op = Term(broker, replica, epoch, time.monotonic())
        self.ops.append(op)
        return op

    def dump(self, path: Path) -> None:
        """JSON lines, one operation each (``load`` reads them back)."""
        path.write_text("".join(json.dumps(op_to_dict(op)) + "\n" for op in self.ops))

    @staticmethod
    def load(path: Path) -> list[Op]:
        return [op_from_dict(json.loads(line)) for line in path.read_text().splitlines() if line]


@dataclass
class Report:
    operations: int = 0
    sends: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    unknown_written: int = 0  # unknown sends found in the final reads
    failed_written: int = 0  # sends the client was told failed, found in the final reads
    read: int = 0  # messages in the final reads
    unavailable_s: float = 0.0
    faults: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    conflicting_offsets: list[str] = field(default_factory=list)
    offsets_moved_back: list[str] = field(default_factory=list)
    two_masters: list[str] = field(default_factory=list)

    VIOLATIONS = ("lost", "misplaced", "duplicated", "conflicting_offsets", "offsets_moved_back",
                  "two_masters")  # fmt: skip

    @property
    def ok(self) -> bool:
        return not any(getattr(self, name) for name in self.VIOLATIONS)

    def table(self, examples: int = 5) -> str:
        rows = [
            ("operations", self.operations),
            ("sends", self.sends),
            ("acknowledged", self.acknowledged),
            ("failed", f"{self.failed} ({self.failed_written} written anyway)"),
            ("unknown", f"{self.unknown} ({self.unknown_written} written)"),
            ("read after heal", self.read),
            ("unavailable", f"{self.unavailable_s:.2f} s"),
            *((name.replace("_", " "), len(getattr(self, name))) for name in self.VIOLATIONS),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        lines += [f"fault: {f}" for f in self.faults]
        for name in self.VIOLATIONS:
            found = getattr(self, name)
            lines += [f"{name}: {v}" for v in found[:examples]]
            if len(found) > examples:
                lines.append(f"{name}: ... {len(found) - examples} more")
        return "\n".join(lines)


def check(
    history: Sequence[Op | dict[str, Any]], final_reads: Iterable[Read | dict[str, Any]]
) -> Report:
    ops = [op_from_dict(op) if isinstance(op, dict) else op for op in history]
    final = [op_from_dict({"type": "read", **r}) if isinstance(r, dict) else r for r in final_reads]
    sends = [op for op in ops if isinstance(op, Send)]
    report = Report(operations=len(ops), sends=len(sends), read=len(final))
    report.acknowledged = sum(s.status == OK for s in sends)
    report.failed = sum(s.status == FAIL for s in sends)
    report.unknown = sum(s.status == UNKNOWN for s in sends)
    report.faults = [f"{f.what} ({f.end - f.start:.1f} s)" for f in ops if isinstance(f, Fault)]

    # Where the final reads put each id, per queue.
    places: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for r in final:
        places[r.id].add((r.broker, r.queue, r.offset))
    for s in sends:
        if s.status == OK:
            if s.id not in places:
                report.lost.append(f"{s.id}: acknowledged at {s.broker}/{s.queue}@{s.offset}, "
                                   "not read after heal")  # fmt: skip
            elif s.offset >= 0 and (s.broker, s.queue, s.offset) not in places[s.id]:
                report.misplaced.append(f"{s.id}: acknowledged at {s.broker}/{s.queue}@{s.offset}, "
                                        f"read at {sorted(places[s.id])}")  # fmt: skip
        elif s.status == UNKNOWN and s.id in places:
            report.unknown_written += 1
        elif s.status == FAIL and s.id in places:
            report.failed_written += 1
    for id, where in places.items():
        by_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
        for broker, queue, offset in where:
            by_queue[(broker, queue)].append(offset)
        for (broker, queue), offsets in by_queue.items():
            if len(offsets) > 1:
                report.duplicated.append(f"{id}: at {broker}/{queue} offsets {sorted(offsets)}")

    # Every claim about what a queue offset holds: acknowledgements, reads, final reads.
    holders: dict[tuple[str, int, int], dict[str, list[str]]] = defaultdict(dict)
    claims = [(s.broker, s.queue, s.offset, s.id, "acknowledged") for s in sends
              if s.status == OK and s.offset >= 0]  # fmt: skip
    claims += [(r.broker, r.queue, r.offset, r.id, "read") for r in ops if isinstance(r, Read)]
    claims += [(r.broker, r.queue, r.offset, r.id, "final read") for r in final]
    for broker, queue, offset, id, how in claims:
        holders[(broker, queue, offset)].setdefault(id, []).append(how)
    for (broker, queue, offset), ids in sorted(holders.items()):
        if len(ids) > 1:
            said = "; ".join(f"{id} ({', '.join(sorted(set(how)))})" for id, how in ids.items())
            report.conflicting_offsets.append(f"{broker}/{queue}@{offset}: {said}")

    # Committed offsets: an acknowledged commit is a floor for every later one (and query).
    floor: dict[tuple[str, str, int], tuple[int, float]] = {}
    commits = sorted((c for c in ops if isinstance(c, Commit)), key=lambda c: c.time)
    for c in commits:
        key = (c.group, c.broker, c.queue)
        if c.status != OK:
            continue
        if key in floor and c.offset < floor[key][0]:
            how = "read back as" if c.observed else "committed"
            report.offsets_moved_back.append(
                f"{c.group} {c.broker}/{c.queue}: {how} {c.offset} after {floor[key][0]} "
                f"was acknowledged ({c.time - floor[key][1]:.2f} s earlier)"
            )
        elif not c.observed and (key not in floor or c.offset > floor[key][0]):
            floor[key] = (c.offset, c.time)

    report.two_masters = _two_masters(sends, [t for t in ops if isinstance(t, Term)])
    report.unavailable_s = sum(hi - lo for lo, hi in unavailable_gaps(sends))
    return report


def unavailable_gaps(sends: Sequence[Send]) -> list[tuple[float, float]]:
    """The gaps between consecutive acknowledgements (or the first send and the first one) in
    which a failed or unknown send started: the times the clients could not write."""
    if not sends:
        return []
    acks = sorted(s.end for s in sends if s.status == OK)
    bad = sorted(s.start for s in sends if s.status != OK)
    edges = [min(s.start for s in sends), *acks]
    if not acks:  # nothing ever acknowledged: unavailable throughout
        return [(edges[0], max(s.end for s in sends))]
    gaps = []
    for lo, hi in itertools.pairwise(edges):
        i = bisect.bisect_left(bad, lo)
        if i < len(bad) and bad[i] < hi:  # a failed or unknown send started in [lo, hi)
            gaps.append((lo, hi))
    if any(t >= acks[-1] for t in bad):  # failing until the end
        gaps.append((acks[-1], max(s.end for s in sends)))
    return gaps


def _two_masters(sends: Sequence[Send], terms: Sequence[Term]) -> list[str]:
    """Two masters of one group acknowledging at once, from the terms each replica reported.

    A replica's term only grows (every election takes a new, higher one), so a ``Term``
    observation of replica X before a send started bounds X's term at the acknowledgement from
    below, and the first one after it acknowledged bounds it from above. Violations: two
    replicas reporting the same term; or a send acknowledged by X that started after another
    replica Y had acknowledged one in a term higher than any X can have held at that moment
    (the deposed X still acknowledging once the new master did)."""
    seen: dict[tuple[str, int], set[str]] = defaultdict(set)
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    epochs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for t in sorted(terms, key=lambda t: t.time):
        if t.epoch > 0:
            seen[(t.broker, t.epoch)].add(t.replica)
            times[(t.broker, t.replica)].append(t.time)
            epochs[(t.broker, t.replica)].append(t.epoch)
    found = [f"{broker}: replicas {sorted(replicas)} all master of term {epoch}"
             for (broker, epoch), replicas in sorted(seen.items()) if len(replicas) > 1]  # fmt: skip

    def lower(key: tuple[str, str], at: float) -> int:  # the last term reported before ``at``
        i = bisect.bisect_right(times[key], at)
        return epochs[key][i - 1] if i else 0

    def upper(key: tuple[str, str], at: float) -> float:
        """The first term reported after ``at``; past the last report, the last term (a new
        one takes an election of seconds, in which the monitor asks many times)."""
        i = bisect.bisect_left(times[key], at)
        if i < len(epochs[key]):
            return epochs[key][i]
        return epochs[key][-1] if epochs[key] else float("inf")  # never reported: unknown

    # Per replica, the acknowledgements in the order they ended, with the running maximum of
    # their lower bounds: the highest term known to have acknowledged by then.
    acked: dict[tuple[str, str], tuple[list[float], list[tuple[int, Send]]]] = {}
    for s in sorted((s for s in sends if s.status == OK and s.replica), key=lambda s: s.end):
        key = (s.broker, s.replica)
        ends, best = acked.setdefault(key, ([], []))
        term = lower(key, s.start)
        ends.append(s.end)
        best.append(max(best[-1], (term, s), key=lambda b: b[0]) if best else (term, s))
    for s in sends:
        if s.status != OK or not s.replica:
            continue
        mine = upper((s.broker, s.replica), s.end)
        for (broker, replica), (ends, best) in acked.items():
            if broker != s.broker or replica == s.replica:
                continue
            i = bisect.bisect_left(ends, s.start)  # acknowledged before ``s`` started
            if i and best[i - 1][0] > mine:
                term, other = best[i - 1]
                found.append(
                    f"{s.broker}: {s.id} acknowledged by {s.replica} (term <= {mine}) after "
                    f"{other.id} was acknowledged by {replica} in term {term}"
                )
                break
    return found
