"""The code measures of ../shared/reference/structure.md, re-run on this tree (issue 34): files
per package, the largest files, functions over 80 lines, classes of 25 methods or more, modules
importing more than 15 project modules, and import cycles (module-level imports; plus
function-local ones; plus ``if TYPE_CHECKING:`` ones).

    .venv/bin/python -m tests.structure_measures

Product Python only (store/, broker/, client/, proto/wharf/), generated ``*_pb2*`` excluded.
``wharf.*`` names map to files through pyproject.toml's ``package-dir``; cycles are Tarjan's
strongly connected components of the import graph.
"""

from __future__ import annotations

import ast
import statistics
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


def modules() -> dict[str, Path]:
    """Module name -> file, every product module."""
    found: dict[str, Path] = {}
    dirs = package_dirs()
    for package, folder in sorted(dirs.items(), key=lambda item: -len(item[0])):
        for path in folder.rglob("*.py"):
            if "_pb2" in path.name or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            name = ".".join([package, *parts])
            # A deeper package-dir (wharf.store inside proto/wharf? no) wins: longest first.
            found.setdefault(name, path)
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(
    tree: ast.Module, name: str, is_package: bool, known: set[str]
) -> Iterator[tuple[str, str]]:
    """(imported module, kind): kind is "module", "local" (inside a function) or "typing"."""

    def walk(nodes: list[ast.stmt], kind: str) -> Iterator[tuple[str, str]]:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking(node):
                yield from walk(node.body, "typing")
                yield from walk(node.orelse, kind)
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from walk(node.body, "local" if kind == "module" else kind)
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, kind
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                for alias in node.names:
                    # ``from package import module`` depends on that module (and the package's
                    # __init__ only when a name of it is imported): as the reference measured.
                    yield (
                        (f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base),
                        kind,
                    )
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if children and not isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield from walk(children, kind)

    yield from walk(tree.body, "module")


def tarjan(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(10_000)

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def main() -> None:
    files = modules()
    names = set(files)
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in files.items()}
    lines = {name: len(path.read_text().splitlines()) for name, path in files.items()}
    rel = {name: str(path.relative_to(ROOT)) for name, path in files.items()}

    print("Files per package (lines/files, median, p90, max):")
    for top in ("store", "broker", "client"):
        sizes = sorted(n for m, n in lines.items() if rel[m].startswith(top + "/"))
        p90 = sizes[int(len(sizes) * 0.9)]
        print(f"  {top:7} {sum(sizes):>7,}/{len(sizes):<3} median {statistics.median(sizes):>5.0f}"
              f"  p90 {p90:>4}  max {sizes[-1]:>5}  >300 {sum(n > 300 for n in sizes):>2}"
              f"  >400 {sum(n > 400 for n in sizes):>2}")  # fmt: skip
        tops = [m for m in rel if rel[m].count("/") == 1 and rel[m].startswith(top + "/")]
        print(f"          top-level modules: {len(tops)}")

    print("\nLargest 15 files:")
    for name in sorted(lines, key=lambda m: -lines[m])[:15]:
        print(f"  {lines[name]:>6,}  {rel[name]}")

    long_functions = []
    classes = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 80:
                    long_functions.append((size, f"{rel[name]}:{node.lineno} {node.name}"))
            elif isinstance(node, ast.ClassDef):
                methods = [
                    n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                ]
                if len(methods) >= 25:
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    classes.append((len(methods), size, f"{rel[name]} {node.name}"))
    print(f"\nFunctions over 80 lines: {len(long_functions)}")
    for size, where in sorted(long_functions, reverse=True):
        print(f"  {size:>4}  {where}")
    print(f"\nClasses with 25 methods or more: {len(classes)}")
    for count, size, where in sorted(classes, reverse=True):
        print(f"  {count:>3} methods {size:>5} lines  {where}")

    graphs: dict[str, dict[str, set[str]]] = {"module": {}, "local": {}, "typing": {}}
    fan_out = {}
    for name, tree in trees.items():
        is_package = files[name].name == "__init__.py"
        edges: dict[str, set[str]] = {"module": set(), "local": set(), "typing": set()}
        for target, kind in imports(tree, name, is_package, names):
            if target in names and target != name:
                edges[kind].add(target)
        graphs["module"][name] = edges["module"]
        graphs["local"][name] = edges["module"] | edges["local"]
        graphs["typing"][name] = edges["module"] | edges["local"] | edges["typing"]
        fan_out[name] = len(graphs["typing"][name])
    print("\nModules importing more than 15 project modules:")
    for name in sorted(fan_out, key=lambda m: -fan_out[m]):
        if fan_out[name] > 15:
            print(f"  {fan_out[name]:>3}  {rel[name]}")
    for kind, label in (
        ("module", "module-level imports"),
        ("local", "plus function-local imports"),
        ("typing", "plus TYPE_CHECKING imports"),
    ):
        cycles = tarjan(graphs[kind])
        print(f"\nImport cycles, {label}: {len(cycles)}")
        for cycle in cycles:
            print("  " + " <-> ".join(rel[m] for m in cycle))


if __name__ == "__main__":
    main()
