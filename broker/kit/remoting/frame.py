"""RocketMQ 4.x remoting frames: ``RemotingCommand`` and its two header serializations, sans-IO.

Mirrors ``RemotingCommand`` (``encode``/``decode``), ``RemotingSerializable`` (the JSON header,
fastjson), ``RocketMQSerializable`` (the binary header) and ``NettyDecoder`` (a
``LengthFieldBasedFrameDecoder`` capped at ``com.rocketmq.remoting.frameMaxLength``)::

    int32 BE  length       = 4 + headerLength + bodyLength (everything after this field)
    int32 BE  serializeType << 24 | headerLength           (top byte 0 JSON, 1 ROCKETMQ)
    header    headerLength bytes
    body      the rest (may be empty)

Traps (see broker/frontends/remoting/README.md and the research note remoting.md):

- Answer JSON. The C++ client and ali-ons never look at the serialize-type byte and parse every
  header as JSON: a ROCKETMQ-serialized reply breaks them. ``encode`` writes the command's
  ``serialize_type`` (JSON unless set); ``response_to`` copies the request's, so only a request
  that came in binary gets a binary answer.
- extFields values are strings in every reply (the C++ client reads a JSON number as 0), but
  requests carry numbers and booleans (C++ ``"queueId":0``, ali-ons ``"k":false``): the decoder
  turns them into Java's text (``"0"``, ``"false"``) and ``encode`` does the same to non-strings.
- ``language`` is a name in JSON (``"CPP"``) and a byte in binary; either form, or a number in
  JSON, decodes; an unknown one becomes ``OTHER`` (it is informational).
- Missing JSON fields take RocketMQ's defaults (code 0, JAVA, version 0, opaque 0, flag 0, no
  remark, no extFields); unknown keys (``serializeTypeCurrentRPC``) are ignored.
- In the binary header an empty string and a missing one look the same (length 0: Java reads
  null); this decoder reads ``""`` for an empty extFields value and ``None`` for an empty remark.
- Invalid UTF-8 in a header is replaced (U+FFFD), as Java's decoders do, not rejected; raw
  control characters inside JSON strings are accepted (fastjson does), NaN/Infinity are not.
- The size limit bounds the whole frame including the length field, as Netty's does, and is
  checked as soon as the 4-byte length has arrived (nothing is buffered past it).
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from wharf.broker.kit.remoting.codes import (
    BROKER_VERSION,
    DEFAULT_MAX_FRAME_LENGTH,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    SerializeType,
)

__all__ = [
    "FrameDecoder",
    "FrameError",
    "RemotingCommand",
    "decode_frame",
    "decode_header",
    "encode",
    "encode_header",
    "encode_prefix",
    "ext_value_to_str",
    "response_to",
]

_INT32 = struct.Struct(">i")
_UINT16 = struct.Struct(">H")
# RocketMQSerializable's fixed part: code i16, language i8, version i16, opaque i32, flag i32.
_BINARY_FIXED = struct.Struct(">hbhii")
_BINARY_FIXED_SIZE = _BINARY_FIXED.size + 4 + 4  # + remark length + extFields length
_HEADER_LENGTH_MASK = 0xFFFFFF
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT16_MIN, _INT16_MAX = -(2**15), 2**15 - 1
_DECIMAL = re.compile(r"[+-]?[0-9]{1,19}")
_LANGUAGE_NAMES = {language.name: language for language in LanguageCode}
# Lookups, not IntEnum calls (~0.5-1 us each, four a request): int -> member / name.
_SERIALIZE_TYPES = {int(kind): kind for kind in SerializeType}
_LANGUAGE_NAME_OF = {int(language): language.name for language in LanguageCode}


class FrameError(ValueError):
    """A frame or header that cannot be decoded; ``str(error)`` is one log line.

    ``recoverable`` is True when the frame's length was sound: the bad frame was skipped and
    the decoder can go on with the bytes after it (``feed(b"")``); False when the stream lost
    its framing (the decoder refuses every later feed: close the connection). ``commands`` holds
    the commands decoded from the same ``feed`` before the bad frame, in order.
    """

    def __init__(self, message: str, *, recoverable: bool = False) -> None:
        super().__init__(message)
        self.recoverable = recoverable
        self.commands: list[RemotingCommand] = []


@dataclass(slots=True)
class RemotingCommand:
    """One request or response (RocketMQ's ``RemotingCommand``); ``code`` is a RequestCode in a
    request and a ResponseCode in a response."""

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """The sender waits for no answer. Not reliable from 4.x clients (the C++ client and
        ali-ons send their oneways with flag 0): answer whenever this is False."""
        return bool(self.flag & FLAG_ONEWAY)


def response_to(
    request: RemotingCommand,
    code: int,
    *,
    remark: str | None = None,
    ext_fields: Mapping[str, str] | None = None,
    body: bytes = b"",
    version: int = BROKER_VERSION,
) -> RemotingCommand:
    """The response to ``request``: its opaque, the response flag, the broker's version
    (``codes.BROKER_VERSION``) and its serialize type (JSON for every 4.x client; binary only
    for a request that came in binary)."""
    return RemotingCommand(
        code=code,
        language=LanguageCode.JAVA,
        version=version,
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        ext_fields=dict(ext_fields) if ext_fields else {},
        body=body,
        serialize_type=request.serialize_type,
    )


# --- encoding ---------------------------------------------------------------------------------


def ext_value_to_str(value: object) -> str:
    """An extFields value as Java writes it: strings as is, ``true``/``false``, integers in
    decimal (an integral float too: ``1.0`` -> ``"1"``). Raises TypeError for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    raise TypeError(f"extFields value must be a string, number or boolean, got {value!r}")


def encode(cmd: RemotingCommand, serialize_type: SerializeType | None = None) -> bytes:
    """The whole frame of ``cmd``, its header in ``serialize_type`` (default: the command's)."""
    return encode_prefix(cmd, serialize_type) + cmd.body


def encode_prefix(
    cmd: RemotingCommand,
    serialize_type: SerializeType | None = None,
    body_length: int | None = None,
) -> bytes:
    """The frame up to the body (length, type + header length, header), for writing a large body
    (pull records) without copying it; ``body_length`` defaults to ``len(cmd.body)``."""
    kind = cmd.serialize_type if serialize_type is None else serialize_type
    if type(kind) is not SerializeType:
        kind = SerializeType(kind)
    header = encode_header(cmd, kind)
    if body_length is None:
        body_length = len(cmd.body)
    length = 4 + len(header) + body_length
    if length > _INT32_MAX:
        raise ValueError(f"frame of {length} bytes does not fit the int32 length field")
    return _INT32.pack(length) + _INT32.pack((int(kind) << 24) | len(header)) + header


def encode_header(cmd: RemotingCommand, serialize_type: SerializeType) -> bytes:
    """The header bytes alone (JSON or ROCKETMQ); ValueError if a value cannot be represented."""
    _check_range("opaque", cmd.opaque, _INT32_MIN, _INT32_MAX)
    _check_range("flag", cmd.flag, _INT32_MIN, _INT32_MAX)
    ext = cmd.ext_fields
    if not all(type(k) is str and type(v) is str for k, v in ext.items()):
        ext = {str(k): ext_value_to_str(v) for k, v in ext.items()}
    if serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd, ext)
    elif serialize_type == SerializeType.JSON:
        header = _encode_json_header(cmd, ext)
    else:
        raise ValueError(f"unknown serialize type {serialize_type!r}")
    if len(header) > _HEADER_LENGTH_MASK:
        raise ValueError(f"header of {len(header)} bytes does not fit the 24-bit header length")
    return header


def _encode_json_header(cmd: RemotingCommand, ext: dict[str, str]) -> bytes:
    _check_range("code", cmd.code, _INT32_MIN, _INT32_MAX)
    _check_range("version", cmd.version, _INT32_MIN, _INT32_MAX)
    # fastjson's order (fields sorted by name) and its omissions (null remark, null extFields).
    header: dict[str, Any] = {"code": cmd.code}
    if ext:
        header["extFields"] = ext
    header["flag"] = cmd.flag
    language = _LANGUAGE_NAME_OF.get(cmd.language)
    header["language"] = language if language is not None else LanguageCode(cmd.language).name
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return orjson.dumps(header)


def _encode_binary_header(cmd: RemotingCommand, ext: dict[str, str]) -> bytes:
    _check_range("code", cmd.code, _INT16_MIN, _INT16_MAX)
    _check_range("version", cmd.version, _INT16_MIN, _INT16_MAX)
    parts = [_BINARY_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode() if cmd.remark else b""
    parts += [_INT32.pack(len(remark)), remark]
    fields: list[bytes] = []
    for key, value in ext.items():
        key_bytes, value_bytes = key.encode(), value.encode()
        if len(key_bytes) > _INT16_MAX:  # Java reads the key length as a signed short
            raise ValueError(f"extFields key of {len(key_bytes)} bytes is too long")
        fields += [_UINT16.pack(len(key_bytes)), key_bytes, _INT32.pack(len(value_bytes))]
        fields.append(value_bytes)
    ext_bytes = b"".join(fields)
    parts += [_INT32.pack(len(ext_bytes)), ext_bytes]
    return b"".join(parts)


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} {value} is out of range [{low}, {high}]")


# --- decoding ---------------------------------------------------------------------------------


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """One command from a frame without its leading length field (what Netty hands
    ``RemotingCommand.decode``): type + header length, header, body."""
    data = memoryview(frame)
    if len(data) < 4:
        raise FrameError(f"frame of {len(data)} bytes is shorter than its header length field")
    (word,) = _INT32.unpack_from(data, 0)
    kind_byte, header_length = (word >> 24) & 0xFF, word & _HEADER_LENGTH_MASK
    if header_length > len(data) - 4:
        raise FrameError(
            f"header length {header_length} exceeds the {len(data) - 4} bytes left in the frame"
        )
    kind = _SERIALIZE_TYPES.get(kind_byte)
    if kind is None:
        raise FrameError(f"unknown serialize type {kind_byte}")
    cmd = decode_header(data[4 : 4 + header_length], kind)
    cmd.body = bytes(data[4 + header_length :])
    return cmd


def decode_header(header: bytes | bytearray | memoryview, kind: SerializeType) -> RemotingCommand:
    """A command (without body) from its header bytes; FrameError if they do not parse."""
    if kind == SerializeType.JSON:
        return _decode_json_header(bytes(header))
    if kind == SerializeType.ROCKETMQ:
        return _decode_binary_header(memoryview(header))
    raise FrameError(f"unknown serialize type {kind!r}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# What orjson refuses and a 4.x client may still send (raw control characters in a string,
# bytes that are not UTF-8, integers past 64 bits), decoded as before: the stdlib, built once
# (json.loads with any option builds a new decoder at each call).
_JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant, strict=False)


def _decode_json_header(raw: bytes) -> RemotingCommand:
    try:
        header = orjson.loads(raw)  # 3 us a 350-byte send header, the stdlib's 8
    except orjson.JSONDecodeError:
        try:
            header = _JSON_DECODER.decode(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise FrameError(f"JSON header does not parse: {exc}") from None
    if not isinstance(header, dict):
        raise FrameError(f"JSON header is a {type(header).__name__}, not an object")
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        if isinstance(remark, (dict, list)):
            raise FrameError(f"JSON header field 'remark' is a {type(remark).__name__}")
        remark = ext_value_to_str(remark)
    get = header.get
    code, version, opaque, flag = get("code"), get("version"), get("opaque"), get("flag")
    # What every client sends: four int32s (the checks below take the rest, ~3 us a frame).
    if not (
        type(code) is int and type(version) is int and type(opaque) is int
        and type(flag) is int
        and _INT32_MIN <= code <= _INT32_MAX and _INT32_MIN <= version <= _INT32_MAX
        and _INT32_MIN <= opaque <= _INT32_MAX and _INT32_MIN <= flag <= _INT32_MAX
    ):  # fmt: skip
        code, version = _json_int(header, "code"), _json_int(header, "version")
        opaque, flag = _json_int(header, "opaque"), _json_int(header, "flag")
    name = get("language")
    language = _LANGUAGE_NAMES.get(name) if type(name) is str else None
    return RemotingCommand(
        code=code,
        language=language if language is not None else _json_language(name),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=_json_ext_fields(get("extFields")),
        serialize_type=SerializeType.JSON,
    )


def _json_int(header: dict[str, Any], name: str) -> int:
    value = header.get(name)
    if value is None:
        return 0
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if _DECIMAL.fullmatch(text):
            number = int(text)
    if number is None:
        raise FrameError(f"JSON header field {name!r} is not an integer: {value!r:.80}")
    if not _INT32_MIN <= number <= _INT32_MAX:
        raise FrameError(f"JSON header field {name!r} is out of the int32 range: {number}")
    return number


def _json_language(value: object) -> LanguageCode:
    if value is None:
        return LanguageCode.JAVA
    if isinstance(value, str):
        return _LANGUAGE_NAMES.get(value.strip().upper(), LanguageCode.OTHER)
    if isinstance(value, int) and not isinstance(value, bool):
        return _language_from_code(value)
    raise FrameError(f"JSON header field 'language' is a {type(value).__name__}: {value!r:.80}")


def _language_from_code(code: int) -> LanguageCode:
    try:
        return LanguageCode(code)
    except ValueError:
        return LanguageCode.OTHER


def _json_ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FrameError(f"JSON header field 'extFields' is a {type(value).__name__}")
    if all(type(item) is str for item in value.values()):
        return value  # a fresh dict of the decoder's: string keys, string values
    fields: dict[str, str] = {}
    for key, item in value.items():
        if item is None:  # Java's map holds null: the field is absent
            continue
        try:
            fields[key] = ext_value_to_str(item)
        except TypeError:
            raise FrameError(
                f"extFields value of {key!r:.80} is a {type(item).__name__}, "
                "not a string, number or boolean"
            ) from None
    return fields


def _decode_binary_header(data: memoryview) -> RemotingCommand:
    size = len(data)
    if size < _BINARY_FIXED_SIZE:
        raise FrameError(f"ROCKETMQ header of {size} bytes is shorter than {_BINARY_FIXED_SIZE}")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(data, 0)
    pos = _BINARY_FIXED.size
    remark_bytes, pos = _binary_str(data, pos, _INT32, "remark")
    (ext_length,) = _INT32.unpack_from(data, _need(data, pos, 4, "extFields length"))
    pos += 4
    if ext_length < 0 or ext_length > size - pos:
        raise FrameError(
            f"ROCKETMQ header extFields length {ext_length} exceeds the {size - pos} bytes left"
        )
    ext_view = data[pos : pos + ext_length]
    fields: dict[str, str] = {}
    at = 0
    while at < ext_length:
        key, at = _binary_str(ext_view, at, _UINT16, "extFields key")
        value, at = _binary_str(ext_view, at, _INT32, "extFields value")
        fields[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return RemotingCommand(
        code=code,
        language=_language_from_code(language & 0xFF),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark_bytes.decode("utf-8", "replace") or None,
        ext_fields=fields,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _need(data: memoryview, pos: int, count: int, what: str) -> int:
    if len(data) - pos < count:
        raise FrameError(f"ROCKETMQ header is truncated in the {what}")
    return pos


def _binary_str(
    data: memoryview, pos: int, length_struct: struct.Struct, what: str
) -> tuple[bytes, int]:
    (length,) = length_struct.unpack_from(data, _need(data, pos, length_struct.size, what))
    pos += length_struct.size
    if length < 0 or length > len(data) - pos:
        raise FrameError(
            f"ROCKETMQ header {what} length {length} exceeds the {len(data) - pos} bytes left"
        )
    return bytes(data[pos : pos + length]), pos + length


class FrameDecoder:
    """Incremental frame decoder for one connection: ``feed`` bytes as they arrive, get the
    complete commands back; partial frames stay buffered.

    Raises FrameError (see its ``recoverable`` and ``commands``) on a frame longer than
    ``max_frame_length`` (the whole frame, length field included: RocketMQ's default 16 MiB), a
    length shorter than the header length field, a header length past the frame, an unknown
    serialize type, or a header that does not parse.
    """

    __slots__ = ("_broken", "_buffer", "max_frame_length")

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        if max_frame_length < 8:
            raise ValueError(f"max_frame_length {max_frame_length} is below the 8-byte minimum")
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._broken: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded (a partial frame)."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if self._broken is not None:
            raise FrameError(f"stream already failed: {self._broken}")
        self._buffer += data
        buffer = self._buffer
        commands: list[RemotingCommand] = []
        pos = 0
        try:
            while len(buffer) - pos >= 4:
                (length,) = _INT32.unpack_from(buffer, pos)
                if length < 4 or length > self.max_frame_length - 4:
                    self._broken = self._length_problem(length)
                    raise FrameError(self._broken)
                end = pos + 4 + length
                if end > len(buffer):
                    break
                with memoryview(buffer) as view:  # a copy: no export may outlive the loop
                    frame = bytes(view[pos + 4 : end])
                pos = end  # the frame is consumed whether it decodes or not
                try:
                    commands.append(decode_frame(frame))
                except FrameError as exc:
                    exc.recoverable = True
                    raise
        except FrameError as exc:
            exc.commands = commands
            raise
        finally:
            if self._broken is not None:
                self._buffer = bytearray()
            elif pos:
                del buffer[:pos]
        return commands

    def _length_problem(self, length: int) -> str:
        if length < 0:
            return f"frame length {length} is negative"
        if length < 4:
            return f"frame length {length} is shorter than the 4-byte header length field"
        return (
            f"frame of {length + 4} bytes exceeds the maximum frame length {self.max_frame_length}"
        )
