"""Front processes for the official RocketMQ 5.x clients (``v2Fronts``): the "Using N cores"
plan of broker/README.md, built. A front is a process of its own that takes the
apache.rocketmq.v2 gRPC calls on ``v2FrontsListen`` and forwards them to the broker's wire
port, so grpc.aio's per-call work (~570 us of CPU a unary call here, more than the broker's own
work for a send) runs on another core than the store's loop.

- ``forward.py``: every MessagingService method forwarded, bytes and headers as they came: the
  broker keeps every semantic (routes, Telemetry, long polling, pop, transactions, errors).
- ``coalesce.py``: SendMessage calls of NORMAL messages to one topic merged into one forwarded
  request while earlier ones are out, so the broker pays one call and one append for many.
- ``server.py`` / ``__main__.py``: the process (``python -m wharf.broker.fronts``).
- ``part.py``: the broker's side: the part that reserves the port, spawns the fronts,
  restarts one that dies and stops them with the broker.

The program imports nothing of the broker but this folder: it is a client of the wire port.
"""
