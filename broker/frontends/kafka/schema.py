"""The schema language the request and response tables (``apis.py``) are written in, once: a
``Struct`` is a list of ``F(name, type, versions)`` fields, each present in a version range
(Kafka's JSON ``"versions": "3+"``). ``Struct.decode(reader, version, flexible)`` yields a
dict of the fields present in that version; ``Struct.encode(writer, value, version,
flexible)`` writes a dict, a missing field as its default (0, "", [], null for nullable
types, or the field's ``default``).

Flexible versions (KIP-482: compact lengths, a tagged-field section closing every struct) are
supported by the same tables; which versions are flexible is the API's ``flexible_from``.
No tagged field is ever written (an empty section: librdkafka 2.0.2 cannot read ApiVersions v3
tags, kafka.md), and tagged fields read are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wharf.broker.frontends.kafka.wire import DecodeError, Reader, Writer

__all__ = [
    "BOOL",
    "BYTES",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "NBYTES",
    "NSTRING",
    "RECORDS",
    "STRING",
    "Api",
    "Array",
    "F",
    "Struct",
]

MAX_ARRAY = 1 << 20  # elements: a lying count fails here, not in a huge loop


class Type:
    """A wire type: how one value reads and writes, and its default."""

    default: Any = None

    def read(self, r: Reader, flex: bool) -> Any:
        raise NotImplementedError

    def write(self, w: Writer, value: Any, flex: bool, version: int) -> None:
        raise NotImplementedError


class _Int(Type):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.default = 0

    def read(self, r: Reader, flex: bool) -> Any:
        return getattr(r, self.kind)()

    def write(self, w: Writer, value: Any, flex: bool, version: int) -> None:
        getattr(w, self.kind)(value)


class _Bool(Type):
    default = False

    def read(self, r: Reader, flex: bool) -> Any:
        return r.boolean()

    def write(self, w: Writer, value: Any, flex: bool, version: int) -> None:
        w.boolean(bool(value))


class _String(Type):
    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.default = None if nullable else ""

    def read(self, r: Reader, flex: bool) -> Any:
        value = r.compact_nullable_string() if flex else r.nullable_string()
        if value is None and not self.nullable:
            raise DecodeError("null where a string is required")
        return value

    def write(self, w: Writer, value: Any, flex: bool, version: int) -> None:
        if value is None and not self.nullable:
            value = ""
        if flex:
            w.compact_nullable_string(value)
        else:
            w.nullable_string(value)


class _Bytes(Type):
    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.default = None if nullable else b""

    def read(self, r: Reader, flex: bool) -> Any:
        value = r.compact_nullable_bytes() if flex else r.nullable_bytes()
        if value is None and not self.nullable:
            raise DecodeError("null where bytes are required")
        return value

    def write(self, w: Writer, value: Any, flex: bool, version: int) -> None:
        if value is None and not self.nullable:
            value = b""
        if flex:
            w.compact_nullable_bytes(value)
        else:
            w.nullable_bytes(value)


INT8 = _Int("int8")
INT16 = _Int("int16")
INT32 = _Int("int32")
INT64 = _Int("int64")
BOOL = _Bool()
STRING = _String(False)
NSTRING = _String(True)
BYTES = _Bytes(False)
NBYTES = _Bytes(True)
RECORDS = _Bytes(True)  # record batches: nullable bytes, parsed by records.py


@dataclass(frozen=True)
class F:
    """A field: ``versions`` "3+" (from 3), "0-2" (0 to 2) or "0" (only 0)."""

    name: str
    type: Type
    versions: str = "0+"
    default: Any = None

    def present(self, version: int) -> bool:
        lo, plus, hi = self.versions.partition("+")
        if plus:
            return version >= int(lo)
        lo, _, hi = self.versions.partition("-")
        return int(lo) <= version <= int(hi or lo)

    def default_value(self) -> Any:
        if self.default is not None:
            return self.default
        kind = self.type
        if isinstance(kind, Array):
            return None if kind.nullable else []
        if isinstance(kind, Struct):
            return {}
        return kind.default


class Struct(Type):
    """A sequence of fields (a request or response body, or an array's element)."""

    def __init__(self, *fields: F) -> None:
        self.fields = fields
        self.default = {}

    def decode(self, r: Reader, version: int, flex: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in self.fields:
            if field.present(version):
                kind = field.type
                if isinstance(kind, (Struct, Array)):
                    out[field.name] = kind.read_v(r, flex, version)
                else:
                    out[field.name] = kind.read(r, flex)
            else:
                out[field.name] = field.default_value()
        if flex:
            r.skip_tags()
        return out

    def encode(self, w: Writer, value: dict[str, Any], version: int, flex: bool) -> None:
        for field in self.fields:
            if not field.present(version):
                continue
            item = value.get(field.name)
            if item is None and field.name not in value:
                item = field.default_value()
            field.type.write(w, item, flex, version)
        if flex:
            w.empty_tags()

    def read_v(self, r: Reader, flex: bool, version: int) -> Any:
        return self.decode(r, version, flex)

    def read(self, r: Reader, flex: bool) -> Any:  # (a Struct inside an Array: read_v)
        raise NotImplementedError

    def write(self, w: Writer, value: Any, flex: bool, version: int) -> None:
        self.encode(w, value or {}, version, flex)


class Array(Type):
    """An array of ``of`` (a primitive type or a Struct); ``nullable``: -1 is null."""

    def __init__(self, of: Type, nullable: bool = False) -> None:
        self.of = of
        self.nullable = nullable
        self.default = None if nullable else []

    def read_v(self, r: Reader, flex: bool, version: int) -> Any:
        count = r.uvarint() - 1 if flex else r.int32()
        if count < 0:
            if not self.nullable:
                raise DecodeError("null where an array is required")
            return None
        if count > MAX_ARRAY or count > r.remaining:
            raise DecodeError(f"array of {count} elements in {r.remaining} bytes")
        of = self.of
        if isinstance(of, (Struct, Array)):
            return [of.read_v(r, flex, version) for _ in range(count)]
        return [of.read(r, flex) for _ in range(count)]

    def read(self, r: Reader, flex: bool) -> Any:
        raise NotImplementedError

    def write(self, w: Writer, value: Any, flex: bool, version: int) -> None:
        if value is None:
            if flex:
                w.uvarint(0)
            else:
                w.int32(-1)
            return
        if flex:
            w.uvarint(len(value) + 1)
        else:
            w.int32(len(value))
        of = self.of
        for item in value:
            of.write(w, item, flex, version)


NO_FLEX = 99  # flexible_from of an API with no flexible version served


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    request: Struct
    response: Struct
    flexible_from: int = NO_FLEX

    def flexible(self, version: int) -> bool:
        return version >= self.flexible_from
