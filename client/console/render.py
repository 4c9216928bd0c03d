"""How the console shows values: message bodies, times, sizes, durations (pure functions).

Bodies: ``body_view`` renders at most ``MAX_SHOWN_BYTES`` (64 KiB) of a body as ``text`` (UTF-8,
undecodable bytes replaced), ``json`` (pretty-printed, 2-space indent; only when the whole body
is shown and parses) or ``hex`` (16 bytes a line with offsets, at most 4 KiB shown, since hex is 4x
the size); ``auto`` picks json, then text for valid UTF-8, then hex. A longer body is cut and the
page offers the full body as a download.

Times are shown in UTC as ``YYYY-MM-DD HH:MM:SS.mmm``; an HTML ``datetime-local`` value is read
as UTC too (``parse_time``: ISO 8601, or epoch milliseconds as digits).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

MAX_SHOWN_BYTES = 64 * 1024
MAX_HEX_BYTES = 4 * 1024
FORMATS = ("auto", "text", "json", "hex")


@dataclass(frozen=True)
class BodyView:
    format: str  # the format used: text | json | hex
    text: str
    size: int  # the whole body, bytes
    shown: int  # bytes rendered
    json_ok: bool  # the whole body parses as JSON

    @property
    def truncated(self) -> bool:
        return self.shown < self.size


def body_view(body: bytes, wanted: str = "auto") -> BodyView:
    if wanted not in FORMATS:
        wanted = "auto"
    size = len(body)
    parsed: object = None
    json_ok = False
    if size <= MAX_SHOWN_BYTES:
        try:
            parsed = json.loads(body)
            json_ok = isinstance(parsed, dict | list)
        except (ValueError, UnicodeDecodeError):
            json_ok = False
    if wanted == "auto" and json_ok:
        wanted = "json"
    elif wanted == "auto":
        wanted = "text" if _is_utf8(body[:MAX_SHOWN_BYTES]) else "hex"
    if wanted == "json" and json_ok:
        return BodyView("json", json.dumps(parsed, indent=2, ensure_ascii=False), size, size, True)
    if wanted == "hex":
        part = body[:MAX_HEX_BYTES]
        return BodyView("hex", hex_dump(part), size, len(part), json_ok)
    part = body[:MAX_SHOWN_BYTES]
    return BodyView("text", part.decode("utf-8", errors="replace"), size, len(part), json_ok)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 3  # cut mid-character at the truncation point
    return True


def hex_dump(data: bytes) -> str:
    lines = []
    for start in range(0, len(data), 16):
        chunk = data[start : start + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {hexes:<47}  {printable}")
    return "\n".join(lines)


def fmt_time(ms: int | float | None) -> str:
    if not ms or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_duration(ms: int) -> str:
    seconds = max(0, int(ms // 1000))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds}s"


def fmt_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def parse_time(text: str) -> int:
    """Epoch ms from ``2026-11-22T10:00[:00[.fff]]`` (UTC unless an offset is given) or digits
    (epoch ms). ValueError with the accepted forms otherwise."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use YYYY-MM-DDTHH:MM[:SS], UTC, or epoch milliseconds)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def time_input(ms: int) -> str:
    """The value of a ``datetime-local`` input for epoch ms (UTC, seconds precision)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


PERM_NAMES = {6: "read-write", 4: "read-only", 2: "write-only", 0: "none"}


def fmt_perm(perm: int) -> str:
    return PERM_NAMES.get(perm, str(perm))
