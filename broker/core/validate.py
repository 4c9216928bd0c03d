"""THE message rules of a send, for every protocol (one set; a test per rule in
tests/broker/core/test_send.py). They are checked on the store's form of a message
(``MessageInput``: body + one property map), which every front end builds anyway:

- body: 1..maxMessageSize bytes (BODY_EMPTY / BODY_TOO_LARGE);
- tag (``TAGS``): not blank, no ``|`` (RocketMQ's tag-expression separator: such a tag could
  never be subscribed to), no ``\\x01``/``\\x02`` (ILLEGAL_TAG);
- keys (``KEYS``, space-joined as RocketMQ stores them): each key not blank, so the joined
  form has no empty segment; a front end that receives keys as a list checks each with
  ``check_keys`` before joining, since a key with a space would come back as two (ILLEGAL_KEY);
- properties: names not blank; names and values without ``\\x01``/``\\x02`` (the record's
  separators) (ILLEGAL_PROPERTY); at most ``MAX_USER_PROPERTIES`` user properties (names
  outside ``SYSTEM_PROPERTY_NAMES``) of at most ``MAX_USER_PROPERTIES_BYTES`` of names +
  values (RocketMQ proxy's limits) (PROPERTIES_TOO_LARGE).

Not a core rule: whether a user may SET a system property. wharf.v1 (like RocketMQ 4
remoting) carries TIMER_DELIVER_MS, TRAN_MSG, DELAY ... in the one property map, so it may;
apache.rocketmq.v2 has fields for them and refuses the names as user properties (its adapter).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from wharf.broker.core.errors import InvalidSend, Reason
from wharf.broker.core.txn_index import CONTROL
from wharf.store.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)
from wharf.store.model import MessageInput

MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTIES_BYTES = 16 * 1024
KEY_SEPARATOR = " "


def _has_separator(text: str) -> bool:
    return "\x01" in text or "\x02" in text


def check_body(size: int, max_size: int, where: str = "") -> None:
    if not size:
        raise InvalidSend(Reason.BODY_EMPTY, f"{where}body is empty")
    if size > max_size:
        raise InvalidSend(
            Reason.BODY_TOO_LARGE,
            f"{where}body is {size} bytes; maxMessageSize is {max_size} (compress it or split it)",
        )


def check_tag(tag: str, where: str = "") -> str:
    if not tag.strip() or "|" in tag or _has_separator(tag):
        raise InvalidSend(
            Reason.ILLEGAL_TAG, f"{where}tag {tag[:64]!r} must not be blank or contain '|'"
        )
    return tag


def check_keys(keys: Iterable[str], where: str = "") -> str:
    """Keys given as a list -> their stored form (space-joined); raises for a bad key."""
    for key in keys:
        if not key.strip() or KEY_SEPARATOR in key or _has_separator(key):
            raise InvalidSend(
                Reason.ILLEGAL_KEY, f"{where}key {key[:64]!r} is blank or contains a space"
            )
    return KEY_SEPARATOR.join(keys)


def check_properties(properties: Mapping[str, str], where: str = "") -> None:
    """Names and values of a property map (system ones included), and the user ones' limits."""
    count = chars = 0
    system = SYSTEM_PROPERTY_NAMES
    for name, value in properties.items():
        if (
            not name.strip()
            or "\x01" in name
            or "\x02" in name
            or "\x01" in value
            or "\x02" in value
            or name == CONTROL  # a Kafka transaction marker's: the broker's own to write
        ):
            raise InvalidSend(
                Reason.ILLEGAL_PROPERTY,
                f"{where}property {name[:64]!r}: names must not be blank nor {CONTROL}; "
                "names and values must not contain \\x01 or \\x02 (reserved as separators)",
            )
        if name not in system:
            count += 1
            chars += len(name) + len(value)
    if count > MAX_USER_PROPERTIES:
        raise InvalidSend(
            Reason.PROPERTIES_TOO_LARGE,
            f"{where}{count} user properties; the limit is {MAX_USER_PROPERTIES}",
        )
    if chars * 4 > MAX_USER_PROPERTIES_BYTES:  # UTF-8 is at most 4 bytes a character
        size = sum(
            len(name.encode()) + len(value.encode())
            for name, value in properties.items()
            if name not in system
        )
        if size > MAX_USER_PROPERTIES_BYTES:
            raise InvalidSend(
                Reason.PROPERTIES_TOO_LARGE,
                f"{where}user properties are {size} bytes; the limit is "
                f"{MAX_USER_PROPERTIES_BYTES}",
            )


def _blank_key(keys: str) -> bool:
    """True when space-joined keys hold a blank key (empty text, or an empty segment)."""
    if KEY_SEPARATOR not in keys:  # one key: the usual case
        return not keys.strip()
    return not all(key.strip() for key in keys.split(KEY_SEPARATOR))


def check_input(message: MessageInput, max_size: int, index: int = 0) -> None:
    """One store input against every rule; raises ``InvalidSend`` naming message #index."""
    props = message.properties
    size = len(message.body)
    if 0 < size <= max_size and len(props) == 1 and PROPERTY_UNIQ_KEY in props:
        return  # a bare body (the SDK's usual message): nothing more to check
    try:
        check_body(size, max_size)
        tag = props.get(PROPERTY_TAGS)
        if tag is not None:
            check_tag(tag)
        keys = props.get(PROPERTY_KEYS)
        if keys is not None and _blank_key(keys):
            raise InvalidSend(Reason.ILLEGAL_KEY, f"keys {keys[:64]!r} include a blank key")
        check_properties(props)
    except InvalidSend as exc:
        raise InvalidSend(exc.reason, f"message #{index}: {exc}") from None


def check_inputs(messages: Sequence[MessageInput], max_size: int) -> None:
    """Every message of a request, before anything is stored."""
    if not messages:
        raise InvalidSend(Reason.EMPTY, "messages is empty: send at least one message")
    for index, message in enumerate(messages):
        check_input(message, max_size, index)
