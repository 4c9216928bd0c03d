"""The campaign's table: the checker's verdict, and per fault kind how many were injected, how
long they lasted and how long the clients could not write meanwhile.

A fault's span runs from its injection to the next fault's (or the end of the run): the
recovery after a heal (an election, a restart, a catch-up) counts for the fault that caused
it. Unavailable time is the checker's: gaps between acknowledgements holding a failed or
unknown send (``checker.unavailable_gaps``), cut at the spans' edges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.fault.checker import OK, Fault, Op, Report, Send, unavailable_gaps


@dataclass
class KindRow:
    kind: str
    injected: int = 0
    fault_s: float = 0.0  # sum of the windows (injection to heal)
    unavailable_s: float = 0.0


@dataclass
class Summary:
    report: Report
    seed: int
    seconds: float
    kinds: list[KindRow]
    failed_starts: list[str] = field(default_factory=list)
    client_errors: dict[str, int] = field(default_factory=dict)
    copies_differing: list[str] = field(default_factory=list)  # replica's copy != master's
    # protocol -> (sends, acknowledged), from the ids' prefixes (PROTOCOLS)
    protocols: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def faults(self) -> int:
        return sum(row.injected for row in self.kinds)

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.failed_starts and not self.copies_differing

    def table(self) -> str:
        r = self.report
        rows: list[tuple[str, object]] = [
            ("seed", self.seed),
            ("duration", f"{self.seconds:.0f} s"),
            ("faults", self.faults),
            ("operations", r.operations),
            ("sends", r.sends),
            ("acknowledged", r.acknowledged),
            ("unknown (written)", f"{r.unknown} ({r.unknown_written})"),
            ("failed (written)", f"{r.failed} ({r.failed_written})"),
            ("read after heal", r.read),
            (
                "acknowledged by protocol",
                ", ".join(
                    f"{name} {acked}/{sent}" for name, (sent, acked) in self.protocols.items()
                ),
            ),
            *((name.replace("_", " "), len(getattr(r, name))) for name in r.VIOLATIONS),
            ("failed restarts", len(self.failed_starts)),
            ("replica copies differing", len(self.copies_differing)),
            ("unavailable", f"{r.unavailable_s:.1f} s"),
            ("verdict", "OK" if self.ok else "VIOLATIONS"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        kw = max([len(row.kind) for row in self.kinds] + [4])
        lines += ["", f"{'kind':<{kw}}  faults  fault time  unavailable"]
        lines += [f"{row.kind:<{kw}}  {row.injected:>6}  {row.fault_s:>8.1f} s  "
                  f"{row.unavailable_s:>9.1f} s" for row in self.kinds]  # fmt: skip
        examples = [f"{name}: {v}" for name in r.VIOLATIONS for v in getattr(r, name)[:5]]
        examples += [f"failed restart: {v}" for v in self.failed_starts[:5]]
        examples += [f"replica differs: {v}" for v in self.copies_differing[:5]]
        if examples:
            lines += ["", *examples]
        return "\n".join(lines)


PROTOCOLS = {"p": "wharf.v1", "k": "kafka", "r": "remoting"}  # a send id's first letter


def by_protocol(ops: Sequence[Op]) -> dict[str, tuple[int, int]]:
    """protocol -> (sends, acknowledged)."""
    counts: dict[str, list[int]] = {name: [0, 0] for name in PROTOCOLS.values()}
    for op in ops:
        if isinstance(op, Send):
            row = counts.setdefault(PROTOCOLS.get(op.id[:1], "?"), [0, 0])
            row[0] += 1
            row[1] += op.status == OK
    return {name: (sent, acked) for name, (sent, acked) in counts.items()}


def summarize(
    report: Report, ops: Sequence[Op], seed: int, seconds: float, failed_starts: list[str]
) -> Summary:
    faults = sorted((op for op in ops if isinstance(op, Fault)), key=lambda f: f.start)
    sends = [op for op in ops if isinstance(op, Send)]
    end = max((s.end for s in sends), default=0.0)
    gaps = unavailable_gaps(sends)
    rows: dict[str, KindRow] = defaultdict(lambda: KindRow(""))
    for i, fault in enumerate(faults):
        row = rows[fault.kind or fault.what]
        row.kind = fault.kind or fault.what
        row.injected += 1
        row.fault_s += max(0.0, fault.end - fault.start)
        until = faults[i + 1].start if i + 1 < len(faults) else end
        row.unavailable_s += sum(max(0.0, min(hi, until) - max(lo, fault.start)) for lo, hi in gaps)
    kinds = sorted(rows.values(), key=lambda row: -row.injected)
    return Summary(report, seed, seconds, kinds, failed_starts, protocols=by_protocol(ops))
