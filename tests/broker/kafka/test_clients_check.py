"""The checks the client tests make on what a driver observed (``clients/scenario.py``
``check``), on made-up driver results, no broker: a faithful run passes, and each way a broker
can get the scenario wrong fails with a message naming it."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.broker.kafka.clients.scenario import ALL_CODECS, build, check, next_offsets

Result = dict[str, Any]


def faithful(spec: dict[str, Any]) -> Result:
    """What a driver reports when the broker does everything right: partition 0 to the first
    member, 1 to the second, dense offsets, commits at the ends."""
    ends = Counter[int]()
    delivered, phases = [], []
    for number, batch in enumerate(spec["batches"]):
        names = ("A", "B") if number == 0 else ("A", "C")
        records = []
        for rec in batch:
            p = rec["partition"]
            records.append(
                {
                    "member": names[p],
                    "partition": p,
                    "offset": ends[p],
                    "key": rec["key"],
                    "value": rec["value"],
                    "headers": [list(h) for h in rec["headers"]],
                }
            )
            delivered.append({"id": rec["id"], "partition": p, "offset": ends[p]})
            ends[p] += 1
        phases.append(
            {
                "members": {names[0]: [0], names[1]: [1]},
                "records": records,
                "committed": {str(p): ends[p] for p in range(spec["partitions"])},
            }
        )
    return {"created": True, "delivered": delivered, "phases": phases, "error": None}


def _duplicate(r: Result) -> None:
    r["phases"][0]["records"].append(copy.deepcopy(r["phases"][0]["records"][3]))


def _lose(r: Result) -> None:
    del r["phases"][0]["records"][4]


def _alter_header(r: Result) -> None:
    r["phases"][0]["records"][0]["headers"][1][1] = "00"


def _reorder_duplicate_headers(r: Result) -> None:
    heads = r["phases"][1]["records"][0]["headers"]
    heads[2], heads[3] = heads[3], heads[2]


def _null_key_as_empty(r: Result) -> None:
    rec = next(x for x in r["phases"][0]["records"] if x["key"] is None)
    rec["key"] = ""


def _tombstone_as_empty(r: Result) -> None:
    rec = next(x for x in r["phases"][0]["records"] if x["value"] is None)
    rec["value"] = ""


def _empty_key_as_null(r: Result) -> None:
    rec = next(x for x in r["phases"][0]["records"] if x["key"] == "")
    rec["key"] = None


def _empty_value_as_null(r: Result) -> None:
    rec = next(x for x in r["phases"][1]["records"] if x["value"] == "")
    rec["value"] = None


def _reread_after_member_change(r: Result) -> None:
    again = copy.deepcopy(r["phases"][0]["records"][1])
    again["member"] = "C"
    r["phases"][1]["records"].insert(0, again)


def _offsets_restart(r: Result) -> None:
    first = min(rec["offset"] for rec in r["phases"][1]["records"])
    for rec in r["phases"][1]["records"]:
        rec["offset"] -= first


def _offsets_gap(r: Result) -> None:
    for rec in r["phases"][0]["records"]:
        if rec["partition"] == 1 and rec["offset"] >= 5:
            rec["offset"] += 1


def _wrong_member(r: Result) -> None:
    r["phases"][0]["records"][0]["member"] = "B"


def _committed_short(r: Result) -> None:
    r["phases"][1]["committed"]["0"] -= 1


def _no_split(r: Result) -> None:
    r["phases"][0]["members"] = {"A": [0, 1], "B": []}


def _told_wrong_offset(r: Result) -> None:
    r["delivered"][2]["offset"] += 7


def _wrong_partition(r: Result) -> None:
    rec = r["phases"][0]["records"][0]
    rec["partition"] = 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_duplicate, "more than once"),
        (_lose, "never received"),
        (_alter_header, "never produced"),
        (_reorder_duplicate_headers, "never produced"),
        (_null_key_as_empty, "never produced"),
        (_tombstone_as_empty, "never produced"),
        (_empty_key_as_null, "never produced"),
        (_empty_value_as_null, "never produced"),
        (_reread_after_member_change, "earlier batch"),
        (_offsets_restart, "dense from 0"),
        (_offsets_gap, "dense from 0"),
        (_wrong_member, "assigned to"),
        (_committed_short, "committed offsets"),
        (_no_split, "did not split"),
        (_told_wrong_offset, "the producer was told"),
        (_wrong_partition, "produced to 0"),
    ],
)
def test_check_names_what_went_wrong(mutate: Callable[[Result], None], message: str) -> None:
    spec = build("check", "127.0.0.1:9", ALL_CODECS)
    result = faithful(spec)
    check(spec, copy.deepcopy(result))  # faithful: passes
    mutate(result)
    with pytest.raises(AssertionError, match=message):
        check(spec, result)


def test_a_faithful_run_passes_and_commits_are_next_offsets() -> None:
    spec = build("check", "127.0.0.1:9", ("none", "gzip"))
    result = faithful(spec)
    check(spec, result)
    assert sum(map(len, spec["batches"])) == 30  # 2 codecs x 2 partitions x 5, then 2 x 5
    assert next_offsets(result["phases"][0]["records"], "A") == {0: 10}
    assert next_offsets(result["phases"][1]["records"], "C") == {1: 15}
    # Every record kind of the scenario: null and empty keys and values, binary headers.
    batch = spec["batches"][0]
    keys, values = [r["key"] for r in batch], [r["value"] for r in batch]
    assert None in keys and "" in keys and None in values and "" in values
    assert all(bytes.fromhex(r["headers"][1][1]) == b"\x00\x01\x7f\x80\xfe\xff" for r in batch)


def test_the_kcat_spec_has_no_nul_header_and_no_empty_key_or_value() -> None:
    spec = build("kcat", "127.0.0.1:9", ALL_CODECS, nul_in_headers=False, empties=False)
    records = [r for batch in spec["batches"] for r in batch]
    assert len(records) == 5 * 2 * 3 + 2 * 3
    assert all(b"\x00" not in bytes.fromhex(v) for r in records for _, v in r["headers"])
    assert all(r["key"] != "" and r["value"] != "" for r in records)
    assert any(r["key"] is None for r in records) and any(r["value"] is None for r in records)
    check(spec, faithful(spec))
