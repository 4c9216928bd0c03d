"""Everything the CLI prints: rich tables for people, JSON for scripts, errors on stderr."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message as ProtoMessage
from rich.console import Console
from rich.table import Table
from wharf.client.message import ReceivedMessage


class Output:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=True)
        self.err_console = Console(stderr=True, highlight=False, soft_wrap=True)

    def data(self, value: Any) -> None:
        """Print one JSON document (json mode)."""
        sys.stdout.write(json.dumps(value, default=str, sort_keys=True) + "\n")
        sys.stdout.flush()

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*("" if cell is None else str(cell) for cell in row))
        self.console.print(table)

    def line(self, text: str) -> None:
        self.console.print(text, markup=False)

    def error(self, code: str, message: str) -> None:
        if self.as_json:
            sys.stderr.write(json.dumps({"error": {"code": code, "message": message}}) + "\n")
        else:
            self.err_console.print(f"wharf: error: {code}: {message}", markup=False)


def proto_dict(message: ProtoMessage) -> dict[str, Any]:
    """A proto reply as a plain dict: snake_case names, every field present, 64-bit integers
    as JSON numbers (MessageToDict would make them strings), enums by name, bytes base64."""
    return {
        field.name: _field_value(field, getattr(message, field.name))
        for field in message.DESCRIPTOR.fields
    }


def _field_value(field: Any, value: Any) -> Any:  # a FieldDescriptor (upb or pure)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {str(k): _scalar(value_field, v) for k, v in value.items()}
    if _is_repeated(field):
        return [_scalar(field, v) for v in value]
    return _scalar(field, value)


def _is_repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf >= 6
    if repeated is not None:
        return bool(repeated)
    return bool(getattr(field, "label", None) == FieldDescriptor.LABEL_REPEATED)


def _scalar(field: Any, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return proto_dict(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def message_dict(msg: ReceivedMessage) -> dict[str, Any]:
    try:
        body: str = msg.body.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        body = base64.b64encode(msg.body).decode()
        encoding = "base64"
    return {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "tags": msg.tags,
        "keys": list(msg.keys),
        "properties": msg.properties,
        "body": body,
        "body_encoding": encoding,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "reconsume_times": msg.reconsume_times,
        "commit_log_offset": msg.commit_log_offset,
    }


def fmt_ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def message_line(msg: ReceivedMessage) -> str:
    tags = f" tags={msg.tags}" if msg.tags else ""
    keys = f" keys={','.join(msg.keys)}" if msg.keys else ""
    return (
        f"{msg.topic}#{msg.queue_id}@{msg.queue_offset} {msg.msg_id}{tags}{keys} "
        f"{msg.body.decode('utf-8', errors='replace')}"
    )
