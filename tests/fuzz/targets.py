"""The fuzz targets: one per C module, each a differential oracle against the module's
pure-Python twin (the same result, or both refusing), run by ``tests.fuzz.run`` under atheris
with the modules built by ``tests.fuzz.build`` (ASan + UBSan + coverage).

An input is a few parameter bytes (``_Input``: which function, counts, limits) and then the
payload the function parses. The buffers handed to C are exact-size copies (``_exact``: an
``array('B')`` holds exactly len(data) bytes, where a bytes object has a NUL and a header
after its data, so reading one byte past the end would go unseen by ASan); the twins get
plain bytes. Seeds (``seeds()``) are built with the existing differential tests' builders.
"""

from __future__ import annotations

import array
import importlib.util
import struct
from collections.abc import Callable, Iterator
from functools import partial
from types import ModuleType, SimpleNamespace
from typing import Any

from tests.fuzz import build


def load_fuzzed(name: str) -> ModuleType:
    """The instrumented build of ``name`` (build/fuzz/ext), never the source tree's .so."""
    spec = importlib.util.spec_from_file_location(name, build.so_path(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Divergence(AssertionError):
    """The compiled module and its twin disagree (a finding, as a crash is)."""


def _exact(data: bytes) -> memoryview:
    return memoryview(array.array("B", data))


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # the twins' refusals: compared by type, not by text
        return ("error", type(exc).__name__)


def _same(compiled: Any, python: Any, what: str) -> None:
    if compiled != python:
        raise Divergence(f"{what}: compiled {compiled!r:.300} != python {python!r:.300}")


class _Input:
    """Parameter bytes read from the front of a fuzz input (zeros once it runs out)."""

    def __init__(self, data: bytes, params: int) -> None:
        self.head = data[:params].ljust(params, b"\0")
        self.rest = data[params:]
        self.pos = 0

    def u8(self) -> int:
        self.pos += 1
        return self.head[self.pos - 1]

    def u16(self) -> int:
        self.pos += 2
        return int.from_bytes(self.head[self.pos - 2 : self.pos], "big")

    def i64(self) -> int:
        self.pos += 8
        return int.from_bytes(self.head[self.pos - 8 : self.pos], "big", signed=True)


def _frame(params: bytes, size: int, payload: bytes) -> bytes:
    return params.ljust(size, b"\0")[:size] + payload


class _Target:
    """A target's call leaves the modules as it found them (the regression tests run the
    targets inside pytest, on the installed modules)."""

    def swapped(self) -> list[tuple[Any, str]]:
        return []

    def __call__(self, data: bytes) -> None:
        saved = [(owner, name, getattr(owner, name)) for owner, name in self.swapped()]
        try:
            self.run(data)
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)

    def run(self, data: bytes) -> None:
        raise NotImplementedError


# --- wharf.store.fast._kafka_convert ----------------------------------------------------------


class KafkaConvert(_Target):
    """``produce_records`` (a Produce batch's records section, from the client) against the
    Kafka front end's produce.py Python path, and ``fetch_batch`` (stored records) against its
    fetch.py (both over wharf.store.codec.kafka_records)."""

    name = "wharf.store.fast._kafka_convert"
    PARAMS = 12  # selector, flags, count, base timestamp (8), unused
    NOW_MS = 1_790_000_000_123

    def __init__(self, module: ModuleType | None = None) -> None:
        from wharf.broker.frontends.kafka import produce
        from wharf.store.codec.bodies import inflate
        from wharf.store.codec.properties import SYSTEM_PROPERTY_NAMES
        from wharf.store.codec.records import _crc32
        from wharf.store.codec.send_records import topic_tail

        self.module = module or load_fuzzed(self.name)
        self.module.configure(sorted(SYSTEM_PROPERTY_NAMES))
        self.inflate, self.crc32 = inflate, _crc32
        self.tail = topic_tail("orders")
        self.produce_module = produce
        # one fixed clock for both paths (a record without timestamp takes "now")
        self.clock = SimpleNamespace(time=lambda: self.NOW_MS / 1000)

    def swapped(self) -> list[tuple[Any, str]]:
        return [(self.produce_module, "time")]

    def run(self, data: bytes) -> None:
        given = _Input(data, self.PARAMS)
        self.produce_module.time = self.clock
        if given.u8() % 2 == 0:
            self.produce(given)
        else:
            self.fetch(given)

    def produce(self, given: _Input) -> None:
        import crc32c  # noqa: F401  (the same modules as the broker's import)
        from wharf.broker.frontends.kafka.produce import ProduceHandler
        from wharf.broker.frontends.kafka.producers import producer_mark
        from wharf.broker.frontends.kafka.records import Batch, _decode_records

        flags, count, base_ts = given.u8(), given.u8(), given.i64()
        section = given.rest
        max_size = 1000 if flags & 2 else 4 << 20
        pid = 7 if flags & 1 else -1
        batch = Batch(0, 0, count - 1, base_ts, base_ts, pid, 1, 40, [], count)
        mark = producer_mark(batch) if pid >= 0 else None
        ids = [f"ID{i:030X}" for i in range(count)]
        compiled = _outcome(
            lambda: self.module.produce_records(
                _exact(section), count, base_ts, self.tail, ids, self.NOW_MS, max_size, mark,
                self.crc32,
            )
        )  # fmt: skip
        handler = SimpleNamespace(
            env=SimpleNamespace(
                ctx=SimpleNamespace(unique_ids=SimpleNamespace(next_ids=lambda n: ids[:n]))
            )
        )

        def python() -> tuple[bytes, list[int]]:
            batch.records = _decode_records(section, count, base_ts)
            return ProduceHandler._records(handler, batch, self.tail, max_size)  # type: ignore[arg-type]

        expected = _outcome(python)
        if compiled == ("ok", None):  # "take the Python path": nothing to compare
            return
        _same(compiled, expected, "produce_records")

    def fetch(self, given: _Input) -> None:
        import crc32c
        from wharf.broker.frontends.kafka.fetch import encode_messages
        from wharf.store.codec.layout import TOTAL_SIZE
        from wharf.store.codec.records import decode_records

        given.u8()
        count = given.u8()
        records = given.rest
        compiled = _outcome(
            lambda: self.module.fetch_batch(_exact(records), count, crc32c.crc32c, self.inflate)
        )

        def python() -> bytes:  # fetch.encode_stored's Python path
            positions, pos = [], 0
            for _ in range(count):
                positions.append(pos)
                pos += TOTAL_SIZE.unpack_from(records, pos)[0]
            return encode_messages(decode_records(records, positions, 0))

        if compiled == ("ok", None):
            return
        _same(compiled, _outcome(python), "fetch_batch")

    @classmethod
    def seeds(cls) -> Iterator[bytes]:
        from wharf.broker.frontends.kafka.records import HEADER_SIZE, Record, encode_batch

        from tests.store.test_kafka_convert_fast import _raw

        batches = [
            [
                Record(0, 1_700, b"order-7", b"body", [("trace", b"abc"), ("region", b"eu")]),
                Record(1, 1_701, b"two words", None, []),
                Record(2, 0, None, b"", [("empty", b"")]),
            ],
            [Record(0, 1, None, b"v", [("h", b"\xff")])],
            [Record(0, 1, None, b"v", [(f"h{i}", b"v") for i in range(65)])],
            [Record(0, 5, "é✓".encode(), b"x" * 1000, [("KEYS", b"k"), ("__KAFKA_X", None)])],
            [Record(i, 1_600_000_000_000 + i, b"k%d" % i, b"v" * i, []) for i in range(8)],
        ]
        for records in batches:
            batch = encode_batch(records, producer_id=7, producer_epoch=1, base_sequence=40)
            base_ts = records[0].timestamp
            for flags in (0, 1):
                params = bytes([0, flags, len(records)]) + struct.pack(">q", base_ts)
                yield _frame(params, cls.PARAMS, batch[HEADER_SIZE:])
        messages = [
            [(b"hello", {"KEYS": "k1 k2", "TAGS": "tagA", "color": "red"}, None, 5)],
            [(b"\x00", {"__KAFKA_VALUE": "null", "__KAFKA_KEY": "/w=="}, None, 0)],
            [(b"v", {"__KAFKA_HEADERS": '[["h", null]]'}, None, 1)],
            [(b"a" * 40, {"UNIQ_KEY": "U", "x": "é"}, "Zm9v", 2**40), (b"b", {}, None, 0)],
        ]
        for batch in messages:
            raw = _raw(batch, 0)
            assert raw is not None
            yield _frame(bytes([1, 0, raw[1]]), cls.PARAMS, raw[0])
        yield _frame(bytes([1, 0, 2]), cls.PARAMS, _compressed_records())
        yield _frame(bytes([1, 0, 2]), cls.PARAMS, _compressed_records("L" * 249))  # V2


def _compressed_records(topic: str = "orders") -> bytes:
    import zlib

    from wharf.store.codec.layout import SYSFLAG_COMPRESSED
    from wharf.store.codec.records import encode_batch as store_encode_batch
    from wharf.store.model import MessageInput

    inputs = [
        MessageInput(zlib.compress(b"compressible " * 40), {"KEYS": "k"}, SYSFLAG_COMPRESSED),
        MessageInput(b"not zlib", {}, sys_flag=SYSFLAG_COMPRESSED, born_timestamp=7),
    ]
    return store_encode_batch(topic, 1, 40, inputs, 0, 99, "10.0.0.1:5", 1 << 20).data


# --- wharf.store.fast._record_check ------------------------------------------------------------


class RecordCheck(_Target):
    """``check`` / ``check_many`` (a client's send batch, as received) and ``patch`` of what
    passed, against record_check.py's numpy checks and patch."""

    name = "wharf.store.fast._record_check"
    PARAMS = 4  # selector, size limit, topic, batch count
    TOPICS = ("orders", "other", "T", "L" * 200)  # the last one's records are V2

    def __init__(self, module: ModuleType | None = None) -> None:
        import wharf.store.fast.record_check as record_check

        self.rc = record_check
        self.module = module or load_fuzzed(self.name)

    def swapped(self) -> list[tuple[Any, str]]:
        return [(self.rc, "_compiled")]

    def _numpy(self, call: Callable[[], Any]) -> tuple[str, Any]:
        self.rc._compiled = None
        try:
            return _outcome(call)
        finally:
            self.rc._compiled = self.module

    def run(self, data: bytes) -> None:
        given = _Input(data, self.PARAMS)
        selector, limit_byte, topic_byte = given.u8(), given.u8(), given.u8()
        limit = (4096, 4 << 20, 1 + limit_byte % 300)[limit_byte % 3]
        topic = self.TOPICS[topic_byte % len(self.TOPICS)]
        self.rc._compiled = self.module
        if selector % 2 == 0:
            self.check(given.rest, topic, limit)
        else:
            self.check_many(given.u8(), given.rest, limit)

    def check(self, payload: bytes, topic: str, limit: int) -> None:
        rc = self.rc

        def outcome(buf: Any) -> Any:
            try:
                return rc.check_records(buf, topic, limit).tolist()
            except rc.InvalidMessageError as exc:  # the same words on both paths
                return str(exc)

        compiled = _outcome(lambda: outcome(_exact(payload)))
        _same(compiled, self._numpy(lambda: outcome(payload)), "check")
        if compiled[0] == "ok" and isinstance(compiled[1], list) and compiled[1]:
            self.patch(payload, compiled[1])

    def patch(self, payload: bytes, starts: list[int]) -> None:
        import numpy as np

        at = np.array(starts, dtype=np.int64)
        args = (7, 40, 1 << 33, b"\x0a\0\0\x01\0\0\x13\x88", 1_790_000_000_000, bytes(8))
        compiled, python = bytearray(payload), bytearray(payload)
        self.rc.patch_records(compiled, at, *args)
        self.rc._compiled = None
        try:
            self.rc.patch_records(python, at, *args)
        finally:
            self.rc._compiled = self.module
        _same(bytes(compiled), bytes(python), "patch")

    def check_many(self, batches: int, payload: bytes, limit: int) -> None:
        """The batch sizes come from the request (``batch_sizes``): n sizes as int64 from the
        payload's front (any values), the rest is the records blob."""
        rc = self.rc
        n = 1 + batches % 4
        head, blob = payload[: 8 * n], payload[8 * n :]
        sizes = [
            int.from_bytes(head[i : i + 8], "big", signed=True) for i in range(0, len(head), 8)
        ]
        sizes += [0] * (n - len(sizes))
        topics = [self.TOPICS[i % len(self.TOPICS)] for i in range(n)]
        compiled = _outcome(
            lambda: _many(rc.check_records_many(_exact(blob), sizes, topics, limit))
        )
        _same(
            compiled,
            self._numpy(lambda: _many_reference(rc, blob, sizes, topics, limit)),
            "check_many",
        )

    @classmethod
    def seeds(cls) -> Iterator[bytes]:
        from wharf.store.model import MessageInput

        from tests.store.test_record_batch import client_batch

        batches = [
            [MessageInput(b"x" * 10, {}), MessageInput(b"y" * 10, {}), MessageInput(b"z", {})],
            [MessageInput(b"body", {"KEYS": "k1 k2", "TAGS": "t", "UNIQ_KEY": "U1"})],
            [MessageInput(b"b" * 1000, {"é": "✓"}, born_timestamp=5)],
            [MessageInput(b"q", {"DELAY": "3"}, flag=1)],
        ]
        for topic_byte, topic in enumerate(cls.TOPICS):
            for batch in batches:
                data = client_batch(topic, batch)
                yield _frame(bytes([0, 0, topic_byte]), cls.PARAMS, data)
                two = client_batch("orders", batch[:1])
                sizes = struct.pack(">qq", len(two), len(data))
                yield _frame(bytes([1, 0, 0, 1]), cls.PARAMS, sizes + two + data)


def _many(found: Any) -> Any:
    return None if found is None else (found[0].tolist(), found[1])


def _many_reference(rc: Any, blob: bytes, sizes: list[int], topics: list[str], limit: int) -> Any:
    """What check_records_many answers, from record_check's per-batch numpy checks: the starts
    and counts; None at the first bad batch; ValueError for sizes that do not frame the blob."""
    starts: list[int] = []
    counts: list[int] = []
    base = 0
    for size, topic in zip(sizes, topics, strict=True):
        if size < 0 or base + size > len(blob):
            raise ValueError("the batch sizes exceed the data")
        try:
            found = rc.check_records(blob[base : base + size], topic, limit).tolist()
        except rc.InvalidMessageError:
            return None
        starts += [base + s for s in found]
        counts.append(len(found))
        base += size
    if base != len(blob):
        raise ValueError("the batch sizes do not add up to the data")
    return starts, counts


# --- wharf.store.fast._log_scan ----------------------------------------------------------------


class LogScan(_Target):
    """The commit log's walk (``scan``), the dispatch's columnar decode (``gather_tails``,
    ``topic_ids``, ``scan_properties`` through dispatch_columns.decode_dispatch_columns) and
    the pull's run choice and check (``choose_runs``, ``check_run``), against their twins."""

    name = "wharf.store.fast._log_scan"
    PARAMS = 12  # selector, then per function: start, limit, count, budget...

    def __init__(self, module: ModuleType | None = None) -> None:
        import wharf.store.fast.dispatch_columns as dispatch_columns
        import wharf.store.fast.record_tails as record_tails
        import wharf.store.log.reader as reader
        import wharf.store.read.get_raw as get_raw

        self.module = module or load_fuzzed(self.name)
        self.reader, self.get_raw = reader, get_raw
        self.dispatch_columns, self.record_tails = dispatch_columns, record_tails

    def swapped(self) -> list[tuple[Any, str]]:
        return [(self.record_tails, "_compiled"), (self.dispatch_columns, "_compiled")]

    def run(self, data: bytes) -> None:
        given = _Input(data, self.PARAMS)
        selector = given.u8() % 4
        (self.scan, self.dispatch, self.choose_runs, self.check_run)[selector](given)

    def scan(self, given: _Input) -> None:
        buf = given.rest
        # within the caller's contract (0 <= pos <= limit <= len) but for one case in 16,
        # which must be refused, not read
        pos, limit, max_count, budget, flags = (
            given.u16(),
            given.u16(),
            given.u8(),
            given.u16(),
            given.u8(),
        )
        if flags & 0xF0:
            limit = limit % (len(buf) + 1)
            pos = pos % (limit + 1)
        args = (pos, limit, 1 + max_count % 64, budget * 4, bool(flags & 1))
        compiled = _outcome(lambda: self.module.scan(_exact(buf), *args))
        python = _outcome(lambda: self.reader._scan_python(buf, *args))
        if flags & 0xF0:  # outside the contract the C clamps limit: ASan checks it reads no more
            _same(compiled, python, "scan")

    def dispatch(self, given: _Input) -> None:
        """Positions from the twin's own walk (as the dispatch gets them), one maybe moved."""
        from wharf.store.codec import decode_dispatches
        from wharf.store.errors import CorruptRecordError
        from wharf.store.fast.dispatch_columns import columns_from_requests, decode_dispatch_columns

        lead, move, by = given.u8() % 16, given.u8(), given.u8()
        buf = given.rest
        positions, *_ = self.reader._scan_python(buf, lead, len(buf), 64, 1 << 30, False)
        if not positions:
            return
        if move & 0x80:
            i = move % len(positions)
            positions[i] = min(len(buf), positions[i] + by)

        def columns(compiled: bool) -> Any:
            module = self.module if compiled else None
            self.record_tails._compiled = self.dispatch_columns._compiled = module
            try:
                got = decode_dispatch_columns(_exact(buf) if compiled else buf, positions, 1 << 20)
            except CorruptRecordError as exc:
                return str(exc)
            return _columns(got)

        def reference() -> Any:
            try:
                return _columns(columns_from_requests(decode_dispatches(buf, positions, 1 << 20)))
            except CorruptRecordError as exc:
                return str(exc)

        expected = _outcome(reference)
        _same(_outcome(lambda: columns(True)), expected, "decode_dispatch_columns (compiled)")
        _same(_outcome(lambda: columns(False)), expected, "decode_dispatch_columns (numpy)")

    def choose_runs(self, given: _Input) -> None:
        max_count, max_bytes, log_min, code_byte = given.u8(), given.u16(), given.u16(), given.u8()
        units = given.rest[: len(given.rest) // 20 * 20]  # whole 20-byte consume queue units
        codes = None if code_byte & 1 else frozenset({code_byte >> 1, 0, -1})
        args = (1 + max_count, max_bytes * 16, log_min * 64, codes)
        compiled = _outcome(lambda: self.module.choose_runs(_exact(units), *args))
        _same(
            compiled, _outcome(lambda: self.get_raw.choose_runs_python(units, *args)), "choose_runs"
        )

    def check_run(self, given: _Input) -> None:
        """Sizes from the front of the payload (int32, as runs_of packs them), then the chunk."""
        n, first, count = given.u8() % 16, given.u8() % 20, given.u8() % 20
        sizes, chunk = given.rest[: 4 * n], given.rest[4 * n :]
        sizes = sizes[: len(sizes) // 4 * 4]
        compiled = _outcome(
            lambda: self.module.check_run(_exact(chunk), _exact(sizes), first, count)
        )
        python = _outcome(lambda: self.get_raw.check_run_python(chunk, sizes, first, count))
        if first + count <= len(sizes) // 4 or compiled[0] == "ok":
            _same(compiled, python, "check_run")

    @classmethod
    def seeds(cls) -> Iterator[bytes]:
        from wharf.store.codec.records import encode_blank
        from wharf.store.model import MessageInput

        from tests.store.test_dispatch_columns import chunk
        from tests.store.test_record_batch import client_batch

        bodies = [b"a", b"b" * 700, b"c" * 64, b"d" * 3]
        log = b"".join(client_batch("T", [MessageInput(body, {})]) for body in bodies)
        log += client_batch("L" * 200, [MessageInput(b"v2", {})])  # a V2 record
        for blank in (b"", encode_blank(64)):
            buf = log + blank
            params = struct.pack(">BHHBHB", 0, 0, len(buf), 40, 20_000, 0xF1)
            yield _frame(params, cls.PARAMS, buf)
        props = [
            b"TAGS\x01t\x02",
            b"KEYS\x01k1 k2\x02UNIQ_KEY\x01U\x02",
            b"DELAY\x013\x02",
            b"x\x01\xc3\xa9\x02",
            b"",
        ]
        records = [("T", 0, i, 0, i, p) for i, p in enumerate(props)]
        records += [("TopicB", 1, 0, 4, 9, b"TAGS\x01a\x02TAGS\x01b\x02")]
        records += [("L" * 200, 2, 0, 5, 10, b"KEYS\x01k\x02")]  # a V2 record
        for lead in (0, 3):
            data, _ = chunk(records, lead)
            yield _frame(bytes([1, lead, 0, 0]), cls.PARAMS, data)
        units = b"".join(struct.pack(">qiq", 1000 + 100 * i, 100, i % 3) for i in range(8))
        yield _frame(struct.pack(">BBHHB", 2, 8, 4096, 0, 1), cls.PARAMS, units)
        sizes = array.array("i", [len(client_batch("T", [MessageInput(b, {})])) for b in bodies])
        yield _frame(bytes([3, len(bodies), 0, len(bodies)]), cls.PARAMS, sizes.tobytes() + log)


def _columns(got: Any) -> tuple:
    names = ("offsets", "sizes", "queue_ids", "queue_offsets", "sys_flags", "store_timestamps",
             "topic_ids", "tags_codes", "key_records", "key_hashes")  # fmt: skip
    return (got.topics, got.delay_texts, *(getattr(got, n).tolist() for n in names))


# --- wharf.store.fast._record_decoder ----------------------------------------------------------


class RecordDecoder(_Target):
    """The consumer's walk of pulled records (bytes from the broker) against
    client/records.py's ``walk_records_python``: every field of every message, or the same
    error."""

    name = "wharf.store.fast._record_decoder"
    PARAMS = 4  # start, end from the back

    def __init__(self, module: ModuleType | None = None) -> None:
        import wharf.client.records as records

        from tests.client.test_fast_record_decoder import _FIELDS

        self.records, self.fields = records, _FIELDS
        self.module = module or load_fuzzed(self.name)

    def swapped(self) -> list[tuple[Any, str]]:
        return [(self.records, "_compiled")]

    def run(self, data: bytes) -> None:
        given = _Input(data, self.PARAMS)
        buf = given.rest
        start, back = given.u8() % 8, given.u8() % 8
        end = max(0, len(buf) - back)
        records = self.records
        records._compiled = self.module
        compiled = self._read(lambda: records.parse_records(buf, None, start, end))
        python = self._read(lambda: records.walk_records_python(buf, start, end))
        _same(compiled, python, "walk")

    def _read(self, walk: Callable[[], list[Any]]) -> tuple[str, Any]:
        from wharf.client.errors import BrokerInternalError

        try:
            messages = walk()
        except BrokerInternalError as exc:
            return ("error", str(exc))
        return ("ok", [[_outcome(partial(getattr, m, f)) for f in self.fields] for m in messages])

    @classmethod
    def seeds(cls) -> Iterator[bytes]:
        from wharf.store.codec.records import encode_batch as store_encode_batch
        from wharf.store.model import MessageInput

        inputs = [
            MessageInput(b"a" * 100, {"KEYS": "k1 k2", "TAGS": "paid", "UNIQ_KEY": "U1"}),
            MessageInput(b"t", {"TIMER_DELIVER_MS": "1700000000000"}),
            MessageInput(b"z" * 300, {"RETRY_TOPIC": "orig", "é": "✓"}, born_timestamp=9),
        ]
        data = store_encode_batch("orders", 1, 40, inputs, 0, 99, "10.0.0.1:5", 1 << 20).data
        yield _frame(b"", cls.PARAMS, data)
        yield _frame(b"", cls.PARAMS, _compressed_records())
        long = store_encode_batch("L" * 249, 1, 40, inputs, len(data), 99, "10.0.0.1:5", 1 << 20)
        yield _frame(b"", cls.PARAMS, data + long.data)  # V1 then V2 records


# --- wharf.store.fast._record_encoder ----------------------------------------------------------


class RecordEncoder(_Target):
    """The producer's record encoder, counter ids and columns payload (the application's
    values) against send_records.encode_record, ids._counter_ids_python and
    send_stream.columns_payload's Python twin."""

    name = "wharf.store.fast._record_encoder"
    PARAMS = 12  # selector, count, born timestamp (8), unused

    def __init__(self, module: ModuleType | None = None) -> None:
        import wharf.client.send_stream as send_stream
        from wharf.store.codec.records import _crc32

        self.module = module or load_fuzzed(self.name)
        self.send_stream, self.crc32 = send_stream, _crc32

    def swapped(self) -> list[tuple[Any, str]]:
        return [(self.send_stream, "_columns_payload")]

    def run(self, data: bytes) -> None:
        given = _Input(data, self.PARAMS)
        selector, count, stamp = given.u8() % 3, given.u8(), given.i64()
        parts = given.rest.split(b"\xff")  # a text / body per part
        (self.encode, self.counter_ids, self.columns)[selector](count, stamp, parts)

    def encode(self, count: int, stamp: int, parts: list[bytes]) -> None:
        from wharf.store.codec.send_records import encode_record

        tail, bodies = parts[0], parts[1::2]
        ids = [p.decode("utf-8", "replace") for p in parts[2::2]]
        ids += [str(i) for i in range(len(bodies) - len(ids))]
        stamp = stamp & ((1 << 63) - 1)  # born: unsigned 64-bit in C, an int in Python

        def python() -> list[bytes]:
            return [
                encode_record(tail, body, f"UNIQ_KEY\x01{uid}\x02".encode(), 0, 0, stamp)
                for body, uid in zip(bodies, ids, strict=True)
            ]

        compiled = _outcome(
            lambda: self.module.encode_bare_records(_exact(tail), bodies, ids, stamp, self.crc32)
        )
        if compiled[0] == "ok":  # the C refuses (ValueError) what it cannot encode
            _same(compiled, _outcome(python), "encode_bare_records")

    def counter_ids(self, count: int, stamp: int, parts: list[bytes]) -> None:
        from wharf.store.codec.ids import _counter_ids_python

        head = parts[0].decode("utf-8", "replace")
        compiled = _outcome(lambda: self.module.counter_ids(head, stamp, count))
        if compiled == ("error", "ValueError") and len(head.encode()) > 64:
            return  # the C's documented refusal (its buffer): heads are 28 hex digits
        _same(compiled, _outcome(lambda: _counter_ids_python(head, stamp, count)), "counter_ids")

    def columns(self, count: int, stamp: int, parts: list[bytes]) -> None:
        batches = [[(p, "id") for p in part.split(b"\xfe")] for part in parts[: 1 + count % 40]]
        compiled = _outcome(lambda: self.module.columns_payload(batches))
        self.send_stream._columns_payload = None
        python = _outcome(lambda: self.send_stream.columns_payload(batches))
        _same(compiled, python, "columns_payload")

    @classmethod
    def seeds(cls) -> Iterator[bytes]:
        from wharf.store.codec.send_records import topic_tail

        stamp = struct.pack(">q", 1_790_000_000_123)
        for topic in ("t", "orders", "T" * 60, "L" * 249):  # the last: V2 records
            parts = [topic_tail(topic), b"a" * 100, b"ID1", b"b" * 5000, "é✓".encode()]
            yield _frame(bytes([0, 2]) + stamp, cls.PARAMS, b"\xff".join(parts))
        yield _frame(bytes([1, 5]) + stamp, cls.PARAMS, b"7F000001" + b"0" * 16)
        yield _frame(bytes([2, 3]) + stamp, cls.PARAMS, b"a\xfebb\xffc" * 3 + b"x" * 200)


TARGETS: dict[str, type] = {
    "kafka_convert": KafkaConvert,
    "record_check": RecordCheck,
    "log_scan": LogScan,
    "record_decoder": RecordDecoder,
    "record_encoder": RecordEncoder,
}
