"""The multi-core prototype (issue 37): front-end processes sharing the v2 gRPC port with
SO_REUSEPORT, forwarding coalesced records to one store process over the wire protocol,
measured against today's single-process broker. ``__main__`` drives and reports; ``front``
is one front-end process; ``load`` is one load-generating client process; ``relay`` is the
front in its simplest form (every call forwarded as it came), run by ``tests.bench.v2_ceiling``."""
