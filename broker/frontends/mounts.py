"""The gRPC services the broker mounts (wharf.v1 messaging and admin, apache.rocketmq.v2),
built once per broker and served by two transports: the gRPC front end (grpc_part.py) and
the wire port (broker/frontends/wire/part.py), so both answer with the very same handler objects.
Each mount is its servicer over the core, its ACL wrapping and its health name."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor
from wharf.broker.frontends.frontend import Serving
from wharf.broker.frontends.grpc.handlers import method_handlers
from wharf.broker.frontends.v1.admin import AdminService
from wharf.broker.frontends.v1.messaging import MessagingService
from wharf.broker.frontends.v2.codes import V2_REFUSALS
from wharf.broker.frontends.v2.service import V2MessagingService
from wharf.rocketmq.v2 import service_pb2 as rocketmq_v2_service_pb2
from wharf.v1 import admin_pb2, messaging_pb2

__all__ = ["Mount", "mounts_for"]


@dataclass(frozen=True)
class Mount:
    service: ServiceDescriptor
    servicer: Any
    handlers: dict[str, Any]  # grpc method handlers by method name


def _descriptor(module: Any, name: str) -> ServiceDescriptor:
    return module.DESCRIPTOR.services_by_name[name]  # type: ignore[no-any-return]


def mounts_for(serving: Serving) -> list[Mount]:
    """The mounts of ``serving``'s broker, built on the first call (the second transport
    gets the same ones). Their services are marked in the broker's health."""
    made = serving.shared.get("mounts")
    if made is not None:
        return made  # type: ignore[no-any-return]
    ctx, acl = serving.kit, serving.acl
    v1_wrap = acl.wrap if acl is not None else None
    v2_wrap = functools.partial(acl.wrap, refusals=V2_REFUSALS) if acl is not None else None
    specs = (
        (_descriptor(messaging_pb2, "MessagingService"), MessagingService(ctx), v1_wrap),
        (_descriptor(admin_pb2, "AdminService"), AdminService(ctx), v1_wrap),
        # Adds its producers' Telemetry streams to the check-back targets.
        (_descriptor(rocketmq_v2_service_pb2, "MessagingService"), V2MessagingService(ctx),
         v2_wrap),
    )  # fmt: skip
    mounts = [
        Mount(service, servicer, method_handlers(servicer, service, wrap))
        for service, servicer, wrap in specs
    ]
    for mount in mounts:
        serving.health.add(mount.service.full_name)
    serving.shared["mounts"] = mounts
    return mounts
