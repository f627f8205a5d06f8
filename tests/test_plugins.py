"""The installed plugins honour the extension points memlocal.plugins declares, as datasette's
tests/test_plugins.py checks its hooks against hookspecs.py: every entry point group is declared
there, every entry loads, and what each returns implements the declared Protocol, member by
member and argument by argument."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path
from typing import Any, Protocol

import click
import pytest

from memlocal import plugins
from memlocal.config import Config
from memlocal.store import Store
from memlocal.store.replica import StoreReplica

ROOT = Path(__file__).resolve().parent.parent


def _members(protocol: type) -> dict[str, inspect.Signature]:
    """A Protocol's methods (properties as ``None``-signature entries), by name."""
    out: dict[str, Any] = {}
    for name, value in vars(protocol).items():
        if name.startswith("_") and name != "__call__":
            continue
        if isinstance(value, property):
            out[name] = None
        elif inspect.isfunction(value):
            out[name] = inspect.signature(value)
    return out


def _conforms(obj: object, protocol: type) -> list[str]:
    """What ``obj`` lacks of ``protocol``: a member, or a parameter a caller passes by name."""
    problems = []
    for name, sig in _members(protocol).items():
        if not hasattr(obj, name):
            problems.append(f"{type(obj).__name__} has no {name}")
            continue
        if sig is None:
            continue
        got = inspect.signature(getattr(obj, name))
        wanted = [p for p in sig.parameters.values() if p.name != "self"]
        params = got.parameters
        for p in wanted:
            if p.kind is p.POSITIONAL_ONLY:
                continue
            if p.name not in params and not any(q.kind is q.VAR_KEYWORD for q in params.values()):
                problems.append(f"{type(obj).__name__}.{name} takes no {p.name!r}")
    return problems


def test_every_entry_point_group_is_declared_and_registered() -> None:
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert set(groups) == set(plugins.EXTENSION_POINTS) == {plugins.REPLICATORS, plugins.DAEMONS, plugins.COMMANDS}
    for group in plugins.EXTENSION_POINTS:
        assert plugins.discover(group), f"nothing installed under {group}"


def test_every_extension_point_is_a_protocol_with_documented_members() -> None:
    declared = [plugins.Replica, plugins.ReplicaTransaction, plugins.Replicator, plugins.NoteReplicator,
                plugins.ReplicatorFactory, plugins.Daemon, plugins.DaemonFactory]
    for protocol in declared:
        assert issubclass(protocol, Protocol) and protocol.__doc__, protocol  # type: ignore[arg-type]
    # NoteReplicator is the part of Replicator the automation notes use.
    assert set(_members(plugins.NoteReplicator)) <= set(_members(plugins.Replicator))


def test_the_command_plugin_is_a_click_group() -> None:
    (sync_group,) = plugins.discover(plugins.COMMANDS)
    assert isinstance(sync_group, click.Group) and sync_group.name == "sync"


def test_the_replica_implements_the_port(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    try:
        assert _conforms(StoreReplica(store), plugins.Replica) == []
        with StoreReplica(store).snapshot() as tables:
            assert _conforms(tables, plugins.PluginTables) == []
        with StoreReplica(store).transaction() as tx:
            assert _conforms(tx, plugins.ReplicaTransaction) == []
            assert _conforms(tx.tables, plugins.PluginTables) == []
    finally:
        store.close()


# The replication port: what the store gives a plugin (it had grown to 60 methods in
# four Protocols, the sync's own tables among them).
PORT = (plugins.Replica, plugins.ReplicaTransaction, plugins.PluginTables)


def test_the_port_keeps_only_the_stores_own_data() -> None:
    """At most 35 methods (properties included) in all; no store row or store function crosses."""
    members = {f"{p.__name__}.{name}": sig for p in PORT for name, sig in _members(p).items()}
    assert len(members) <= 35, sorted(members)
    crossing = [name for name, sig in members.items() if sig is not None
                and re.search(r"PreparedRow|Callable|Connection|Cursor", str(sig))]
    assert crossing == []
    assert not hasattr(plugins, "PreparedRow")


def test_without_a_bucket_every_factory_returns_none(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    try:
        config = Config.defaults()
        for factory in plugins.replicator_factories():
            assert factory(config, StoreReplica(store)) is None
        for daemon_factory in plugins.daemon_factories():
            assert daemon_factory(config, StoreReplica(store), dict) is None
    finally:
        store.close()


@pytest.mark.usefixtures("s3")
def test_with_a_bucket_the_factories_return_the_declared_interfaces(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    config = Config.load(environ=None)
    replicators = []
    try:
        for factory in plugins.replicator_factories():
            replicator = factory(config, StoreReplica(store))
            assert replicator is not None
            replicators.append(replicator)
            assert _conforms(replicator, plugins.Replicator) == []
        for daemon_factory in plugins.daemon_factories():
            daemon = daemon_factory(config, StoreReplica(store), dict)
            assert daemon is not None and _conforms(daemon, plugins.Daemon) == []
            daemon.stop()
    finally:
        for replicator in replicators:
            replicator.close()
        store.close()
