"""The console's pages against a real broker (Starlette TestClient; the SDK fills the broker)."""

from __future__ import annotations

import html
import json
import re
import time

import grpc
import pytest
from starlette.testclient import TestClient
from wharf.client import MessageQueue
from wharf.client.sync import Admin, Producer, PullConsumer
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.console.conftest import make_client, post
from tests.console.helpers import wait_dispatched
from tests.harness import BrokerProcess, free_port


def row_of(html: str, attr: str, value: str) -> str:
    found = re.search(rf'<tr {attr}="{re.escape(value)}".*?</tr>', html, re.S)
    assert found, f"no row {attr}={value!r} in the page"
    return found.group(0)


def cells(row: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    ]


def test_overview_shows_broker_and_nav(client: TestClient, broker: BrokerProcess) -> None:
    page = client.get("/")
    assert page.status_code == 200
    for link in ('href="/topics"', 'href="/groups"', 'href="/messages"'):
        assert link in page.text
    assert broker.endpoint in page.text
    assert "ASYNC_FLUSH" in page.text and "master" in page.text and ">UP<" in page.text
    assert "No alerts." in page.text


def test_down_broker_shows_down_and_the_rest_works(broker: BrokerProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with make_client([broker.endpoint, dead]) as client:
        page = client.get("/")
        assert page.status_code == 200
        down = re.search(r'<tr class="down">.*?</tr>', page.text, re.S)
        assert down and dead in down.group(0) and "DOWN" in down.group(0)
        assert f"{dead} is down" in page.text  # an alert
        assert ">UP<" in page.text  # the live broker still shows
        assert client.get("/topics").status_code == 200
        # pages on the dead broker say so, without a trace
        chosen = client.get("/select", params={"broker": "1", "next": "/topics"})
        topics = chosen  # redirected to /topics on the chosen broker
        assert topics.status_code == 503
        assert f"Broker {dead} is unavailable" in topics.text
        assert "Traceback" not in topics.text
        away = client.get("/select", params={"broker": "0", "next": "//evil.example/"},
                          follow_redirects=False)  # fmt: skip
        assert away.headers["location"] == "/topics"  # no open redirect


def test_rates_json_counts_messages_in(
    client: TestClient, broker: BrokerProcess, name: str
) -> None:
    with Producer(broker.endpoint) as producer:
        deadline = time.monotonic() + 10
        rates: list[float] = []
        while time.monotonic() < deadline and not any(r > 0 for r in rates):
            producer.send_batch(name, [b"x"] * 50)
            time.sleep(0.3)
            series = client.get("/api/rates").json()["brokers"][0]["series"]
            rates = [p["in"] for p in series if p["in"] is not None]
    assert any(r > 0 for r in rates), rates


def test_topic_list_row_has_plain_message_count(
    client: TestClient, broker: BrokerProcess, name: str
) -> None:
    with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
        admin.create_topic(name, queue_nums=2, attributes={"message.type": "NORMAL"})
        producer.send_batch(name, [b"m"] * 7)
    wait_dispatched(broker.endpoint, name, 7)
    page = client.get("/topics", params={"q": name})
    assert page.status_code == 200
    row = cells(row_of(page.text, "data-topic", name))
    assert row[:6] == [name, "2", "2", "read-write", "NORMAL", "7"]


def test_topics_are_paged(client: TestClient, broker: BrokerProcess, name: str) -> None:
    with Admin(broker.endpoint) as admin:
        for i in range(105):
            admin.create_topic(f"{name}-{i:03d}", queue_nums=1)
    first = client.get("/topics", params={"q": name})
    assert "105 topics, page 1 of 2" in first.text
    assert first.text.count("data-topic=") == 100
    second = client.get("/topics", params={"q": name, "page": "2"})
    assert second.text.count("data-topic=") == 5
    assert f"{name}-104" in second.text
    assert client.get("/topics", params={"page": "x"}).status_code == 400


def test_create_update_delete_topic(client: TestClient, broker: BrokerProcess, name: str) -> None:
    made = post(
        client, "/topics", {"name": name, "queues": "3", "perm": "6", "message_type": "FIFO"}
    )
    assert made.status_code == 303
    page = client.get(made.headers["location"])
    assert f"topic {name} created with 3 queues" in page.text
    assert page.text.count('<tr><td class="num">') == 3  # three queue rows
    assert "FIFO" in page.text
    assert post(client, "/topics", {"name": name}).status_code == 409  # exists: clear message
    updated = post(client, f"/topics/{name}/update",
                   {"read_queues": "4", "write_queues": "4", "perm": "4", "message_type": ""})  # fmt: skip
    assert updated.status_code == 303
    with Admin(broker.endpoint) as admin:
        topic = next(t for t in admin.list_topics().topics if t.name == name)
    assert (topic.read_queue_nums, topic.perm, dict(topic.attributes)) == (4, 4, {})
    confirm = client.get(f"/topics/{name}/delete")
    assert "Type the topic name to confirm" in confirm.text
    refused = post(client, f"/topics/{name}/delete", {"confirm": "wrong"})
    assert refused.status_code == 400
    assert post(client, f"/topics/{name}/delete", {"confirm": name}).status_code == 303
    assert client.get(f"/topics/{name}").status_code == 404


def test_bad_input_is_a_clear_message(client: TestClient) -> None:
    for path, status, text in [
        ("/topics/no-such-topic", 404, "topic &#39;no-such-topic&#39; does not exist"),
        ("/messages/not-an-id", 404, "no message with id"),
        ("/messages?topic=no-such-topic&key=k", 200, "0 messages"),
        ("/messages?topic=no-such-topic&begin=2026-01-01T00:00", 404, "does not exist"),
        ("/messages?topic=t&begin=yesterday", 400, "not a time"),
        ("/messages?key=k", 400, "a topic is required"),
        ("/groups/no-such-group", 404, "does not exist"),
        ("/messages/AB/body", 404, "no message"),
        ("/nowhere", 404, "Not found"),
    ]:
        page = client.get(path)
        assert page.status_code == status, (path, page.text[-800:])
        assert text in page.text, (path, page.text[-800:])
        assert "Traceback" not in page.text and 'File "' not in page.text


def test_create_topic_with_bad_name_is_refused_clearly(client: TestClient) -> None:
    page = post(client, "/topics", {"name": "bad name!", "queues": "2"})
    assert page.status_code == 400
    assert "topic" in page.text.lower() and "Traceback" not in page.text
    assert post(client, "/topics", {"name": "x", "queues": "0"}).status_code == 400


def test_search_by_key_and_open_message(
    client: TestClient, broker: BrokerProcess, name: str
) -> None:
    body = json.dumps({"order": 17, "paid": True})
    with Producer(broker.endpoint) as producer:
        sent = producer.send(name, body.encode(), keys=["order-17"], tags="paid",
                             properties={"region": "eu"})  # fmt: skip
        producer.send(name, b"other", keys=["order-18"])
    wait_dispatched(broker.endpoint, name, 2)
    page = client.get("/messages", params={"topic": name, "key": "order-17"})
    assert "1 message with key" in page.text
    link = re.search(r'href="(/messages/[0-9A-F]{32})"', page.text)
    assert link and link.group(1) == f"/messages/{sent.offset_msg_id}"
    message = client.get(link.group(1))
    assert message.status_code == 200
    assert sent.msg_id in message.text and "order-17" in message.text
    assert "region" in message.text and "paid" in message.text
    assert '{\n  "order": 17,\n  "paid": true\n}' in html.unescape(message.text)  # pretty
    assert f"queue {sent.queue_id}, offset {sent.queue_offset}" in message.text
    hexed = client.get(link.group(1), params={"fmt": "hex"})
    assert "7b 22 6f 72 64 65 72 22" in hexed.text  # {"order"
    by_unique = client.get("/messages", params={"msg_id": sent.msg_id, "topic": name})
    assert by_unique.status_code == 200 and sent.offset_msg_id in by_unique.text


def test_large_body_is_truncated_with_download(
    client: TestClient, broker: BrokerProcess, name: str
) -> None:
    body = ("0123456789abcdef" * 8192).encode()  # 128 KiB, compressed on the wire
    with Producer(broker.endpoint) as producer:
        sent = producer.send(name, body)
    page = client.get(f"/messages/{sent.offset_msg_id}")
    assert "Showing the first 64.0 KiB of 128.0 KiB" in page.text
    download = client.get(f"/messages/{sent.offset_msg_id}/body")
    assert download.status_code == 200
    assert download.content == body
    assert "attachment" in download.headers["content-disposition"]


def test_time_range_search_is_paged(client: TestClient, broker: BrokerProcess, name: str) -> None:
    with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
        admin.create_topic(name, queue_nums=2)
        before = int(time.time() * 1000) - 1
        for queue in (0, 1):
            producer.send_batch(name, [f"q{queue}-{i}".encode() for i in range(15)], queue_id=queue)
    wait_dispatched(broker.endpoint, name, 30)
    page1 = client.get("/messages", params={"topic": name, "begin": str(before)})
    assert "30 messages in range" in page1.text and "page 1 of 2" in page1.text
    assert page1.text.count('<td class="preview">') == 20
    page2 = client.get("/messages", params={"topic": name, "begin": str(before), "page": "2"})
    previews = re.findall(r'<td class="preview">([^<]*)</td>', page2.text)
    assert previews == [f"q1-{i}" for i in range(5, 15)]
    later = client.get(
        "/messages", params={"topic": name, "begin": str(int(time.time() * 1000) + 60_000)}
    )
    assert "0 messages in range" in later.text


def _consume(broker: BrokerProcess, topic: str, group: str, count: int) -> None:
    with Admin(broker.endpoint) as admin, PullConsumer(broker.endpoint, group) as consumer:
        admin.create_group(group)
        queue = MessageQueue(topic, 0)
        consumer.commit(queue, count)


def test_groups_lag_trace_reset_and_skip(
    client: TestClient, broker: BrokerProcess, name: str
) -> None:
    group = f"{name}-g"
    with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
        admin.create_topic(name, queue_nums=1)
        start = int(time.time() * 1000) - 1
        sent = [producer.send(name, f"m{i}".encode(), keys=[f"k{i}"]) for i in range(10)]
    wait_dispatched(broker.endpoint, name, 10)
    _consume(broker, name, group, 4)  # committed offset 4: messages 0..3 consumed
    groups = client.get("/groups", params={"q": group})
    assert cells(row_of(groups.text, "data-group", group))[:2] == [group, "6"]
    detail = client.get(f"/groups/{group}")
    assert '<dd id="total-lag">6</dd>' in detail.text
    trace_done = client.get(f"/messages/{sent[2].offset_msg_id}")
    assert "consumed" in row_of(trace_done.text, "data-group", group)
    trace_not = client.get(f"/messages/{sent[7].offset_msg_id}")
    assert "not consumed" in row_of(trace_not.text, "data-group", group)
    reset = post(client, f"/groups/{group}/reset", {"topic": name, "time": str(start)})
    assert reset.status_code == 303
    assert "q0=0" in client.get(reset.headers["location"]).text
    assert '<dd id="total-lag">10</dd>' in client.get(f"/groups/{group}").text
    skipped = post(client, f"/groups/{group}/skip", {"topic": name})
    assert skipped.status_code == 303
    assert '<dd id="total-lag">0</dd>' in client.get(f"/groups/{group}").text
    bad = post(client, f"/groups/{group}/reset", {"topic": name, "time": "soon"})
    assert bad.status_code == 400 and "not a time" in bad.text


def test_dlq_listing_and_resend(client: TestClient, broker: BrokerProcess, name: str) -> None:
    group = f"{name}-g"
    with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
        admin.create_topic(name, queue_nums=1)
        admin.create_group(group)
        sent = producer.send(name, b"poison", keys=["bad-1"], properties={"why": "test"})
        view = admin.view_message(sent.offset_msg_id).message
    with grpc.insecure_channel(broker.endpoint) as channel:  # what a consumer's give-up does
        messaging_pb2_grpc.MessagingServiceStub(channel).SendMessageBack(
            messaging_pb2.SendMessageBackRequest(
                consumer_group=group,
                commit_log_offset=view.commit_log_offset,
                delay_level=-1,
                origin_topic=name,
                origin_msg_id=sent.msg_id,
            )
        )
    wait_dispatched(broker.endpoint, f"%DLQ%{group}", 1)
    page = client.get(f"/groups/{group}")
    dlq_row = re.search(r"<tr><td><a href=\"/topics/%25DLQ%25[^\"]*\">.*?</tr>", page.text, re.S)
    assert dlq_row and cells(dlq_row.group(0))[1] == "1"
    letter = re.search(r'name="msg_id" value="([0-9A-F]{32})"', page.text)
    assert letter, "the dead letter has a resend button"
    resent = post(client, f"/groups/{group}/resend", {"msg_id": letter.group(1)})
    assert resent.status_code == 303
    assert f"to {name} as" in client.get(resent.headers["location"]).text
    wait_dispatched(broker.endpoint, name, 2)
    found = client.get("/messages", params={"topic": name, "key": "bad-1"})
    assert "2 messages with key" in found.text  # the original and the resent copy
    with Admin(broker.endpoint) as admin:
        copies = admin.query_messages(name, "bad-1").messages
    assert sorted(c.body for c in copies) == [b"poison", b"poison"]
    assert all(c.properties.get("why") == "test" for c in copies)
    assert not any("RETRY_TOPIC" in c.properties for c in copies)


def test_send_test_message(client: TestClient, name: str) -> None:
    sent = post(
        client, "/messages/send", {"topic": name, "body": "hello", "key": "t-1", "tags": "a"}
    )
    assert sent.status_code == 303
    page = client.get(sent.headers["location"])
    assert "sent to" in page.text and "hello" in page.text and "t-1" in page.text
    assert post(client, "/messages/send", {"topic": name, "body": ""}).status_code == 400


@pytest.mark.parametrize("path", ["/topics", "/messages/send", "/groups/g/skip"])
def test_cross_site_post_is_refused(client: TestClient, path: str) -> None:
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/topics").text)
    assert token
    data = {"csrf_token": token.group(1), "name": "evil", "topic": "evil", "body": "x"}
    evil = client.post(path, data=data, headers={"Origin": "http://evil.example"})
    assert evil.status_code == 403
    by_referer = client.post(path, data=data, headers={"Referer": "http://evil.example/x"})
    assert by_referer.status_code == 403
    no_token = client.post(path, data={"name": "evil"}, headers={"Origin": "http://console.test"})
    assert no_token.status_code == 403 and "CSRF" in no_token.text
    assert client.get("/topics/evil").status_code == 404


def test_same_host_behind_a_tls_proxy_is_accepted(client: TestClient, name: str) -> None:
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/topics").text)
    assert token
    made = client.post(
        "/topics",
        data={"csrf_token": token.group(1), "name": name, "queues": "1"},
        headers={"Origin": "https://console.test"},  # the browser saw https, the console http
        follow_redirects=False,
    )
    assert made.status_code == 303
    evil = client.post(
        "/topics",
        data={"csrf_token": token.group(1), "name": f"{name}-x", "queues": "1"},
        headers={"Origin": "https://console.test.evil.example"},
        follow_redirects=False,
    )
    assert evil.status_code == 403
