"""kcat (Debian's 1.7.1, librdkafka 2.0.2 built in) through the scenario of ``scenario.py``:
``python -m tests.broker.kafka.clients.kcat_driver SPEC_JSON``; this script only starts kcat
processes and reads what they print.

kcat cannot create topics: the topic comes from confluent-kafka's AdminClient. Each record group
of the spec (one partition, one codec, the same headers) is one ``kcat -P`` run: ``-p`` the
partition, ``-K \\x1f``/``-D \\x1e`` key and message delimiters on stdin (binary keys and values),
``-Z`` (an empty key or value is sent as null: the null key and the tombstone), ``-H`` per header
(from argv: no NUL byte in header values), ``-X compression.codec=`` none/gzip/snappy/lz4/zstd,
``-X acks=all``; kcat reports no offsets (``delivered`` stays empty). Members A, B, C are
``kcat -G GROUP -J`` processes (balanced consumer, JSON envelopes on stdout; binary bytes come
through raw, control bytes as \\u escapes); their assignment is read from kcat's "Group ...
rebalanced ... assigned:" lines on stderr. kcat commits by itself (auto commit, every 5 s, and
on close): the committed offsets are read with confluent-kafka's ``committed()`` (OffsetFetch)
until they reach the partitions' ends or the commit timeout (after batch 1: once A and C have
closed). (``-X auto.commit.interval.ms=``
cannot shorten the 5 s: kcat sets a property that is both a topic and a global one on the topic
config, where the group consumer ignores it; ``-X dump`` shows it.) A member leaves
on SIGTERM (kcat closes its consumer: final commit, LeaveGroup).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
import traceback
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.broker.kafka.clients.confluent_driver import create_topic
from tests.broker.kafka.clients.scenario import (
    Deadline,
    consume_threaded,
    emit,
    hexb,
    load_spec,
    new_result,
    note,
    phase,
    unhex,
    wait_split_threaded,
)

KEY_DELIM, MSG_DELIM = b"\x1f", b"\x1e"
REBALANCED = re.compile(rb"rebalanced \(memberid [^)]*\): (assigned|revoked): ?(.*)")
CONSUMER_PROPS = {
    "auto.offset.reset": "earliest",
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "max.poll.interval.ms": "20000",
    "topic.metadata.refresh.interval.ms": "2000",
}


def _bytes(text: str | None) -> bytes | None:
    """A key or payload of kcat's JSON (raw bytes, read with surrogateescape) as bytes."""
    return None if text is None else text.encode("utf-8", "surrogateescape")


class Member:
    def __init__(self, name: str, spec: dict[str, Any], current: dict[str, Any]) -> None:
        self.name = name
        self.current = current
        self.lock = current["lock"]
        self.stderr: list[str] = []
        self.terminated = False
        props = [a for k, v in CONSUMER_PROPS.items() for a in ("-X", f"{k}={v}")]
        self.proc = subprocess.Popen(
            [
                "kcat",
                "-b",
                spec["bootstrap"],
                "-G",
                spec["group"],
                "-J",
                "-u",
                *props,
                spec["topic"],
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.readers = [
            threading.Thread(target=self._records, daemon=True),
            threading.Thread(target=self._log, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _records(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line.decode("utf-8", "surrogateescape"))
            raw = msg.get("headers") or []
            headers = [[raw[i], hexb(_bytes(raw[i + 1]))] for i in range(0, len(raw), 2)]
            with self.lock:
                self.current["phase"]["records"].append(
                    {
                        "member": self.name,
                        "partition": msg["partition"],
                        "offset": msg["offset"],
                        "key": hexb(_bytes(msg["key"])),
                        "value": hexb(_bytes(msg["payload"])),
                        "headers": headers,
                    }
                )

    def _log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))
            found = REBALANCED.search(line)
            if found:
                parts = sorted(int(p) for p in re.findall(rb"\[(\d+)\]", found.group(2)))
                with self.lock:
                    self.current["live"][self.name] = parts if found.group(1) == b"assigned" else []

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"kcat member {self.name} exited with {self.proc.returncode}: "
                + "".join(self.stderr[-20:])
            )

    def terminate(self) -> None:
        """SIGTERM, once: kcat closes its consumer (final commit, LeaveGroup) and exits."""
        if self.proc.poll() is None and not self.terminated:
            self.terminated = True
            self.proc.terminate()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for reader in self.readers:
            reader.join(5)
        with self.lock:
            self.current["live"].pop(self.name, None)


def produce(spec: dict[str, Any], records: list[dict[str, Any]]) -> None:
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault((rec["partition"], rec["codec"]), []).append(rec)
    for (partition, codec), recs in groups.items():
        headers = recs[0]["headers"]
        assert all(r["headers"] == headers for r in recs), "kcat sets headers per run"
        args = [b"kcat", b"-b", spec["bootstrap"].encode(), b"-P", b"-t", spec["topic"].encode()]
        args += [b"-p", str(partition).encode(), b"-K", b"\\x1f", b"-D", b"\\x1e", b"-Z"]
        args += [b"-X", f"compression.codec={codec}".encode(), b"-X", b"acks=all"]
        for name, value in headers:
            args += [b"-H", name.encode() + b"=" + (unhex(value) or b"")]
        data = b""
        for rec in recs:
            key, value = unhex(rec["key"]), unhex(rec["value"]) or b""
            assert KEY_DELIM not in value + (key or b"") and MSG_DELIM not in value + (key or b"")
            data += (b"" if key is None else key) + KEY_DELIM + value + MSG_DELIM
        run = subprocess.run(
            args, input=data, capture_output=True, timeout=spec["timeouts"]["consume"], check=False
        )
        if run.returncode != 0:
            raise RuntimeError(
                f"kcat -P ({partition}, {codec}) exited {run.returncode}: {run.stderr!r}"
            )


def committed(spec: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, int]:
    """The group's committed offsets, polled until each partition's end (kcat commits by
    itself, periodically) or the commit timeout."""
    ends = {
        str(p): sum(1 for r in records if r["partition"] == p) for p in range(spec["partitions"])
    }
    reader = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"]})
    tps = [TopicPartition(spec["topic"], p) for p in range(spec["partitions"])]
    deadline = Deadline(spec["timeouts"]["commit"], "committed offsets")
    try:
        while True:
            got = reader.committed(tps, timeout=spec["timeouts"]["commit"])
            offsets = {str(tp.partition): tp.offset for tp in got}
            if offsets == ends or deadline.left() == 0:
                return offsets
            time.sleep(0.1)
    finally:
        reader.close()


def main() -> None:
    spec = load_spec()
    result = new_result()
    current: dict[str, Any] = {"phase": phase(), "live": {}, "lock": threading.Lock()}
    members: list[Member] = []
    try:
        create_topic(spec)  # confluent-kafka's admin: kcat has none
        result["created"] = True
        note("topic created")
        result["phases"].append(current["phase"])
        a, b = Member("A", spec, current), Member("B", spec, current)
        members = [a, b]
        wait_split_threaded(members, ("A", "B"), spec)
        note(f"A and B split the partitions: {current['phase']['members']}")
        produce(spec, spec["batches"][0])
        note("batch 0 produced")
        consume_threaded(members, len(spec["batches"][0]), spec)
        note("batch 0 consumed")
        current["phase"]["committed"] = committed(spec, spec["batches"][0])
        note(f"committed {current['phase']['committed']}")

        members.remove(b)
        b.close()
        note(f"B closed (exit {b.proc.returncode})")
        current["phase"] = phase()
        result["phases"].append(current["phase"])
        members.append(Member("C", spec, current))
        note("B left, C joined")
        wait_split_threaded(members, ("A", "C"), spec)
        note(f"A and C split the partitions: {current['phase']['members']}")
        produce(spec, spec["batches"][1])
        note("batch 1 produced")
        consume_threaded(members, len(spec["batches"][1]), spec)
        note("batch 1 consumed")
        for m in members:  # kcat commits on close: no wait for its 5 s timer
            m.terminate()
        for m in members:
            m.close()
        note("A and C closed")
        current["phase"]["committed"] = committed(spec, spec["batches"][0] + spec["batches"][1])
        note(f"committed {current['phase']['committed']}")
    except Exception as exc:
        logs = "".join(f"--- kcat {m.name}\n" + "".join(m.stderr[-15:]) for m in members)
        result["error"] = f"{exc!r}\n{traceback.format_exc()}\n{logs}"
    finally:
        for m in members:
            with contextlib.suppress(Exception):
                m.close()
        note("members closed")
    emit(result)


if __name__ == "__main__":
    main()
