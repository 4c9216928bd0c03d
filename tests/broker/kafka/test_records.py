"""Record batches v2: what real producers build (aiokafka's builder, every codec) decodes
here; what Fetch encodes parses in aiokafka's reader with a valid CRC; corrupt, truncated
and old-format input is refused with the right code."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.records import Record, decode_batches, encode_batch

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
HEADERS = [("a", b"1"), ("bin", b"\x00\xff"), ("none", None)]


def _built(codec: int, count: int = 5, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, *producer, batch_size=1 << 20)
    for i in range(count):
        key = None if i == 1 else f"k{i}".encode()
        value = None if i == 2 else f"value-{i}".encode() * 20
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value, headers=HEADERS)
    return bytes(builder.build())


@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4, ZSTD])
def test_decodes_what_a_real_producer_builds(codec: int) -> None:
    (batch,) = decode_batches(_built(codec, producer=(7, 1, 40)))
    assert batch.codec == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 40)
    assert batch.last_sequence == 44
    assert len(batch.records) == 5
    first, nokey, tomb = batch.records[:3]
    assert first.key == b"k0" and first.value == b"value-0" * 20
    assert first.timestamp == 1_700_000_000_000 and first.offset_delta == 0
    assert nokey.key is None and tomb.value is None
    assert first.headers == HEADERS


def test_xerial_framed_snappy_as_the_java_client_sends() -> None:
    plain = _built(0)
    section = plain[61:]
    blocks = b"".join(
        struct.pack(">i", len(c)) + c
        for c in (
            bytes(cramjam.snappy.compress_raw(section[i : i + 50]))
            for i in range(0, len(section), 50)
        )
    )
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + blocks
    # the same header with codec 2 and the framed section, CRC recomputed by encode's helper
    records = decode_batches(plain)[0].records
    raw = bytearray(encode_batch(records, codec=0))
    attrs_at = 21
    raw[attrs_at : attrs_at + 2] = struct.pack(">h", SNAPPY)
    batch = bytes(raw[:61]) + framed
    batch = batch[:8] + struct.pack(">i", len(batch) - 12) + batch[12:]
    batch = batch[:17] + struct.pack(">I", crc32c.crc32c(batch[21:])) + batch[21:]
    (decoded,) = decode_batches(batch)
    assert decoded.records == records


@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4, ZSTD])
def test_encoded_batch_parses_in_a_real_client_with_valid_crc(codec: int) -> None:
    records = [
        Record(0, 1000, b"k", b"v", [("h", b"\x01")]),
        Record(3, 1005, None, None, []),  # offsets need not be consecutive
    ]
    data = encode_batch(records, base_offset=40, codec=codec)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    parsed = list(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in parsed] == [
        (40, 1000, b"k", b"v"),
        (43, 1005, None, None),
    ]
    assert list(parsed[0].headers) == [("h", b"\x01")]
    assert decode_batches(data)[0].records == records


def test_several_batches_in_one_partition() -> None:
    data = _built(0, 2) + _built(GZIP, 3)
    assert [len(b.records) for b in decode_batches(data)] == [2, 3]


def _code(data: bytes) -> Code:
    with pytest.raises(KafkaError) as info:
        decode_batches(data)
    return info.value.code


def test_a_flipped_bit_fails_the_crc() -> None:
    data = bytearray(_built(0))
    data[70] ^= 0x10
    assert _code(bytes(data)) == Code.CORRUPT_MESSAGE


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    data = bytearray(_built(0))
    data[0:8] = struct.pack(">q", 12345)
    data[12:16] = struct.pack(">i", 9)
    assert decode_batches(bytes(data))[0].base_offset == 12345


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_refused(magic: int) -> None:
    data = bytearray(_built(0))
    data[16] = magic
    assert _code(bytes(data)) == Code.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_truncated_and_lying_batches_are_corrupt() -> None:
    data = _built(0)
    assert _code(data[:-1]) == Code.CORRUPT_MESSAGE
    assert _code(data[:10]) == Code.CORRUPT_MESSAGE
    liar = bytearray(data)
    liar[57:61] = struct.pack(">i", 6)  # one record more than the section holds
    liar[17:21] = struct.pack(">I", crc32c.crc32c(bytes(liar[21:])))
    assert _code(bytes(liar)) == Code.CORRUPT_MESSAGE


def test_unknown_codec_and_bad_compressed_data() -> None:
    records = [Record(0, 1, b"k", b"v", [])]
    data = bytearray(encode_batch(records, codec=0))
    data[21:23] = struct.pack(">h", 5)  # codec 5 does not exist
    data[17:21] = struct.pack(">I", crc32c.crc32c(bytes(data[21:])))
    assert _code(bytes(data)) == Code.UNSUPPORTED_COMPRESSION_TYPE
    data[21:23] = struct.pack(">h", ZSTD)  # says zstd, holds plain records
    data[17:21] = struct.pack(">I", crc32c.crc32c(bytes(data[21:])))
    assert _code(bytes(data)) == Code.CORRUPT_MESSAGE


def test_a_decompression_bomb_is_refused() -> None:
    records = [Record(0, 1, b"k", b"\x00" * 200_000, [])]
    data = encode_batch(records, codec=GZIP)
    assert len(data) < 2000
    with pytest.raises(KafkaError) as info:
        decode_batches(data, max_size=100_000)
    assert info.value.code == Code.RECORD_LIST_TOO_LARGE
