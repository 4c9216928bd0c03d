"""The front ends the broker composes, in serve order (broker/frontends/frontend.py says what a
part is and the order of its steps). Adding a protocol is a folder with a ``part.py`` and one
line here. gRPC comes first: the wire port's default address derives from its port."""

from __future__ import annotations

from wharf.broker.frontends.frontend import Part
from wharf.broker.frontends.grpc.part import grpc_part
from wharf.broker.frontends.kafka.part import kafka_part
from wharf.broker.frontends.remoting.part import remoting_part
from wharf.broker.frontends.wire.part import wire_part
from wharf.broker.fronts.part import fronts_part

__all__ = ["PARTS"]

# The fronts (broker/fronts/) last: they forward to the wire port (its address is reserved
# first) and stop first (the root stops parts in reverse), draining before the wire port does.
PARTS: tuple[Part, ...] = (grpc_part, wire_part, remoting_part, kafka_part, fronts_part)
