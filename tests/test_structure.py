"""The code measures held in CI: the limits below fail the suite when the code passes them
(``tests.structure_measures`` prints the same measures and more, without limits).

Raising a limit is a change of this file, reviewed as such: say in the commit why the code
needs more room rather than a new home for what grew. Each limit is the figure the code met
when it was set, or a round figure just above it.

What counts, precisely:

- a file's lines: ``len(text.splitlines())``, docstring and comments included;
- a class's methods: the ``def`` / ``async def`` statements directly in its body
  (properties included);
- a function's lines: from its ``def`` line to its last line, nested functions included;
- the store's top level: ``store/*.py``, ``__init__.py`` included;
- a broker launcher: a call ``BrokerProcess(...)`` in a Python file under ``tests/`` other
  than ``tests/harness.py`` (which defines the class and the ``Daemons`` factory every test
  should go through);
- store internals, for a front end: any ``wharf.store`` module but the package itself (its
  ``__all__``: the facade, its values and errors), ``wharf.store.model``,
  ``wharf.store.errors`` and the record format ``wharf.store.codec`` (sans-IO: the byte
  layout and properties every protocol maps onto), and within those no name or module
  starting with ``_`` (a private helper is not part of the format);
- a store reach, for a front end: an attribute access named ``store`` in its code (an AST
  node, so a docstring naming ``wharf.store.pop`` is none); a metadata reach: ``.topics``,
  ``.groups`` or ``.offsets`` of something named ``ctx``, or an import of a table's class
  (``TopicConfigManager`` ...), per file.
"""

from __future__ import annotations

import ast
import functools
import re

from tests.structure_measures import ROOT, modules

# --- limits (raise only in a reviewed change of this file, with the reason) ---------------------
# The facade is the store's one door: past ~600 lines / 45 methods it was absorbing concerns
# (roles, write protocols, test insides) that belong in sub-services (1,074 lines, 84 methods
# at its worst before they moved out).
STORE_FACADE_MAX_LINES = 600
STORE_FACADE_MAX_METHODS = 45
# The composition root composes: past 450 lines it held behaviour again (it was 919 lines
# with metadata replication, persistence loops and port binding inside).
CONTROLLER_MAX_LINES = 450
# A function past 80 lines is several steps without names (three are at 79-80 today).
FUNCTION_MAX_LINES = 80
LONG_FUNCTION_DIRS = ("store", "broker", "client")
# The store's top level is its map (facade, config, model, errors and the few cross-cutting
# parts); at 16 a reader could no longer tell the engine's folders from loose parts.
STORE_TOP_LEVEL_MAX_MODULES = 15
# Each direct BrokerProcess construction is a place a new broker setting must be repeated in;
# tests go through the ``daemons`` fixture (harness.Daemons), benchmarks through Daemons or
# harness.bench_broker (there were 105 constructions in 59 files; 6 are left).
BROKER_LAUNCHERS_MAX = 15
# The protocol front ends and what they share (broker/frontends/): adapters over the core, which
# alone drives the store's engine.
FRONT_ENDS = ("broker/frontends",)
STORE_PUBLIC = ("wharf.store", "wharf.store.model", "wharf.store.errors")
STORE_FORMAT = "wharf.store.codec"  # and its submodules
# Store internals front ends import today: this list may only shrink (the test fails on an
# entry that is no longer there, so a fix removes it here too). None is left: the Kafka <->
# record conversion and its compiled twin live with the store (codec/kafka_records.py,
# fast/kafka_convert.py), reached through ``wharf.store``'s exports.
KNOWN_STORE_INTERNALS: set[tuple[str, str]] = set()
# A front end asks the core through the port (``ctx.port``: broker/core/port.py, typed Protocols
# the core implements), never the store itself: any attribute ``.store`` in a front end's code
# (``ctx.store.get_max_offset``, ``self.env.ctx.store``) is a reach past it. None is left; an
# entry here would be (path, the expression), and may only shrink.
KNOWN_STORE_REACHES: set[tuple[str, str]] = set()
# The metadata tables (``ctx.topics``, ``ctx.groups``, ``ctx.offsets``): a front end asks the port
# (``topic``, ``readable_topic``, ``group_for_use``, ``commit_offset``, ``topics`` ...), where
# the admission rules are written once. None is left; an entry here would be a file, and the list
# may only shrink (the test fails on a reach elsewhere, and on a listed file with none left).
METADATA_TABLES = ("topics", "groups", "offsets")
METADATA_MANAGERS = ("TopicConfigManager", "SubscriptionGroupManager", "ConsumerOffsetManager")
KNOWN_METADATA_REACHES: set[str] = set()
# Docs speak of the code, not of its history (that is CHANGELOG.md's): no "issue 35" or
# "(issues 63, 64)" in a README or a docstring.
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
DOC_DIRS = ("store", "broker", "client", "deploy", "tests")  # *.md in all; docstrings but tests
SKIPPED_PARTS = {"__pycache__", "node_modules", ".venv", "build"}


@functools.cache
def _product() -> dict[str, tuple[str, ast.Module, int]]:
    """Module name -> (path relative to the root, tree, line count), every product module."""
    found = {}
    for name, path in modules().items():
        text = path.read_text()
        found[name] = (str(path.relative_to(ROOT)), ast.parse(text), len(text.splitlines()))
    return found


def _module(rel: str) -> tuple[ast.Module, int]:
    for path, tree, lines in _product().values():
        if path == rel:
            return tree, lines
    raise AssertionError(f"{rel} is not a product module")


def test_store_facade_within_bounds() -> None:
    tree, lines = _module("store/message_store.py")
    (facade,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MessageStore"]
    methods = [n for n in facade.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert lines <= STORE_FACADE_MAX_LINES, f"store/message_store.py: {lines} lines"
    assert len(methods) <= STORE_FACADE_MAX_METHODS, f"MessageStore: {len(methods)} methods"


def test_controller_composes() -> None:
    _, lines = _module("broker/controller.py")
    assert lines <= CONTROLLER_MAX_LINES, f"broker/controller.py: {lines} lines"


def test_no_long_functions() -> None:
    long = []
    for path, tree, _ in _product().values():
        if not path.startswith(tuple(f"{d}/" for d in LONG_FUNCTION_DIRS)):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > FUNCTION_MAX_LINES:
                    long.append(f"{path}:{node.lineno} {node.name} ({size} lines)")
    assert not long, "functions over the limit:\n" + "\n".join(long)


def test_store_top_level() -> None:
    top = sorted(p.name for p in (ROOT / "store").glob("*.py"))
    assert len(top) <= STORE_TOP_LEVEL_MAX_MODULES, f"store/ top level: {top}"


def broker_launchers() -> list[str]:
    """Each ``BrokerProcess(...)`` call in tests/ outside the harness, as path:line."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if SKIPPED_PARTS & set(path.parts) or path.name == "harness.py":
            continue
        text = path.read_text()
        if "BrokerProcess(" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name == "BrokerProcess":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_broker_launchers() -> None:
    found = broker_launchers()
    assert len(found) <= BROKER_LAUNCHERS_MAX, "\n".join(found)


def _store_imports(tree: ast.Module) -> list[str]:
    """Every ``wharf.store`` name a module imports (module level or not): a module, or a
    module and the name taken from it (``wharf.store.codec.records._crc32``)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("wharf.store")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wharf.store"):
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


@functools.cache
def _store_exports() -> frozenset[str]:
    """``wharf.store.__all__``, read from the file (importing it would load the engine)."""
    tree = ast.parse((ROOT / "store" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return frozenset(ast.literal_eval(node.value))
    raise AssertionError("store/__init__.py has no __all__")


def _internal(imported: str) -> bool:
    if any(part.startswith("_") for part in imported.split(".")):
        return True
    if imported == STORE_FORMAT or imported.startswith(STORE_FORMAT + "."):
        return False
    module, _, name = imported.rpartition(".")
    if module == "wharf.store":  # ``from wharf.store import X``: X must be exported
        return name not in _store_exports()
    # ``from wharf.store.model import X`` names wharf.store.model.X: its module is public.
    return imported not in STORE_PUBLIC and module not in STORE_PUBLIC[1:]


def test_front_ends_use_only_the_store_facade_and_format() -> None:
    found = set()
    for path, tree, _ in _product().values():
        if path.startswith(tuple(f"{d}/" for d in FRONT_ENDS)):
            found |= {(path, name) for name in _store_imports(tree) if _internal(name)}
    new = sorted(found - KNOWN_STORE_INTERNALS)
    assert not new, "front ends importing store internals (go through the core):\n" + "\n".join(
        f"  {path}: {name}" for path, name in new
    )
    gone = sorted(KNOWN_STORE_INTERNALS - found)
    assert not gone, f"fixed, so remove from KNOWN_STORE_INTERNALS: {gone}"


def _front_end_of(path: str) -> str | None:
    return next((d for d in FRONT_ENDS if path.startswith(f"{d}/")), None)


def test_front_ends_reach_no_store() -> None:
    """An AST walk (comments and docstrings naming ``wharf.store.…`` do not count): every
    attribute access named ``store`` in a front end's modules."""
    found = set()
    for path, tree, _ in _product().values():
        if _front_end_of(path) is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "store":
                found.add((path, ast.unparse(node)))
    new = sorted(found - KNOWN_STORE_REACHES)
    assert not new, "front ends reaching the store (ask the port, ctx.port):\n" + "\n".join(
        f"  {path}: {expression}" for path, expression in new
    )
    gone = sorted(KNOWN_STORE_REACHES - found)
    assert not gone, f"fixed, so remove from KNOWN_STORE_REACHES: {gone}"


def test_front_ends_reach_no_metadata_table() -> None:
    """``<…>ctx.topics`` / ``.groups`` / ``.offsets`` in a front end's code (an AST walk)."""
    found: dict[str, list[str]] = {}
    for path, tree, _ in _product().values():
        if _front_end_of(path) is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in METADATA_TABLES:
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if name == "ctx":
                    found.setdefault(path, []).append(f"{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom):  # a table handed on under another name
                for alias in node.names:
                    if alias.name in METADATA_MANAGERS:
                        found.setdefault(path, []).append(f"{node.lineno}: import {alias.name}")
    new = {path: lines for path, lines in found.items() if path not in KNOWN_METADATA_REACHES}
    assert not new, "front ends reaching the metadata tables past the port:\n" + "\n".join(
        f"  {path}:{line}" for path, lines in sorted(new.items()) for line in lines
    )
    gone = sorted(KNOWN_METADATA_REACHES - set(found))
    assert not gone, f"fixed, so remove from KNOWN_METADATA_REACHES: {gone}"


def _docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, nodes) and (text := ast.get_docstring(node, clean=False)):
            out.append((node.body[0].lineno, text))
    return out


def test_docs_name_no_issue_numbers() -> None:
    found = []
    trees = {path: tree for path, tree, _ in _product().values()}  # parsed once
    for top in DOC_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if SKIPPED_PARTS & set(path.parts) or path.name == "CHANGELOG.md":
                continue
            rel = path.relative_to(ROOT)
            if path.suffix == ".md":
                for number, line in enumerate(path.read_text().splitlines(), 1):
                    found += [f"{rel}:{number}: {m.group()}" for m in ISSUE_NUMBER.finditer(line)]
            elif path.suffix == ".py" and top != "tests":
                tree = trees.get(str(rel)) or ast.parse(path.read_text())
                for number, text in _docstrings(tree):
                    found += [f"{rel}:{number}: {m.group()}" for m in ISSUE_NUMBER.finditer(text)]
    assert not found, "say what the code does; history goes in CHANGELOG.md:\n" + "\n".join(found)


def test_the_measures_see_the_tree() -> None:
    """The walk finds the packages it measures (a moved folder would pass every limit)."""
    paths = {path for path, _, _ in _product().values()}
    for expected in (
        "store/message_store.py",
        "broker/controller.py",
        "broker/frontends/v1/pull_stream.py",
    ):
        assert expected in paths
    assert len(broker_launchers()) > 0
