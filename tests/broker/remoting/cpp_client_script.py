"""Drives the RocketMQ 4.x C++ client (PyPI ``rocketmq==0.4.4``: Apache's librocketmq behind
ctypes) in ``.venv-rmq4``; run by test_cpp_client.py as a subprocess:

    python cpp_client_script.py NAMESRV_ADDR MODE JSON_ARGS

Modes: ``send`` (sync, oneway, orderly or batch sends of the given messages) and ``consume``
(a PushConsumer until it has received ``expect`` messages, ``stop_file`` exists, or ``timeout``
seconds; with ``progress`` it appends each body it gets to that file, as it gets it). Prints one
JSON line last. Ends with ``os._exit``: the wrapper's destructors shut the client down a
second time at interpreter exit, which can hang or crash the library.
"""

import json
import os
import sys
import threading
import time

from rocketmq.client import Message, MessageModel, Producer, PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import MSG_CALLBACK_FUNC, _CConsumeStatus, dll


def message_of(topic, spec):
    msg = Message(topic)
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    if spec.get("keys"):
        msg.set_keys(spec["keys"])
    for name, value in (spec.get("props") or {}).items():
        msg.set_property(name, value)
    if spec.get("delay"):
        msg.set_delay_time_level(int(spec["delay"]))
    msg.set_body(spec["body"])
    return msg


def send(namesrv, args):
    producer = Producer(args["group"], timeout=args.get("timeout_ms", 10000))
    producer.set_namesrv_addr(namesrv)
    producer.start()
    topic = args["topic"]
    results = []
    try:
        specs = args["messages"]
        mode = args.get("mode", "sync")
        if mode == "batch":
            result = producer.send_batch([message_of(topic, s) for s in specs])
            results.append(
                {"status": int(result.status), "msg_id": result.msg_id, "offset": result.offset}
            )
        for spec in specs if mode != "batch" else []:
            msg = message_of(topic, spec)
            if mode == "oneway":
                producer.send_oneway(msg)
                results.append(None)
                continue
            if mode == "orderly":
                result = producer.send_orderly(msg, int(args["arg"]))
            else:
                result = producer.send_sync(msg)
            results.append(
                {"status": int(result.status), "msg_id": result.msg_id, "offset": result.offset}
            )
            if args.get("pause_s"):
                time.sleep(args["pause_s"])
    except Exception as exc:  # reported, not raised: the test decides
        print(json.dumps({"sent": results, "error": repr(exc)}))
        sys.stdout.flush()
        os._exit(0)
    if args.get("linger_s"):
        time.sleep(args["linger_s"])  # oneway: let the library write before shutdown
    producer.shutdown()
    print(json.dumps({"sent": results, "error": None}))
    sys.stdout.flush()
    os._exit(0)


def subscribe(consumer, topic, callback, expression):
    """``PushConsumer.subscribe`` without its bug: the wrapper re-raises the callback's
    exception inside the ctypes callback, so the status the library sees is undefined (often
    0, CONSUME_SUCCESS: the failed message is never retried). Here a raise is
    RECONSUME_LATER, always."""

    def on_message(_consumer, msg):
        try:
            callback(RecvMessage(msg))
        except Exception:
            return _CConsumeStatus.RECONSUME_LATER.value
        return _CConsumeStatus.CONSUME_SUCCESS.value

    ffi_check(dll.Subscribe(consumer._handle, topic.encode(), expression.encode()))
    func = MSG_CALLBACK_FUNC(on_message)
    consumer._callback_refs.append(func)
    ffi_check(dll.RegisterMessageCallback(consumer._handle, func))


def consume(namesrv, args):
    received = []
    lock = threading.Lock()
    done = threading.Event()
    props = args.get("props", [])
    fail_once = set(args.get("fail_once", []))
    failed = set()
    seen = set()
    bodies = set(args.get("bodies", []))  # done once each of these was consumed (and expect)
    # Consumers that share a group cannot know their share: the test reads every consumer's
    # progress and tells them all to stop (stop_file) once the union is complete.
    progress = open(args["progress"], "a") if args.get("progress") else None  # noqa: SIM115
    stop_file = args.get("stop_file")

    def on_message(msg):
        body = msg.body.decode() if isinstance(msg.body, bytes) else msg.body
        with lock:
            if body in fail_once and body not in failed:
                failed.add(body)
                raise RuntimeError("fail once: " + body)
            received.append(
                {
                    "topic": msg.topic.decode() if isinstance(msg.topic, bytes) else msg.topic,
                    "body": body,
                    "tags": msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags,
                    "keys": msg.keys.decode() if isinstance(msg.keys, bytes) else msg.keys,
                    "id": msg.id.decode() if isinstance(msg.id, bytes) else msg.id,
                    "queue_id": msg.queue_id,
                    "offset": msg.queue_offset,
                    "reconsume_times": msg.reconsume_times,
                    "born_ms": msg.born_timestamp,
                    "store_ms": msg.store_timestamp,
                    "received_ms": int(time.time() * 1000),
                    "props": {
                        p: (v.decode() if isinstance(v, bytes) else v)
                        for p, v in ((p, msg.get_property(p)) for p in props)
                    },
                }
            )
            seen.add(body)
            if progress is not None:
                progress.write(body + "\n")
                progress.flush()
            if len(received) >= args.get("expect", 0) and seen >= bodies:
                done.set()

    if args.get("broadcasting"):  # offsets kept by the client, every member gets everything
        consumer = PushConsumer(args["group"], message_model=MessageModel.BROADCASTING)
    else:
        consumer = PushConsumer(args["group"])
    consumer.set_namesrv_addr(namesrv)
    subscribe(consumer, args["topic"], on_message, args.get("expression", "*"))
    consumer.start()
    give_up = time.monotonic() + args.get("timeout", 60)
    while not done.wait(0.1) and time.monotonic() < give_up:
        if stop_file and os.path.exists(stop_file):
            break
    time.sleep(args.get("settle_s", 0))  # catch duplicates, let offsets be committed
    with lock:
        out = list(received)
    # Bounded: librocketmq 2.x (the wheel's) can hang in shutdown for good. Two consumers of a
    # group stopping at once: one's unregister makes the broker send the other
    # NOTIFY_CONSUMER_IDS_CHANGED (as RocketMQ's broker does) mid-shutdown; that one rebalances,
    # takes the leaver's queues and waits forever for their pull events ("has unfinished
    # pullMsgEvent" every 50 ms; 1 run in ~5 of test_namesrv's split test). Its offsets and
    # unregister went out before that wait.
    stopping = threading.Thread(target=consumer.shutdown, daemon=True)
    stopping.start()
    stopping.join(args.get("shutdown_timeout", 10))
    print(json.dumps({"received": out, "shutdown_hung": stopping.is_alive()}))
    sys.stdout.flush()
    os._exit(0)


def main():
    namesrv, mode, raw = sys.argv[1], sys.argv[2], sys.argv[3]
    args = json.loads(raw)
    if mode == "send":
        send(namesrv, args)
    elif mode == "consume":
        consume(namesrv, args)
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
