"""Apache's RocketMQ 4.9 Java client (``rocketmq-client:4.9.8``) and its admin tool ``mqadmin``
(``rocketmq-tools:4.9.8``) against the real daemon's remoting port, which is also its
NameServer (``namesrvAddr`` = that port). Maven fetches them by exact coordinates
(``tests/java/pom.xml``) and compiles the project's own test program
(``tests/java/src/.../Rmq4Scenarios.java``): ``make java-clients``, a prerequisite of ``make
test``. Without a JDK, Maven or that build the tests skip, saying what to run.

One JVM runs every client scenario at once, each on its own topics and groups (a JVM and its
clients take ~2 s to start; eight programs would pay it eight times), and prints one JSON line
per scenario: sync, async, oneway and batch sends; orderly sends and a MessageListenerOrderly
consumer; a delay level; tag and SQL92 push consumers (both postSubscriptionWhenPull modes);
RECONSUME_LATER retries into the DLQ; transactions with commit, rollback and check-back;
broadcasting; the lite pull consumer with subscribe and with assign + seek, each committing
with commitSync. Then ``mqadmin <command> -n ADDR`` as a user runs it, one JVM per command, its
output read as a user would read it."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests import javaclients
from tests.harness import BrokerProcess, Daemons

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# Delay level 2 = 3 s (timed); levels 3.. are the retries' (3 + reconsume times): 1 s each.
# Check-backs of a transaction left UNKNOW after 2 s: a half is checked once that old, and the
# client's END of a committed one is oneway (0.5 s left a loaded broker, load average ~20 on 2
# cores, little room to apply it first).
SETTINGS = {
    "defaultTopicQueueNums": 4,
    "messageDelayLevel": "1s 3s 1s 1s 1s 1s 1s 1s",
    "transactionTimeOut": 2000,
    "transactionCheckInterval": 500,
}


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        "java4", settings=SETTINGS, extra_args=["--remoting-listen", "127.0.0.1:0"]
    )


@pytest.fixture(scope="module")
def scenarios(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario's JSON line, by name (the JVM's output when one is missing)."""
    home = tmp_path_factory.mktemp("java-home")
    start = time.monotonic()
    proc = javaclients.run(
        home, "dev.wharf.javatests.Rmq4Scenarios", broker.remoting_endpoint, "all", timeout=280
    )
    out = javaclients.results(proc, time.monotonic() - start)
    out["_home"] = home
    return out


def scenario(scenarios: dict[str, Any], name: str) -> dict[str, Any]:
    return javaclients.scenario(scenarios, name, scenarios["_home"])


def bodies(received: list[dict[str, Any]]) -> list[str]:
    return sorted(m["body"] for m in received)


def test_sync_async_oneway_and_batch_sends_are_received_as_sent(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "produce")
    assert [s["status"] for s in out["sync"]] == ["SEND_OK"] * 4
    assert out["async_all_acked"] and len(out["async"]) == 4
    assert all(isinstance(s, dict) and s["status"] == "SEND_OK" for s in out["async"]), out["async"]
    assert out["batch"]["status"] == "SEND_OK"
    # The client's unique ids: 32 hex digits on an IPv4 host, 56 on an IPv6 one.
    assert all(re.fullmatch(r"[0-9A-F]{32}|[0-9A-F]{56}", s["msg_id"]) for s in out["sync"])
    kinds = {"sync": "TagS", "async": "TagA", "oneway": "TagO", "batch": "TagB"}
    expected = sorted(f"{kind}-{i}" for kind in kinds for i in range(4))
    received = out["received"]
    assert bodies(received) == expected  # each once: nothing lost, nothing twice
    for m in received:
        kind, _, i = m["body"].partition("-")
        assert (m["topic"], m["tags"], m["keys"]) == ("J_PRODUCE", kinds[kind], f"key-{m['body']}")
        assert m["props"] == {"seq": i}
        assert m["reconsume_times"] == 0
    # The id a sync send returned is the id the consumer sees (the unique key, UNIQ_KEY).
    assert {s["msg_id"] for s in out["sync"]} <= {m["msg_id"] for m in received}
    assert len({m["queue_id"] for m in received}) == 4  # spread over the topic's queues


def test_orderly_sends_are_consumed_in_order_per_queue(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "orderly")
    queue_of: dict[str, set[int]] = defaultdict(set)
    for s in out["sent"]:
        assert s["status"] == "SEND_OK"
        queue_of[s["body"].split("-")[0]].add(s["queue_id"])
    # MessageQueueSelector: order n -> queue n % 4, the same queue for all its messages.
    assert {order: sorted(q) for order, q in queue_of.items()} == {"o0": [0], "o1": [1], "o2": [2]}
    received = out["received"]
    assert bodies(received) == sorted(f"o{o}-{s}" for o in range(3) for s in range(10))
    for order in range(3):
        seqs = [
            int(m["body"].split("-")[1]) for m in received if m["body"].startswith(f"o{order}-")
        ]
        assert seqs == list(range(10)), f"order {order} consumed as {seqs}"
    per_queue: dict[int, list[int]] = defaultdict(list)
    for m in received:
        per_queue[m["queue_id"]].append(m["queue_offset"])
    assert all(offsets == sorted(offsets) for offsets in per_queue.values()), per_queue
    assert out["overlaps"] == []  # never two threads in one queue (the queue locks held)


def test_a_delay_level_delivers_after_its_delay(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "delay")
    assert out["live"] and out["sent"]["status"] == "SEND_OK"
    later = [m for m in out["received"] if m["body"] == "later"]
    assert len(later) == 1
    waited_ms = later[0]["received_ms"] - out["sent_ms"]
    # Level 2 = 3 s here; the consumer was already pulling (it had received "now").
    assert 2_800 <= waited_ms <= 8_000, waited_ms
    assert later[0]["topic"] == "J_DELAY" and later[0]["tags"] == "TagLater"


def test_tag_and_sql92_consumers_get_exactly_the_matching_messages(
    scenarios: dict[str, Any],
) -> None:
    out = scenario(scenarios, "filter")
    assert out["all_received"]
    received = out["received"]
    # f-i went to queue i % 4: queue 0 TagA, 1 TagB, 2 and 3 TagC; color red on queue 2.
    assert bodies(received["CG_TAGS"]) == sorted(f"f-{i}" for i in range(24) if i % 4 < 2)
    sql = sorted(f"f-{i}" for i in range(10, 24) if i % 4 == 2)
    assert bodies(received["CG_SQL"]) == sql  # the heartbeat's subscription
    assert bodies(received["CG_SQL_POST"]) == sql  # the pull's own (postSubscriptionWhenPull)
    for m in received["CG_SQL"] + received["CG_SQL_POST"]:
        assert m["props"]["color"] == "red" and int(m["props"]["n"]) >= 10


def test_committed_offsets_reach_queues_holding_nothing_that_matches_at_once(
    scenarios: dict[str, Any],
) -> None:
    """A queue whose messages a group's filter rejects: Apache's broker answers the pull over
    them PULL_RETRY_IMMEDIATELY at once with the offset past them, the client's next pull
    commits it, and consumerProgress shows no lag there within a second. The queues with
    matching messages wait for the client's own offset persist (10 s after its start)."""
    out = scenario(scenarios, "filter")
    at_end = out["queue_at_end_after_s"]
    assert {g: sorted(q) for g, q in at_end.items()} == {
        g: ["0", "1", "2", "3"] for g in ("CG_TAGS", "CG_SQL", "CG_SQL_POST")
    }, out["progress"]
    nothing_matches = {"CG_TAGS": "23", "CG_SQL": "013", "CG_SQL_POST": "013"}
    for group, queues in nothing_matches.items():
        for queue in queues:
            assert at_end[group][queue] < 5, (group, queue, at_end)


def test_reconsume_later_retries_then_moves_to_the_dlq(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "retry")
    times: dict[str, list[int]] = defaultdict(list)
    for m in out["received"]:
        times[m["body"]].append(m["reconsume_times"])
    assert sorted(times["once"]) == [0, 1]  # failed once, then consumed
    assert sorted(times["always"]) == [0, 1, 2]  # maxReconsumeTimes 2: then the DLQ, no 4th
    assert [(m["topic"], m["body"], m["keys"]) for m in out["dlq"]] == [
        ("%DLQ%CG_RETRY", "always", "retry-always")
    ]


def test_transactions_commit_rollback_and_check_back(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "transaction")
    assert out["states"] == {
        "commit": "SEND_OK/COMMIT_MESSAGE",
        "rollback": "SEND_OK/ROLLBACK_MESSAGE",
        "check": "SEND_OK/UNKNOW",
    }
    assert set(out["checks"]) == {"check"}  # only the open half is checked back
    assert bodies(out["received"]) == ["check", "commit"]  # never the rolled-back one


def test_broadcasting_consumers_each_get_every_message(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "broadcast")
    assert set(out["received"]) == {"bcast-1", "bcast-2"}
    for instance, received in out["received"].items():
        assert bodies(received) == [f"b-{i}" for i in range(6)], instance


def test_lite_pull_subscribe_and_assign_commit_their_offsets(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "litepull")
    every = [f"l-{i}" for i in range(8)]
    assert bodies(out["subscribe_received"]) == every
    # assign() starts a pull task per queue at the group's offset (0 for a new group, RocketMQ's
    # rule); seek(mq, 0) then cancels it, but a pull already in flight may still hand its batch
    # to the cache (4.9.8 DefaultLitePullConsumerImpl.seek: tryInterrupt, no wait), so a queue
    # can be read twice from 0. At-least-once allows that; a gap or a stranger would be ours.
    assigned = bodies(out["assign_received"])
    assert sorted(set(assigned)) == every
    assert all(assigned.count(b) <= 2 for b in every), assigned
    assert out["assign_queues"] == 4
    for group in ("CG_LITE_SUB", "CG_LITE_ASSIGN"):
        progress = out["committed"][group]
        assert (progress["consumer_offsets"], progress["lag"]) == (8, 0), (group, progress)


def test_the_scenarios_take_one_jvm_and_seconds(scenarios: dict[str, Any]) -> None:
    """Every scenario ran to its end in the one JVM, and it exited by itself."""
    proc = scenarios["_proc"]
    names = {"produce", "orderly", "delay", "filter", "retry", "transaction", "broadcast"}
    assert names | {"litepull"} <= set(scenarios), proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]


# --- mqadmin ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mqadmin(
    broker: BrokerProcess, scenarios: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., str]:
    """``mqadmin(cmd, *args)``'s stdout (javaclients.mqadmin), after the client scenarios
    (their topics and groups are what it lists)."""
    return javaclients.mqadmin(tmp_path_factory.mktemp("mqadmin-home"), broker.remoting_endpoint)


def test_mqadmin_commands(mqadmin: Callable[..., str], broker: BrokerProcess) -> None:
    addr = broker.remoting_endpoint
    # ~4 s of JVM each: two at a time (2 cores), the topic created before it is read back.
    created = mqadmin("updateTopic", "-b", addr, "-t", "J_ADMIN", "-r", "3", "-w", "3")
    assert f"create topic to {addr} success." in created
    assert "TopicConfig [topicName=J_ADMIN, readQueueNums=3, writeQueueNums=3, perm=RW-" in created
    commands = {
        "clusterList": ["clusterList"],
        "topicList": ["topicList"],
        "topicRoute": ["topicRoute", "-t", "J_ADMIN"],
        "topicStatus": ["topicStatus", "-t", "J_PRODUCE"],
        "consumerProgress": ["consumerProgress", "-g", "CG_SQL"],
        "brokerStatus": ["brokerStatus", "-b", addr],
        "getBrokerConfig": ["getBrokerConfig", "-b", addr],
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(mqadmin, *args) for name, args in commands.items()}
        out = {name: f.result() for name, f in futures.items()}

    # clusterList: one master of its cluster at the remoting address, the version as tools
    # parse it, and "#Hour" (hours since the earliest stored message) under one.
    rows = [line.split() for line in out["clusterList"].splitlines() if addr in line]
    assert len(rows) == 1, out["clusterList"]
    row = rows[0]
    assert row[2:5] == ["0", addr, "V4_9_8"], out["clusterList"]
    assert 0 <= float(row[-2]) < 1, out["clusterList"]

    topics = set(out["topicList"].split())
    assert {"J_PRODUCE", "J_FILTER", "J_ADMIN", "%DLQ%CG_RETRY", "%RETRY%CG_PRODUCE"} <= topics

    route = json.loads(re.sub(r"\{(\d+):", r'{"\1":', out["topicRoute"]))  # fastjson's {0:"..."}
    assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": addr}]
    [queues] = route["queueDatas"]
    assert (queues["readQueueNums"], queues["writeQueueNums"], queues["perm"]) == (3, 3, 6)

    status = [line.split() for line in out["topicStatus"].splitlines()[1:] if line.strip()]
    assert sorted(int(r[1]) for r in status) == [0, 1, 2, 3], out["topicStatus"]
    assert sum(int(r[3]) for r in status) == 16  # the produce scenario's sends

    progress = out["consumerProgress"]
    filter_rows = [line.split() for line in progress.splitlines() if line.startswith("J_FILTER")]
    assert len(filter_rows) == 4, progress
    assert all(r[3] == r[4] == "6" and r[5] == "0" for r in filter_rows), progress
    assert re.search(r"^Diff Total: 0$", progress, re.M), progress

    broker_status = dict(
        (k.strip(), v.strip())
        for k, _, v in (line.partition(":") for line in out["brokerStatus"].splitlines())
    )
    assert broker_status["brokerVersionDesc"] == "V4_9_8"
    assert broker_status["brokerVersion"] == "409"
    earliest = int(broker_status["earliestMessageTimeStamp"])
    assert int(broker_status["bootTimestamp"]) - 1000 <= earliest <= time.time() * 1000
    assert int(broker_status["msgPutTotalTodayNow"]) > 0

    config = out["getBrokerConfig"]
    assert f"============{addr}============" in config
    settings = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition("=") for line in config.splitlines())
    )
    assert settings["defaultTopicQueueNums"] == "4"
    assert settings["transactionCheckInterval"] == "500"
