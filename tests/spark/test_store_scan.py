"""The offline ``wharf-store`` scan over CommitLog segments written with the store's codec."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.segments import flip_body_byte, write_commit_log

pytestmark = pytest.mark.spark


def sample_messages(n: int) -> list[tuple[str, int, bytes, str, list[str]]]:
    return [
        (
            "orders" if i % 3 else "audit",
            i % 2,
            f"body-{i}-".encode() * (1 + i % 7),
            f"tag{i % 4}",
            [f"k{i}"] if i % 5 else [],
        )
        for i in range(n)
    ]


def test_scan_yields_every_record_with_one_partition_per_segment(spark, tmp_path: Path) -> None:
    written = write_commit_log(tmp_path, sample_messages(120), compress_every=9)
    segments = list((tmp_path / "commitlog").iterdir())
    assert len(segments) >= 3  # 4 KiB segments: the scan has to cross segment boundaries

    df = spark.read.format("wharf-store").load(str(tmp_path))
    assert df.rdd.getNumPartitions() == len(segments)
    rows = sorted(df.collect(), key=lambda r: r.commitLogOffset)

    assert len(rows) == len(written)
    for row, w in zip(rows, written, strict=True):
        assert (row.topic, row.queueId, row.offset) == (w.topic, w.queue_id, w.queue_offset)
        assert row.commitLogOffset == w.commit_log_offset
        assert row.body == w.body  # compressed ones come back decompressed
        assert (row.tags, list(row.keys), row.msgId) == (w.tags, w.keys, w.unique_id)
        assert row.properties == {"n": str(written.index(w))}
        assert row.corruptReason is None


def test_a_corrupted_record_fails_the_scan_by_default(spark, tmp_path: Path) -> None:
    written = write_commit_log(tmp_path, sample_messages(40))
    victim = written[17].commit_log_offset
    flip_body_byte(tmp_path, victim)
    with pytest.raises(Exception, match=f"corrupt record at commit log offset {victim}"):
        spark.read.format("wharf-store").load(str(tmp_path)).collect()


def test_report_mode_lists_the_corrupted_record_and_reads_the_rest(spark, tmp_path: Path) -> None:
    written = write_commit_log(tmp_path, sample_messages(40))
    victim = written[17]
    flip_body_byte(tmp_path, victim.commit_log_offset)

    df = spark.read.format("wharf-store").option("corruptRecords", "report").load(str(tmp_path))
    bad = df.where("corruptReason IS NOT NULL").collect()
    good = df.where("corruptReason IS NULL").collect()

    assert [(r.commitLogOffset, r.corruptReason) for r in bad] == [
        (victim.commit_log_offset, "body CRC mismatch")
    ]
    # The frame was intact: the header is still reported, the damaged body is not.
    assert (bad[0].topic, bad[0].queueId, bad[0].offset, bad[0].body) == (
        victim.topic, victim.queue_id, victim.queue_offset, None,
    )  # fmt: skip
    assert len(good) == len(written) - 1


def test_garbage_in_a_segment_reports_the_unreadable_range(tmp_path: Path) -> None:

    from wharf.client.spark.columns import store_schema
    from wharf.client.spark.store_scan import list_segments, parse_scan_options, scan_segment

    written = write_commit_log(tmp_path, sample_messages(30))
    victim = written[3].commit_log_offset  # in the first segment
    path = tmp_path / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    data[victim + 4 : victim + 8] = b"\x00\x00\xbe\xef"  # magic code destroyed
    path.write_bytes(bytes(data))

    opts = parse_scan_options({"path": str(tmp_path), "corruptRecords": "report"})
    schema = store_schema()
    first = list_segments(opts.commit_log_dir)[0]
    rows = [row for batch in scan_segment(opts, schema, first) for row in batch.to_pylist()]
    assert [r["commitLogOffset"] for r in rows[:3]] == [w.commit_log_offset for w in written[:3]]
    assert rows[3]["commitLogOffset"] == victim
    assert rows[3]["corruptReason"].startswith("bad magic code 0x0000BEEF")
    assert "unreadable" in rows[3]["corruptReason"]
    assert len(rows) == 4  # nothing after the damage is guessed at


def test_the_topic_option_filters_records(spark, tmp_path: Path) -> None:
    written = write_commit_log(tmp_path, sample_messages(30))
    df = spark.read.format("wharf-store").option("topic", "audit").load(str(tmp_path))
    assert df.count() == sum(1 for w in written if w.topic == "audit")


def test_a_directory_without_commitlog_is_refused(spark, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not a Wharf store directory"):
        spark.read.format("wharf-store").load(str(tmp_path)).collect()


def test_preallocated_empty_segments_are_not_corruption_but_a_zeroed_middle_is(
    tmp_path: Path,
) -> None:
    from wharf.client.spark.store_scan import list_segments

    write_commit_log(tmp_path, sample_messages(60))
    commit_log = tmp_path / "commitlog"
    names = sorted(p.name for p in commit_log.iterdir())
    next_start = int(names[-1]) + 4096
    (commit_log / f"{next_start:020d}").write_bytes(bytes(4096))  # preallocated, like the broker
    segments = list_segments(str(commit_log))
    assert [s.data_follows for s in segments] == [True] * (len(names) - 1) + [False, False]

    from wharf.client.spark.columns import store_schema
    from wharf.client.spark.store_scan import parse_scan_options, scan_segment

    (commit_log / names[1]).write_bytes(bytes(4096))  # a middle segment lost its data
    opts = parse_scan_options({"path": str(tmp_path), "corruptRecords": "report"})
    schema = store_schema()
    zeroed, preallocated = list_segments(str(commit_log))[1], list_segments(str(commit_log))[-1]
    rows = [r for b in scan_segment(opts, schema, zeroed) for r in b.to_pylist()]
    assert [(r["commitLogOffset"], r["topic"]) for r in rows] == [(int(names[1]), None)]
    assert "data lost" in rows[0]["corruptReason"]
    assert list(scan_segment(opts, schema, preallocated)) == []
