"""The Telemetry settings reply (reference §4): the client's own Settings echoed, with the
broker's values merged in. Every settings frame gets one.

- Producer: ``publishing.max_body_size`` = the store's maxMessageSize (the official Python
  client copies it verbatim: a reply without it makes every later send fail client-side with
  "max size=0 bytes"), ``validate_message_type`` = true, backoff exponential 10 ms .. 1 s x2,
  3 attempts (the proxy's defaults).
- Consumer: ``subscription.fifo`` from the group, ``receive_batch_size`` 32,
  ``long_polling_timeout`` 20 s, backoff customized 1s 5s 10s 30s 1m .. 2h with
  ``max_attempts`` = the group's retryMaxTimes + 1.
- Always ``metric.on = false`` (true would make the client export OTLP to our endpoints).
"""

from __future__ import annotations

from wharf.rocketmq.v2 import definition_pb2

PRODUCER_MAX_ATTEMPTS = 3
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
# RocketMQ's messageDelayLevel beyond the first retry: 1s 5s 10s 30s 1m 2m 3m ... 10m 20m 30m 1h 2h.
CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200,
                      1800, 3600, 7200)  # fmt: skip


def merge_settings(
    client: definition_pb2.Settings,
    max_body_size: int,
    group_fifo: bool = False,
    group_max_attempts: int = 17,
) -> definition_pb2.Settings:
    """The reply to one settings frame (``client`` is not modified)."""
    reply = definition_pb2.Settings()
    reply.CopyFrom(client)
    reply.ClearField("backoff_policy")
    if client.HasField("subscription"):
        sub = reply.subscription
        sub.fifo = group_fifo
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        sub.long_polling_timeout.FromSeconds(LONG_POLLING_TIMEOUT_S)
        policy = reply.backoff_policy
        policy.max_attempts = group_max_attempts
        for seconds in CONSUMER_BACKOFF_S:
            policy.customized_backoff.next.add().FromSeconds(seconds)
    else:
        pub = reply.publishing
        pub.max_body_size = max_body_size
        pub.validate_message_type = True
        policy = reply.backoff_policy
        policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        backoff = policy.exponential_backoff
        backoff.initial.FromMilliseconds(10)
        backoff.max.FromSeconds(1)
        backoff.multiplier = 2.0
    reply.metric.Clear()
    reply.metric.SetInParent()  # present, with on = false
    return reply
