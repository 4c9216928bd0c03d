"""The one scenario every Kafka client driver runs, its JSON in and out, and the checks on
what a driver observed. Used by the pytest side (``build``, ``run_driver``, ``check``) and by
the Python drivers (``load_spec``, ``emit``, ``Deadline``, ``hexb``/``unhex``); the Node.js
driver (``../node/driver.js``) speaks the same JSON.

The scenario (``README.md`` of this folder): create a topic of 2 partitions; members A and B of
one group join and split the partitions (one each); produce batch 0 (a group of records per
compression codec and partition: a keyed record, a null key, a tombstone, an empty key, an
empty value; every record with binary and duplicate-key headers), explicit partitions, acks=all; the group receives every
record exactly once; commit; B leaves, C joins, A and C split the partitions again; produce
batch 1; the group receives batch 1 and nothing of batch 0 (resumed from the committed
offsets); commit.

Spec (``build``; bytes are hex strings, a null key or value is ``null``)::

    {"client", "bootstrap", "topic", "group", "partitions": 2, "timeouts": {...},
     "batches": [[{"id", "partition", "codec", "key", "value", "headers": [[name, hex]]}]]}

Result (the driver's stdout line starting with ``RESULT_MARK``)::

    {"created": bool, "delivered": [{"id", "partition", "offset"}] (offsets the producer was
     told; [] when the client does not report them), "phases": [{"members": {"A": [0], ...},
     "records": [{"member", "partition", "offset", "key", "value", "headers"}],
     "committed": {"0": n, "1": m}}], "error": null or a message}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULT_MARK = "WHARF-KAFKA-RESULT "
PARTITIONS = 2
ALL_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Binary header values: every byte class, NUL included (kcat takes headers from argv: no NUL).
BINARY_HEADER = bytes([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF])
BINARY_HEADER_NO_NUL = bytes([0x01, 0x7F, 0x80, 0xFE, 0xFF, 0x3D])  # 0x3D: '=' inside a value
# Values and keys avoid 0x1E and 0x1F: the kcat driver's message and key delimiters.
TAIL = bytes([0x00, 0x0A, 0x80, 0xFF])


def hexb(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def unhex(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def _group(
    batch: int, codec: str, partition: int, header: bytes, empties: bool
) -> list[dict[str, Any]]:
    """Records sharing partition, codec and headers (kcat sets headers per run): keyed, null
    key, tombstone, and with ``empties`` an empty (not null) key and an empty value."""
    gid = f"b{batch}-{codec}-p{partition}"
    headers = [
        ["grp", gid.encode().hex()],
        ["bin", header.hex()],
        ["dup", b"first".hex()],
        ["dup", b"second".hex()],
    ]
    body = b"x" * 300  # compressible: the codec really shrinks the batch

    def value(n: int) -> bytes:
        return f"{gid}-r{n}:".encode() + body + TAIL

    rows = [
        (f"{gid}-r0", f"{gid}-key0".encode() + TAIL, value(0)),  # keyed, binary key
        (f"{gid}-r1", None, value(1)),  # null key
        (f"{gid}-r2", f"{gid}-key2".encode(), None),  # tombstone: null value
    ]
    if empties:
        rows += [
            (f"{gid}-r3", b"", value(3)),  # empty key, not null
            (f"{gid}-r4", f"{gid}-key4".encode(), b""),  # empty value, not a tombstone
        ]
    return [
        {
            "id": rid,
            "partition": partition,
            "codec": codec,
            "key": hexb(key),
            "value": hexb(val),
            "headers": headers,
        }
        for rid, key, val in rows
    ]


def build(
    client: str,
    bootstrap: str,
    codecs: tuple[str, ...],
    *,
    nul_in_headers: bool = True,
    empties: bool = True,
    timeouts: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The spec for one driver run: batch 0 has a record group per codec and partition (in
    that order: a codec's groups are produced together), batch 1 one uncompressed group per
    partition. ``nul_in_headers=False``/``empties=False``: no NUL byte in header values, no
    empty (not null) key or value (kcat cannot send them)."""
    header = BINARY_HEADER if nul_in_headers else BINARY_HEADER_NO_NUL

    def group(batch: int, codec: str, p: int) -> list[dict[str, Any]]:
        return _group(batch, codec, p, header, empties)

    batch0 = [r for c in codecs for p in range(PARTITIONS) for r in group(0, c, p)]
    batch1 = [r for p in range(PARTITIONS) for r in group(1, "none", p)]
    suffix = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    return {
        "client": client,
        "bootstrap": bootstrap,
        "topic": f"wharf-{client}-{suffix}",
        "group": f"wharf-{client}-group-{suffix}",
        "partitions": PARTITIONS,
        # Seconds: a join or rebalance, a batch's arrival, the whole run (the pytest side's
        # subprocess timeout is a little longer).
        "timeouts": {
            "join": 30.0,
            "consume": 20.0,
            "commit": 10.0,
            "run": 75.0,
            **(timeouts or {}),
        },
        "batches": [batch0, batch1],
    }


# -- the driver side -----------------------------------------------------------------------


def load_spec() -> dict[str, Any]:
    return dict(json.loads(sys.argv[1]))


_T0 = time.monotonic()


def note(what: str) -> None:
    """A step of the driver, timed, on stderr (the failure report shows its tail)."""
    sys.stderr.write(f"[driver {time.monotonic() - _T0:6.2f} s] {what}\n")
    sys.stderr.flush()


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(RESULT_MARK + json.dumps(result) + "\n")
    sys.stdout.flush()


def new_result() -> dict[str, Any]:
    return {"created": False, "delivered": [], "phases": [], "error": None}


def phase() -> dict[str, Any]:
    return {"members": {}, "records": [], "committed": {}}


class Deadline:
    def __init__(self, seconds: float, what: str) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def check(self, detail: str = "") -> None:
        if time.monotonic() > self.end:
            raise TimeoutError(f"{self.what}: not done after {self.seconds:g} s {detail}".strip())


def next_offsets(records: list[dict[str, Any]], member: str) -> dict[int, int]:
    """Partition -> the offset after the last record ``member`` received (what it commits)."""
    out: dict[int, int] = {}
    for rec in records:
        if rec["member"] == member:
            out[rec["partition"]] = max(out.get(rec["partition"], 0), rec["offset"] + 1)
    return out


def split(members: dict[str, list[int]], names: tuple[str, str], partitions: int) -> bool:
    """Both named members hold exactly one partition each, together all of them."""
    held = [sorted(members.get(n, [])) for n in names]
    return all(len(h) == 1 for h in held) and sorted(held[0] + held[1]) == list(range(partitions))


# -- the pytest side -----------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[4]


def wait_split_threaded(
    members: Sequence[Any], names: tuple[str, str], spec: dict[str, Any]
) -> None:
    """Drivers whose members run in threads (kafka-python, kcat): wait until ``names`` hold
    the partitions between them; each member's ``current`` is the shared state (``lock``,
    ``live`` assignments, ``phase``), ``check()`` raises what its thread met."""
    deadline = Deadline(spec["timeouts"]["join"], f"members {names} splitting the partitions")
    current = members[0].current
    while True:
        with current["lock"]:
            live = {n: list(ps) for n, ps in current["live"].items()}
        if split(live, names, spec["partitions"]):
            break
        deadline.check(f"(assignments {live})")
        for m in members:
            m.check()
        time.sleep(0.05)
    current["phase"]["members"] = {n: live[n] for n in names}


def consume_threaded(members: Sequence[Any], want: int, spec: dict[str, Any]) -> None:
    """Threaded members: wait for ``want`` records in the phase, then a moment more."""
    current = members[0].current["phase"]
    deadline = Deadline(spec["timeouts"]["consume"], f"receiving {want} records")
    while len(current["records"]) < want:
        deadline.check(f"(got {len(current['records'])})")
        for m in members:
            m.check()
        time.sleep(0.05)
    time.sleep(0.3)  # a moment more: duplicates would show up now


def run_driver(cmd: list[str], spec: dict[str, Any], cwd: Path | None = None) -> dict[str, Any]:
    """Run a driver (``cmd`` + the spec as its last argument), return its result; fail with
    what it printed and its stderr tail when it crashed, timed out or printed no result."""
    limit = spec["timeouts"].get("run", 60.0)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [*cmd, json.dumps(spec)],
            capture_output=True,
            text=True,
            cwd=cwd or REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
            timeout=limit + 15,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        raise AssertionError(
            f"{spec['client']} driver killed after {limit + 15:g} s\n--- stdout ---\n"
            f"{(out or '')[-3000:]}\n--- stderr tail ---\n{(err or '')[-6000:]}"
        ) from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    other = "\n".join(ln for ln in proc.stdout.splitlines() if not ln.startswith(RESULT_MARK))
    steps = "\n".join(ln for ln in proc.stderr.splitlines() if ln.startswith("[driver"))
    report = (
        f"{spec['client']} driver exit {proc.returncode} after {time.monotonic() - started:.1f} s"
        f"\n--- its steps ---\n{steps}\n--- stdout (but the result) ---\n{other[-3000:]}"
        f"\n--- stderr tail ---\n{proc.stderr[-6000:]}"
    )
    assert lines, f"no result line\n{report}"
    result = dict(json.loads(lines[-1][len(RESULT_MARK) :]))
    result["_report"] = report
    assert result["error"] is None, f"driver error: {result['error']}\n{report}"
    assert proc.returncode == 0, report
    return result


def _content(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec["key"], rec["value"], tuple(tuple(h) for h in rec["headers"]))


def _show(rec: dict[str, Any]) -> str:
    def text(h: str | None) -> str:
        return "null" if h is None else repr(bytes.fromhex(h)[:40])

    heads = ", ".join(f"{n}={text(v)}" for n, v in rec["headers"])
    return (
        f"p{rec.get('partition')}@{rec.get('offset')} by {rec.get('member')}: "
        f"key={text(rec['key'])} value={text(rec['value'])} headers=[{heads}]"
    )


def check(spec: dict[str, Any], result: dict[str, Any]) -> None:
    """Every record of each batch received exactly once, intact, by the member holding its
    partition, at dense offsets from 0 in produce order; batch 1 only after the member change
    (resumed from the commit); committed offsets at each partition's end."""
    report = result.get("_report", "")
    phases = result["phases"]
    assert len(phases) == 2, f"{len(phases)} phases reported, 2 expected\n{report}"
    assert result["created"], f"topic not created\n{report}"
    by_content = {_content(r): r for batch in spec["batches"] for r in batch}
    assert len(by_content) == sum(map(len, spec["batches"])), "records of the spec not unique"
    ends = Counter[int]()
    delivered = {d["id"]: d for d in result["delivered"]}
    for number, (batch, seen) in enumerate(zip(spec["batches"], phases, strict=True)):
        names = ("A", "B") if number == 0 else ("A", "C")
        members = {m: sorted(ps) for m, ps in seen["members"].items()}
        assert split(members, names, spec["partitions"]), (
            f"phase {number}: members {names} did not split the partitions one each: {members}"
        )
        ids = [r["id"] for r in batch]
        got: dict[str, list[dict[str, Any]]] = {}
        unknown = []
        for rec in seen["records"]:
            want = by_content.get(_content(rec))
            if want is None:
                unknown.append(_show(rec))
            else:
                got.setdefault(want["id"], []).append(rec)
        assert not unknown, (
            f"phase {number}: records that were never produced (altered key, value or "
            f"headers):\n" + "\n".join(unknown[:10]) + f"\nproduced e.g. {_show(batch[0])}"
        )
        earlier = sorted(set(got) - set(ids))
        assert not earlier, (
            f"phase {number}: {len(earlier)} records of an earlier batch again (not resumed "
            f"from the committed offsets): {earlier[:8]}"
        )
        missing = [i for i in ids if i not in got]
        twice = {i: len(rs) for i, rs in got.items() if len(rs) > 1}
        assert not missing, f"phase {number}: {len(missing)}/{len(ids)} never received: {missing}"
        assert not twice, f"phase {number}: received more than once: {twice}"
        for p in range(spec["partitions"]):
            in_order = [r["id"] for r in batch if r["partition"] == p]
            owner = next(m for m in names if members[m] == [p])
            offsets = [(got[i][0]["offset"], i) for i in in_order]
            want_offsets = list(range(ends[p], ends[p] + len(in_order)))
            assert [o for o, _ in offsets] == want_offsets, (
                f"phase {number} partition {p}: offsets in produce order {offsets}, "
                f"expected {want_offsets} (dense from 0, in produce order)"
            )
            for i in in_order:
                rec = got[i][0]
                assert rec["partition"] == p, f"{i} produced to {p}, received from {_show(rec)}"
                assert rec["member"] == owner, (
                    f"{i} of partition {p} received by {rec['member']}, assigned to {owner}: "
                    f"{members}"
                )
                if i in delivered:
                    d = delivered[i]
                    assert (d["partition"], d["offset"]) == (p, rec["offset"]), (
                        f"{i}: the producer was told p{d['partition']}@{d['offset']}, "
                        f"consumed at {_show(rec)}"
                    )
            ends[p] += len(in_order)
        committed = {int(p): o for p, o in seen["committed"].items()}
        want = {p: ends[p] for p in range(spec["partitions"])}
        assert committed == want, f"phase {number}: committed offsets {committed}, expected {want}"
    if result["delivered"]:
        assert sorted(delivered) == sorted(r["id"] for b in spec["batches"] for r in b), (
            "delivery reports do not cover every produced record"
        )
