"""Kafka's primitive types, sans-IO: a ``Reader`` over a request's bytes and a ``Writer`` that
builds a response. Big-endian fixed-width integers, zig-zag varints (record batches) and the
unsigned varints of flexible versions, strings and bytes with their int16 / int32 length
prefixes (-1 = null). Every read is bounds-checked: a short or lying frame raises
``DecodeError``, never IndexError or a giant allocation.
"""

from __future__ import annotations

import struct

__all__ = ["DecodeError", "Reader", "Writer", "zigzag_size"]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class DecodeError(ValueError):
    """Bytes that do not decode as the schema says (short, negative length, bad varint)."""


class Reader:
    """Reads primitives from ``data`` starting at ``pos``."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, size: int) -> int:
        pos = self.pos
        if size < 0 or pos + size > self.end:
            raise DecodeError(f"need {size} bytes at {pos}, have {self.end - pos}")
        self.pos = pos + size
        return pos

    def int8(self) -> int:
        return int(_I8.unpack_from(self.data, self._take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack_from(self.data, self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.data, self._take(4))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self.data, self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.data, self._take(8))[0])

    def boolean(self) -> bool:
        return self.int8() != 0

    def raw(self, size: int) -> bytes:
        pos = self._take(size)
        return bytes(self.data[pos : pos + size])

    def uvarint(self) -> int:
        """An unsigned LEB128 varint (at most 5 bytes: a 32-bit value)."""
        result = shift = 0
        data, pos, end = self.data, self.pos, self.end
        while True:
            if pos >= end:
                raise DecodeError("varint runs past the end")
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 63:
                raise DecodeError("varint longer than 10 bytes")
        self.pos = pos
        return result

    def varint(self) -> int:
        """A zig-zag signed varint (record fields)."""
        value = self.uvarint()
        return (value >> 1) ^ -(value & 1)

    def nullable_string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        return self._text(size)

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise DecodeError("null where a string is required")
        return value

    def _text(self, size: int) -> str:
        pos = self._take(size)
        try:
            return bytes(self.data[pos : pos + size]).decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string is not UTF-8: {exc}") from None

    def nullable_bytes(self) -> bytes | None:
        size = self.int32()
        if size < 0:
            return None
        return self.raw(size)

    def bytes_(self) -> bytes:
        value = self.nullable_bytes()
        return b"" if value is None else value

    # --- flexible versions (KIP-482) ----------------------------------------------------------
    def compact_nullable_string(self) -> str | None:
        size = self.uvarint() - 1
        if size < 0:
            return None
        return self._text(size)

    def compact_nullable_bytes(self) -> bytes | None:
        size = self.uvarint() - 1
        if size < 0:
            return None
        return self.raw(size)

    def skip_tags(self) -> None:
        """A tagged-field section: read past every field (none is understood here)."""
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


class Writer:
    """Appends primitives to a bytearray (``bytes(writer.buf)`` or ``writer.buf`` at the end)."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, value: int) -> None:
        self.buf += _I8.pack(value)

    def int16(self, value: int) -> None:
        self.buf += _I16.pack(value)

    def int32(self, value: int) -> None:
        self.buf += _I32.pack(value)

    def uint32(self, value: int) -> None:
        self.buf += _U32.pack(value)

    def int64(self, value: int) -> None:
        self.buf += _I64.pack(value)

    def boolean(self, value: bool) -> None:
        self.buf.append(1 if value else 0)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def uvarint(self, value: int) -> None:
        buf = self.buf
        while value > 0x7F:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    def varint(self, value: int) -> None:
        self.uvarint((value << 1) ^ (value >> 63))

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self.int16(-1)
            return
        data = value.encode()
        self.int16(len(data))
        self.buf += data

    def nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self.int32(-1)
            return
        self.int32(len(value))
        self.buf += value

    def compact_nullable_string(self, value: str | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        data = value.encode()
        self.uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        self.uvarint(len(value) + 1)
        self.buf += value

    def empty_tags(self) -> None:
        self.buf.append(0)


def zigzag_size(value: int) -> int:
    """Bytes of ``value`` as a zig-zag varint."""
    value = (value << 1) ^ (value >> 63)
    size = 1
    while value > 0x7F:
        value >>= 7
        size += 1
    return size
