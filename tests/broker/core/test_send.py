"""The messaging core's send admission (broker/core/send.py, validate.py): one round-robin
counter per topic for every protocol, one set of message rules, topic admission (auto-create,
permission bits, the broker's own topics), dedupe, and the front ends' mapping of its
refusals. Unit tests over FakeStore; the cross-protocol ones in a real BrokerController."""

from __future__ import annotations

import grpc
import pytest
from wharf.broker.controller import BrokerController
from wharf.broker.core import InvalidSend, Planned, Reason, SendCore, Stored
from wharf.broker.core.errors import ShuttingDown, TopicNotFound, TopicNotWritable
from wharf.broker.core.validate import (
    MAX_USER_PROPERTIES,
    check_input,
    check_inputs,
    check_keys,
)
from wharf.broker.errors import status_for
from wharf.broker.meta.topics import TopicConfig, TopicConfigManager
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.store.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
)
from wharf.store.model import MessageInput, PutStatus
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.fakes import FakeStore
from tests.inproc import InProcFactory

MAX = 1024
META = (("x-mq-client-id", "host@1@0@abc"), ("authorization", "MQv2-HMAC-SHA1 Credential=, x"))


def core(auto_create: bool = True) -> SendCore:
    return SendCore(FakeStore(), TopicConfigManager(4, auto_create))


def msg(body: bytes = b"x", /, **props: str) -> MessageInput:
    return MessageInput(body, {PROPERTY_UNIQ_KEY: "U1", **props}, 0, 0, 0, "127.0.0.1:1")


def refused(message: MessageInput) -> Reason:
    with pytest.raises(InvalidSend) as caught:
        check_input(message, MAX)
    return caught.value.reason


# --- the message rules, one test each ------------------------------------------------------


def test_a_bare_body_and_a_full_message_pass() -> None:
    check_input(msg(), MAX)
    check_input(msg(**{PROPERTY_TAGS: "TagA", PROPERTY_KEYS: "k1 k2", "p": "v"}), MAX)


def test_body_must_be_1_to_max_bytes() -> None:
    assert refused(msg(b"")) is Reason.BODY_EMPTY
    assert refused(msg(b"x" * (MAX + 1))) is Reason.BODY_TOO_LARGE
    check_input(msg(b"x" * MAX), MAX)


@pytest.mark.parametrize("tag", ["", " ", "\t", "a|b", "|", "a\x01", "b\x02"])
def test_a_blank_tag_or_one_with_a_bar_or_separator_is_refused(tag: str) -> None:
    assert refused(msg(**{PROPERTY_TAGS: tag})) is Reason.ILLEGAL_TAG


@pytest.mark.parametrize("keys", ["", " ", "a  b", " a", "a "])
def test_stored_keys_with_a_blank_key_are_refused(keys: str) -> None:
    assert refused(msg(**{PROPERTY_KEYS: keys})) is Reason.ILLEGAL_KEY


@pytest.mark.parametrize("keys", [[""], [" "], ["a b"], ["ok", "x\x01"]])
def test_listed_keys_blank_or_with_a_space_are_refused(keys: list[str]) -> None:
    with pytest.raises(InvalidSend) as caught:
        check_keys(keys)
    assert caught.value.reason is Reason.ILLEGAL_KEY
    assert check_keys(["k1", "k2"]) == "k1 k2"


@pytest.mark.parametrize(
    "props",
    [{"": "v"}, {" ": "v"}, {"a\x01": "v"}, {"a": "v\x02"}, {"a": "\x01"}],
)
def test_property_names_blank_or_with_separators_are_refused(props: dict[str, str]) -> None:
    assert refused(msg(**props)) is Reason.ILLEGAL_PROPERTY


def test_user_properties_are_at_most_128_and_16_kib() -> None:
    many = {f"k{i}": "v" for i in range(MAX_USER_PROPERTIES + 1)}
    assert refused(msg(**many)) is Reason.PROPERTIES_TOO_LARGE
    check_input(msg(**{f"k{i}": "v" for i in range(MAX_USER_PROPERTIES)}), MAX)
    assert refused(msg(big="v" * (16 * 1024))) is Reason.PROPERTIES_TOO_LARGE


def test_system_properties_are_allowed_and_not_counted_as_user_ones() -> None:
    # wharf.v1 (like RocketMQ 4 remoting) sets timer/transaction properties in the one map.
    props = {f"k{i}": "v" for i in range(MAX_USER_PROPERTIES)}
    check_input(msg(**props, **{PROPERTY_TIMER_DELIVER_MS: "1", PROPERTY_TAGS: "t"}), MAX)


def test_a_request_needs_a_message_and_every_message_is_checked() -> None:
    with pytest.raises(InvalidSend) as caught:
        check_inputs([], MAX)
    assert caught.value.reason is Reason.EMPTY
    with pytest.raises(InvalidSend, match="message #1"):
        check_inputs([msg(), msg(**{PROPERTY_TAGS: "a|b"})], MAX)


def test_refusals_are_broker_errors_for_the_v1_table() -> None:
    code, text = status_for(InvalidSend(Reason.ILLEGAL_TAG, "bad tag"))
    assert (code, text) == (grpc.StatusCode.INVALID_ARGUMENT, "bad tag")
    assert status_for(TopicNotFound(Reason.TOPIC_NOT_FOUND, "x"))[0] is grpc.StatusCode.NOT_FOUND
    denied = TopicNotWritable(Reason.NOT_WRITABLE, "x")
    assert status_for(denied)[0] is grpc.StatusCode.PERMISSION_DENIED
    closing = ShuttingDown(Reason.SHUTTING_DOWN, "x")
    assert status_for(closing)[0] is grpc.StatusCode.UNAVAILABLE


# --- topic admission and queue selection ---------------------------------------------------


def test_an_unknown_topic_is_auto_created_with_the_default_queues() -> None:
    c = core()
    topic, queue_id = c.admit("fresh")
    assert (topic.name, topic.write_queue_nums, queue_id) == ("fresh", 4, 0)
    assert c.topics.get("fresh") is topic


def test_an_unknown_topic_without_auto_create_is_not_found() -> None:
    with pytest.raises(TopicNotFound) as caught:
        core(auto_create=False).topic("nope")
    assert caught.value.reason is Reason.TOPIC_NOT_FOUND


def test_a_topic_without_the_write_bit_is_refused() -> None:
    c = core()
    c.topics.table["ro"] = TopicConfig("ro", 4, 4, perm=4)
    with pytest.raises(TopicNotWritable):
        c.topic("ro")


def test_illegal_and_reserved_names_are_illegal_topics() -> None:
    c = core()
    for name in ("a b", "TBW102", "SCHEDULE_TOPIC_XXXX", "%DLQ%g", "rmq_sys_wheel"):
        with pytest.raises(InvalidSend) as caught:
            c.topic(name)
        assert caught.value.reason is Reason.ILLEGAL_TOPIC, name


def test_own_topics_false_refuses_retry_topics_that_v1_may_write() -> None:
    c = core()
    assert c.topic("%RETRY%g").name == "%RETRY%g"  # wharf.v1 today
    with pytest.raises(InvalidSend, match="broker's own") as caught:
        c.topic("%RETRY%g", own_topics=False)  # apache.rocketmq.v2 today
    assert caught.value.reason is Reason.OWN_TOPIC


def test_round_robin_is_one_turn_per_call_per_topic_and_explicit_queues_are_checked() -> None:
    c = core()
    assert [c.admit("a")[1] for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    assert c.admit("b")[1] == 0  # its own counter
    assert c.admit("a", 3)[1] == 3
    assert c.admit("a")[1] == 2  # an explicit queue takes no turn
    with pytest.raises(InvalidSend) as caught:
        c.admit("a", 4)
    assert caught.value.reason is Reason.ILLEGAL_QUEUE


def test_a_request_s_batches_are_admitted_by_the_same_rules_and_turns_as_one_send() -> None:
    """``admit_round_robin`` (a multi-topic request): the turns ``admit`` would give, one per
    batch; a refused batch takes no turn and fails alone; a topic admitted before is checked
    again once its config changed or it was deleted."""
    c = core(auto_create=False)
    for name in ("a", "b"):
        c.topics.table[name] = TopicConfig(name, 4, 4)
    refused: dict[int, Exception] = {1: ValueError("empty batch")}
    assert c.admit_round_robin(["a", "a", "b", "nope", "a b", "a"], refused) == [0, 0, 1]
    assert sorted(refused) == [1, 3, 4]
    assert isinstance(refused[3], TopicNotFound) and isinstance(refused[4], InvalidSend)
    assert c.admit("a")[1] == 2  # the same counter as every other send
    assert c.admit_round_robin(["b", "a"], {}) == [1, 3]  # distinct, admitted: the C passes
    names = ["".join("a"), "".join("b")]  # equal strings, other objects (as a request's are)
    assert c.admit_round_robin(names, {}) == [0, 2]
    # The admitted names become the broker's own objects (later lookups compare identities).
    assert names[0] is c.topics.table["a"].name and names[1] is c.topics.table["b"].name
    loop_names = ["".join("b"), "".join("b")]  # a topic twice: the loop's path
    assert c.admit_round_robin(loop_names, {}) == [3, 0]
    assert all(name is c.topics.table["b"].name for name in loop_names)
    c.topics.replace(TopicConfig("a", 4, 4, perm=4))  # read-only now
    refused = {}
    assert c.admit_round_robin(["b", "a"], refused) == [1]
    assert isinstance(refused[1], TopicNotWritable)
    c.topics.delete("b")
    refused = {}
    assert c.admit_round_robin(["b"], refused) == []
    assert isinstance(refused[0], TopicNotFound)
    c.shutting_down = lambda: True
    with pytest.raises(ShuttingDown):
        c.admit_round_robin(["a"], {})


def test_admitted_topics_are_checked_again_after_a_replica_loads_its_master_s_table() -> None:
    """A replica clears its topic table and loads the master's, whose dataVersion may equal
    its own: the admitted topics are taken anew all the same."""
    c = core(auto_create=False)
    c.topics.table["a"] = TopicConfig("a", 4, 4)
    assert c.admit_round_robin(["a"], {}) == [0]
    read_only = TopicConfig("a", 4, 4, perm=4).to_json()
    c.topics.table.clear()
    c.topics.load(
        {"topicConfigTable": {"a": read_only}, "dataVersion": {"counter": c.topics.version}}
    )
    refused: dict[int, Exception] = {}
    assert c.admit_round_robin(["a"], refused) == []
    assert isinstance(refused[0], TopicNotWritable)


def test_a_shutting_down_broker_refuses_sends() -> None:
    c = core()
    c.shutting_down = lambda: True
    with pytest.raises(ShuttingDown):
        c.admit("a")


def test_lookup_is_the_admission_of_a_topic_named_before_a_send() -> None:
    # Kafka's Metadata names topics before producing: the same rules, no writable check, and
    # creation only when asked (and never while shutting down).
    c = core()
    with pytest.raises(TopicNotFound):
        c.lookup("later", create=False)
    assert c.topics.get("later") is None
    assert c.lookup("later", create=True).name == "later"
    c.topics.table["ro"] = TopicConfig("ro", 4, 4, perm=4)
    assert c.lookup("ro", create=False).name == "ro"  # read-only: found, writes refused later
    for name, reason in (
        ("a b", Reason.ILLEGAL_TOPIC),
        ("..", Reason.ILLEGAL_TOPIC),
        ("%RETRY%g", Reason.OWN_TOPIC),
    ):
        for create in (False, True):
            with pytest.raises(InvalidSend) as caught:
                c.lookup(name, create=create, own_topics=False)
            assert caught.value.reason is reason, (name, create)
    c.shutting_down = lambda: True
    assert c.lookup("later", create=False).name == "later"
    with pytest.raises(ShuttingDown):
        c.lookup("another", create=True)
    assert c.topics.get("another") is None


# --- the store calls -----------------------------------------------------------------------


async def test_put_once_stores_a_message_id_once() -> None:
    c = core()
    first = await c.put_once("t", [Planned("M1", 2, msg())])
    again = await c.put_once("t", [Planned("M1", 2, msg()), Planned("M2", 2, msg())])
    assert first == [Stored("M1", 2, 0, PutStatus.PUT_OK)]
    assert again[0] == Stored("M1", 2, 0, PutStatus.PUT_OK, retried=True)
    assert again[1] == Stored("M2", 2, 1, PutStatus.PUT_OK)
    assert [len(q) for q in c.store.queues.values()] == [2]


async def test_put_and_the_split_forms_reach_the_store() -> None:
    c = core()
    put = await c.put("t", 1, [msg()])
    appended = c.append("t", 1, [msg()])
    durable = await c.durable(appended)
    assert (put.status, put.append.first_queue_offset) == (PutStatus.PUT_OK, 0)
    assert (durable.status, appended.appended.first_queue_offset) == (PutStatus.PUT_OK, 1)


# --- both front ends over one core ---------------------------------------------------------


@pytest.fixture
async def controller(inproc_broker: InProcFactory) -> BrokerController:
    return (await inproc_broker(FakeStore)).controller


async def test_v1_and_v2_sends_to_one_topic_rotate_through_one_counter(
    controller: BrokerController,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{controller.grpc_port}") as channel:
        v1 = messaging_pb2_grpc.MessagingServiceStub(channel)
        v2 = service_pb2_grpc.MessagingServiceStub(channel)
        for i in range(8):
            if i % 2 == 0:
                request = messaging_pb2.SendMessageRequest(
                    topic="both", messages=[common_pb2.Message(body=b"b", unique_id=f"M{i}")]
                )
                assert (await v1.SendMessage(request)).results[0].queue_id == i
            else:
                m = d.Message(body=b"b")
                m.topic.name = "both"
                m.system_properties.message_id = f"M{i}"
                m.system_properties.message_type = d.NORMAL
                sent = await v2.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META)
                assert sent.status.code == d.Code.OK, sent.status
    store: FakeStore = controller.store  # type: ignore[assignment]
    where = {m.properties[PROPERTY_UNIQ_KEY]: q for (_, q), ms in store.queues.items() for m in ms}
    assert [where[f"M{i}"] for i in range(8)] == list(range(8))  # consecutive queues


async def test_both_front_ends_refuse_a_tag_with_a_bar(controller: BrokerController) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{controller.grpc_port}") as channel:
        v1 = messaging_pb2_grpc.MessagingServiceStub(channel)
        v2 = service_pb2_grpc.MessagingServiceStub(channel)
        for tag in ("a|b", " "):
            request = messaging_pb2.SendMessageRequest(
                topic="tags", messages=[common_pb2.Message(body=b"b", tags=tag)]
            )
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await v1.SendMessage(request)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "tag" in (caught.value.details() or "")
            m = d.Message(body=b"b")
            m.topic.name = "tags"
            m.system_properties.message_id = "T1"
            m.system_properties.tag = tag
            sent = await v2.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META)
            assert sent.status.code == d.Code.ILLEGAL_MESSAGE_TAG
        # A blank key in a wharf.v1 request (stored as "a  b") is refused too.
        request = messaging_pb2.SendMessageRequest(
            topic="tags", messages=[common_pb2.Message(body=b"b", keys=["a", "", "b"])]
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await v1.SendMessage(request)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert not controller.store.queues  # type: ignore[attr-defined]
