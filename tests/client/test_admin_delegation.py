"""``Admin`` chooses, ``BrokerAdmin`` calls one broker, ``ClusterAdmin`` delegates to one
``BrokerAdmin`` per master: the same calls on both, and no import cycle between the modules
(the cluster behaviour itself is tests/cluster/test_admin_cluster.py's)."""

from __future__ import annotations

import ast
import inspect

import pytest
from wharf.client import sync
from wharf.client.admin import Admin
from wharf.client.broker_admin import BrokerAdmin
from wharf.client.cluster_admin import ClusterAdmin
from wharf.client.connection import Connection
from wharf.client.errors import InvalidArgumentError

from tests.harness import BrokerProcess
from tests.structure_measures import imports, modules, tarjan


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def test_admin_picks_the_cluster_client_for_name_servers_and_both_are_admins() -> None:
    cluster = Connection(namesrv="127.0.0.1:9876;127.0.0.1:9877")
    made = [
        Admin(namesrv="127.0.0.1:9876"),
        Admin(connection=cluster),
        Admin(cluster),
        Admin(connection=cluster, cluster="DefaultCluster"),
    ]
    assert all(type(a) is ClusterAdmin and isinstance(a, Admin) for a in made)
    assert made[1].connection == cluster and made[3].cluster == "DefaultCluster"
    one = Admin("127.0.0.1:8081")
    assert type(one) is Admin and isinstance(one, BrokerAdmin)
    # Delegation, not inheritance: the cluster client holds brokers' admins, it is none.
    assert not issubclass(ClusterAdmin, BrokerAdmin)
    assert isinstance(sync.Admin(connection=cluster)._client, ClusterAdmin)  # type: ignore[attr-defined]


def test_the_cluster_client_offers_every_call_of_one_broker_s_with_its_parameters() -> None:
    broker_calls, cluster_calls = _public(BrokerAdmin), _public(ClusterAdmin)
    missing = sorted(set(broker_calls) - set(cluster_calls))
    assert not missing, f"ClusterAdmin lacks {missing}"
    for name, signature in broker_calls.items():
        theirs = cluster_calls[name].parameters
        if any(p.kind is p.VAR_KEYWORD for p in theirs.values()):
            continue  # forwards **options to each master's BrokerAdmin
        absent = [p for p in signature.parameters if p not in theirs]
        assert not absent, f"ClusterAdmin.{name} lacks {absent}"


async def test_one_broker_calls_on_a_cluster_say_which_call_to_use() -> None:
    admin = Admin(namesrv="127.0.0.1:9876")
    with pytest.raises(InvalidArgumentError, match="transfer_master"):
        await admin.transfer_master(1)
    with pytest.raises(InvalidArgumentError, match="topic_routes"):
        await admin.topic_route("orders")
    with pytest.raises(InvalidArgumentError, match="broker_statuses"):
        await admin.broker_status()


async def test_admin_of_one_broker_works_against_the_daemon(broker: BrokerProcess) -> None:
    async with Admin(broker.endpoint) as admin:
        status = await admin.broker_status()
        assert [s.version for s in await admin.broker_statuses()] == [status.version]


def test_the_sdk_has_no_import_cycle_counting_local_and_type_checking_imports() -> None:
    """admin.py imports both admin modules; neither imports it back, at module level, inside
    a function or under TYPE_CHECKING (the cycle ``ClusterAdmin(Admin)`` made)."""
    files = {n: p for n, p in modules().items() if n.startswith("wharf.client")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        found = imports(tree, name, path.name == "__init__.py", set(files))
        graph[name] = {target for target, _ in found if target in files and target != name}
    assert "wharf.client.cluster_admin" in graph["wharf.client.admin"]
    assert "wharf.client.admin" not in graph["wharf.client.cluster_admin"]
    assert "wharf.client.admin" not in graph["wharf.client.broker_admin"]
    assert tarjan(graph) == []
