"""An orderly PushConsumer of the RocketMQ 4.x C++ client (PyPI ``rocketmq==0.4.4``) for
test_locks.py, run in ``.venv-rmq4``:

    python cpp_orderly_script.py NAMESRV_ADDR JSON_ARGS

Consumes ``args["topic"]`` orderly (the client locks its queues with LOCK_BATCH_MQ before it
pulls them) until ``expect`` messages came, prints ``{"received": [...]}`` as one JSON line,
then waits for a line on stdin before it shuts down (the test checks the locks meanwhile),
prints ``{"done": true}`` and ends with ``os._exit`` (see cpp_client_script.py).
"""

import json
import os
import sys
import threading

from rocketmq.client import PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import MSG_CALLBACK_FUNC, _CConsumeStatus, dll


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def main():
    namesrv, args = sys.argv[1], json.loads(sys.argv[2])
    received = []
    lock = threading.Lock()
    done = threading.Event()

    def on_message(_consumer, msg):
        message = RecvMessage(msg)
        with lock:
            received.append(
                {
                    "body": _text(message.body),
                    "queue_id": message.queue_id,
                    "offset": message.queue_offset,
                    "thread": threading.get_ident(),
                }
            )
            if len(received) >= args["expect"]:
                done.set()
        return _CConsumeStatus.CONSUME_SUCCESS.value

    consumer = PushConsumer(args["group"], orderly=True)
    consumer.set_namesrv_addr(namesrv)
    ffi_check(dll.Subscribe(consumer._handle, args["topic"].encode(), b"*"))
    func = MSG_CALLBACK_FUNC(on_message)
    consumer._callback_refs.append(func)
    ffi_check(dll.RegisterMessageCallbackOrderly(consumer._handle, func))
    consumer.start()
    done.wait(args.get("timeout", 40))
    with lock:
        out = list(received)
    print(json.dumps({"received": out}))
    sys.stdout.flush()
    sys.stdin.readline()
    consumer.shutdown()
    print(json.dumps({"done": True}))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
