"""cpp_client_script.py with session credentials: the C++ client (PyPI ``rocketmq==0.4.4``)
signs every request with RocketMQ 4's ``AccessKey`` / ``Signature`` (its ClientRPCHook; the
channel goes in ``OnsChannel``, signed too). Run by test_acl.py in ``.venv-rmq4``:

    python cpp_acl_script.py NAMESRV_ADDR MODE JSON_ARGS

JSON_ARGS as cpp_client_script.py's, plus ``access_key``, ``secret_key`` (and ``channel``,
default ``ALIYUN`` as the binding's examples): every Producer and PushConsumer the modes make
gets them (``set_session_credentials``) before it starts.
"""

import json
import sys

import cpp_client_script as base

ARGS = json.loads(sys.argv[3])
CREDENTIALS = (ARGS["access_key"], ARGS["secret_key"], ARGS.get("channel", "ALIYUN"))


_Producer, _PushConsumer = base.Producer, base.PushConsumer


class Producer(_Producer):
    def start(self):
        self.set_session_credentials(*CREDENTIALS)
        _Producer.start(self)


class PushConsumer(_PushConsumer):
    def start(self):
        self.set_session_credentials(*CREDENTIALS)
        _PushConsumer.start(self)


base.Producer = Producer
base.PushConsumer = PushConsumer

if __name__ == "__main__":
    base.main()
