"""`make console-screenshots`: one PNG per console page, taken by headless Debian chromium.

    python -m tests.console.screenshots --out client/console/screenshots

Starts a throw-away broker, fills it with sample data through the SDK (topics with messages, a
consumer group behind on one topic, a dead letter), starts `wharf console` on it and saves
overview.png, topics.png, topic.png, groups.png, group.png, messages.png and message.png.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import grpc
from wharf.client import MessageQueue
from wharf.client.sync import Admin, Producer, PullConsumer
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.console.browser import ConsoleProcess, browser_missing, chromium_driver
from tests.harness import BrokerProcess


def fill(endpoint: str) -> str:
    """Sample data; returns the offset msg id of a message to show."""
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queue_nums=4, attributes={"message.type": "NORMAL"})
        admin.create_topic("payments", queue_nums=2, attributes={"message.type": "FIFO"})
        admin.create_topic("audit-log", queue_nums=1)
        admin.create_group("billing")
        admin.create_group("shipping")
        shown = ""
        for i in range(120):
            body = json.dumps({"order": 1000 + i, "amount": round(9.5 * i, 2), "currency": "EUR"})
            result = producer.send(
                "orders", body.encode(), keys=[f"order-{1000 + i}"], tags="paid",
                properties={"region": "eu-west"},
            )  # fmt: skip
            if i == 17:
                shown = result.offset_msg_id
        producer.send_batch("payments", [f"payment {i}".encode() for i in range(40)])
        producer.send_batch("audit-log", [b"login ok", b"\x00\x01binary\xff"])
        view = admin.view_message(shown).message
    with PullConsumer(endpoint, "billing") as consumer:
        for queue in range(4):
            consumer.commit(MessageQueue("orders", queue), 25)
    with PullConsumer(endpoint, "shipping") as consumer:
        for queue in range(4):
            consumer.commit(MessageQueue("orders", queue), 30)
    with grpc.insecure_channel(endpoint) as channel:
        messaging_pb2_grpc.MessagingServiceStub(channel).SendMessageBack(
            messaging_pb2.SendMessageBackRequest(
                consumer_group="billing", commit_log_offset=view.commit_log_offset,
                delay_level=-1, origin_topic="orders", origin_msg_id=view.msg_id,
            )
        )  # fmt: skip
    return shown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("client/console/screenshots"))
    args = parser.parse_args()
    if (why := browser_missing()) is not None:
        raise SystemExit(why)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "broker") as broker:
        shown = fill(broker.endpoint)
        with ConsoleProcess(broker.endpoint, Path(tmp) / "console.log") as console:
            driver = chromium_driver(1400, 1000)
            try:
                # two overview loads a few seconds apart: the chart and the rates have samples
                with Producer(broker.endpoint) as producer:
                    for _ in range(8):
                        producer.send_batch("orders", [b"{}"] * 200)
                        time.sleep(0.5)
                pages = {
                    "overview": "/",
                    "topics": "/topics",
                    "topic": "/topics/orders",
                    "groups": "/groups",
                    "group": "/groups/billing",
                    "messages": "/messages?topic=orders&key=order-1017",
                    "message": f"/messages/{shown}",
                }
                for name, path in pages.items():
                    driver.get(console.url + path)
                    time.sleep(1.5 if name == "overview" else 0.3)
                    height = driver.execute_script("return document.body.scrollHeight")
                    driver.execute_cdp_cmd(  # the whole page in one shot (capped)
                        "Emulation.setDeviceMetricsOverride",
                        {
                            "width": 1400,
                            "height": max(700, min(int(height), 2400)),
                            "deviceScaleFactor": 1,
                            "mobile": False,
                        },
                    )
                    time.sleep(0.3)
                    driver.save_screenshot(str(args.out / f"{name}.png"))
                    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
                    print(args.out / f"{name}.png")
            finally:
                driver.quit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
