"""The multi-core prototype (issue 37): front-end processes sharing the v2 gRPC port with
SO_REUSEPORT, forwarding coalesced records to one store process over the wire protocol,
measured against today's single-process broker. ``__main__`` drives and reports; ``front``
is one front-end process; ``load`` is one load-generating client process."""
