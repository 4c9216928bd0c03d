"""Who the running request is for: set by the ACL check in front of it, read by what records
ownership (the client registry: an account may not unregister or take over another's client).

A context variable: gRPC runs each call in its own task and the remoting server each request
in its own task, so a handler sees its own request's caller only. Without aclEnable nothing
sets it and every request is ``ANYONE`` (no owner recorded, every removal allowed, as before).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Caller:
    name: str = ""  # the account's access key; "" without ACL
    admin: bool = True  # admins (and everyone without ACL) may act on any client

    def may_act_for(self, owner: str) -> bool:
        """May this caller remove or re-register a client recorded as ``owner``'s?"""
        return self.admin or not owner or owner == self.name


ANYONE = Caller()
_CALLER: ContextVar[Caller] = ContextVar("wharf_acl_caller", default=ANYONE)


def caller() -> Caller:
    return _CALLER.get()


def set_caller(name: str, admin: bool) -> None:
    _CALLER.set(Caller(name, admin))
