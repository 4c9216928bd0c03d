"""Wharf's on-disk formats, defined once. Byte-compatible with Apache RocketMQ 4.x (big-endian).

OWNER NOTE (to be completed): this module holds every layout of the store -- CommitLog message
record and blank (end-of-file) marker, ConsumeQueue unit, IndexFile header/slot/entry, checkpoint,
offset message id -- as precompiled ``struct.Struct`` objects with byte diagrams here, sizes
asserted at import, plus the sans-IO codec (bytes in, values out) that the CommitLog, recovery,
dispatch and the Spark offline scanner all use. No I/O in this module.

CommitLog message record (v1, magic 0xDAA320A7)::

    offset size field
         0    4 TOTALSIZE           whole record, bytes
         4    4 MAGICCODE           0xDAA320A7 (message) / 0xCBD43194 (blank: end of segment)
         8    4 BODYCRC             zlib.crc32(body) & 0x7FFFFFFF (as RocketMQ's UtilAll.crc32)
        12    4 QUEUEID
        16    4 FLAG
        20    8 QUEUEOFFSET         logical offset in the ConsumeQueue
        28    8 PHYSICALOFFSET      offset of this record in the CommitLog
        36    4 SYSFLAG             0x1 compressed, 0x2 multi tags, 0x4/0x8/0xC transaction bits
        40    8 BORNTIMESTAMP       ms
        48    8 BORNHOST            ipv4 (4) + port (4)
        56    8 STORETIMESTAMP      ms
        64    8 STOREHOST           ipv4 (4) + port (4)
        72    4 RECONSUMETIMES
        76    8 PREPAREDTRANSACTIONOFFSET
        84    4 BODYLENGTH, then BODY
         .    1 TOPICLENGTH, then TOPIC (ascii, <= 127 bytes)
         .    2 PROPERTIESLENGTH, then PROPERTIES  "k\\x01v\\x02k\\x01v\\x02" (utf-8)

A record never spans segments: when it does not fit the rest of a segment the tail gets a blank
record (TOTALSIZE = bytes left, MAGICCODE = 0xCBD43194; at least 8 bytes) and the record starts
the next segment.
"""

from __future__ import annotations

# --- Magic codes -------------------------------------------------------------------------------
MESSAGE_MAGIC_CODE = 0xDAA320A7
BLANK_MAGIC_CODE = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4

# --- sysFlag bits (MessageSysFlag) -------------------------------------------------------------
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC

# --- Property names (MessageConst) and separators ----------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "  # several KEYS are joined by a space, as RocketMQ does

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_PRODUCER_GROUP = "PGROUP"

# --- Reserved topics ---------------------------------------------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

# --- ConsumeQueue unit: commitLogOffset (8) | size (4) | tagsCode (8) ---------------------------
CQ_STORE_UNIT_SIZE = 20

# --- IndexFile ----------------------------------------------------------------------------------
INDEX_HEADER_SIZE = 40
INDEX_HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
