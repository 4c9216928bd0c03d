"""Send batches of pre-encoded records: the producer encodes CommitLog records, the broker checks
them, fills in the fields only it knows, and appends the batch with one copy.

RocketMQ's broker re-encodes every message it receives (MessageExtEncoder); in Python that
costs microseconds per message in the broker's single event-loop thread, plus the protobuf
decode and the per-message reply. Here the client, which has a core of its own, does the
encoding, and the broker's per-record work shrinks to one TOTALSIZE read and a CRC check
(everything else is checked and patched on numpy columns) (the body CRC travels from the producer to the disk: end-to-end integrity).

Wire form (``SendMessageRequest.records``): whole records in the layout of :mod:`wharf.store.codec.layout`,
concatenated, each self-delimited by TOTALSIZE; V1 records, or V2 for a topic over 127 bytes
(the tail from ``topic_tail`` says which: ``tail_magic``). The producer sets TOTALSIZE, MAGICCODE,
BODYCRC, FLAG, SYSFLAG (only the compressed bit), BORNTIMESTAMP, BODY, TOPIC and PROPERTIES;
it sends zeros in the fields the broker owns -- QUEUEID, QUEUEOFFSET, PHYSICALOFFSET,
BORNHOST (the peer address as the broker sees it), STORETIMESTAMP, STOREHOST,
RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET -- and ``wharf.store.fast.record_check.patch_records`` writes
them at append time (``wharf.store.fast.record_check.check_records`` checks a batch first).
Delayed messages (a DELAY property) are not accepted in this form: they are rewritten to
SCHEDULE_TOPIC_XXXX, which the message form does.

Sans-IO and numpy-free: the SDK imports this module (the broker's half is record_check).
"""

from __future__ import annotations

from wharf.store.codec.layout import (
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    partial_struct,
    topic_length_bytes,
)
from wharf.store.codec.properties import validate_topic
from wharf.store.codec.records import _PROPERTIES_LENGTH_BYTES, _crc32
from wharf.store.errors import InvalidMessageError

# SYSFLAG bits a producer may set on a record it sends (no transaction bits before wave 2).
ALLOWED_SYS_FLAGS = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS

# RECORD_HEADER as a producer sends it: the broker-owned fields (QUEUEID, QUEUEOFFSET,
# PHYSICALOFFSET, BORNHOST..PREPAREDTRANSACTIONOFFSET) are pad bytes (zeros), so one pack takes
# only the 7 fields the producer sets.
PRODUCER_FIELDS = (
    "TOTAL_SIZE", "MAGIC", "BODY_CRC", "FLAG", "SYS_FLAG", "BORN_TIMESTAMP", "BODY_LENGTH"
)  # fmt: skip
_SENT_HEADER = partial_struct(PRODUCER_FIELDS)
assert _SENT_HEADER.size == RECORD_HEADER.size
_pack_sent_header = _SENT_HEADER.pack


# A tail (TOPICLENGTH + TOPIC) longer than this is a V2 record's (two-byte TOPICLENGTH).
MAX_TAIL_LENGTH_V1 = 1 + MAX_TOPIC_LENGTH_V1


def topic_tail(topic: str) -> bytes:
    """TOPICLENGTH + TOPIC, the bytes that follow every body of ``topic`` (validated): one
    length byte up to 127 bytes of topic (a V1 record), two beyond (V2)."""
    raw = validate_topic(topic)
    return topic_length_bytes(len(raw)) + raw


def tail_magic(tail: bytes) -> int:
    """MAGICCODE of the records of a :func:`topic_tail`: its length says the version."""
    return MESSAGE_MAGIC_CODE if len(tail) <= MAX_TAIL_LENGTH_V1 else MESSAGE_MAGIC_CODE_V2


def encode_record(
    tail: bytes, body: bytes, properties: bytes, flag: int = 0, sys_flag: int = 0, born_ts: int = 0
) -> bytes:
    """One record for a send batch. ``tail`` from :func:`topic_tail`; ``properties`` already in
    the ``name\\x01value\\x02`` form (the caller guarantees no separator inside names/values;
    the broker re-checks the counts)."""
    props_len = len(properties)
    if props_len > MAX_PROPERTIES_LENGTH:
        raise InvalidMessageError(
            f"properties encode to {props_len} bytes; the limit is {MAX_PROPERTIES_LENGTH}"
        )
    body_len = len(body)
    return b"".join(
        (
            _pack_sent_header(
                RECORD_FIXED_SIZE + body_len + len(tail) - 1 + props_len,
                MESSAGE_MAGIC_CODE if len(tail) <= MAX_TAIL_LENGTH_V1 else MESSAGE_MAGIC_CODE_V2,
                _crc32(body) & 0x7FFFFFFF,
                flag,
                sys_flag,
                born_ts,
                body_len,
            ),
            body,
            tail,
            _PROPERTIES_LENGTH_BYTES[props_len],
            properties,
        )
    )
