"""``Admin``: the admin client users make, for one broker or for a cluster.

async with Admin("127.0.0.1:8081") as admin:  # one broker: a BrokerAdmin
    await admin.create_topic("orders", queue_nums=4)
async with Admin(namesrv="127.0.0.1:9876") as admin:  # a cluster: a ClusterAdmin
    print((await admin.list_topics()).topics)

One broker's calls are ``wharf.client.broker_admin.BrokerAdmin``'s (``Admin`` is one). Given
NameServers (``namesrv=``, or a ``Connection`` with them) ``Admin(...)`` returns a
``wharf.client.cluster_admin.ClusterAdmin``: the same calls over every broker group, delegated
to one ``BrokerAdmin`` per master chosen by the routes (as ``Producer`` and the consumers
delegate to per-broker clients, ``wharf.client.cluster``); ``isinstance(it, Admin)`` holds.
This module only chooses: neither of the two imports it (no import cycle).
"""

from __future__ import annotations

from abc import ABCMeta
from typing import Any, cast

from wharf.client.broker_admin import BrokerAdmin, page_topics
from wharf.client.cluster_admin import ClusterAdmin
from wharf.client.connection import Connection


class Admin(BrokerAdmin, metaclass=ABCMeta):
    """One broker's admin client; with NameServers a ``ClusterAdmin`` (module docstring)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Admin:
        if cls is Admin and _names_a_cluster(args, kwargs):
            # Not an instance of cls: Python does not run __init__ on it again.
            return cast(Admin, ClusterAdmin(*args, **kwargs))
        return super().__new__(cls)


Admin.register(ClusterAdmin)  # isinstance(Admin(namesrv=...), Admin)


def _names_a_cluster(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Admin(*args, **kwargs)`` is given NameServers: ``namesrv=``, or a Connection
    (``connection=`` or first positional) with them."""
    connection = kwargs.get("connection")
    if args and isinstance(args[0], Connection):
        connection = args[0]
    if isinstance(connection, Connection) and connection.namesrv:
        return True
    return bool(kwargs.get("namesrv"))


__all__ = ["Admin", "BrokerAdmin", "ClusterAdmin", "page_topics"]
