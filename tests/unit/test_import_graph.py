"""No import circles in the package or the benchmarks, counting imports inside functions.

A circle hidden by a function-level import still couples the two modules both ways; the
parts are meant to depend inward only (docs/design.md "Parts and what each owns").
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("airflow_provider_dblog", "bench")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[_module_name(path)] = path
    return found


def _imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules that `name` imports anywhere in its file (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets.add(prefix)
            # `from pkg import module` names a module, not only an attribute.
            targets.update(f"{prefix}.{alias.name}" for alias in node.names)
    edges = set()
    for target in targets:
        # `import a.b.c` depends on a.b.c; a package's __init__ only if it is the target.
        if target in known and target != name:
            edges.add(target)
    return edges


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imported(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    assert "airflow_provider_dblog.core.events" in graph["airflow_provider_dblog.core.watermark"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    assert cycles(import_graph()) == []


# Which parts each part may import (docs/design.md "Parts and what each owns"): dependencies
# point inward, from the Airflow layer and the Spark jobs down to the core.
_P = "airflow_provider_dblog."
# config_kinds: the settings' value types; sources' descriptors: what each database is
# (the Kafka output names its connector from them).
LOWER_PARTS = {
    "core": set(),
    "sources": {"core", "config_kinds"},
    "state": {"core"},
    "outputs": {"core", "sources", "config_kinds"},
}


def _part(module: str) -> str:
    return module[len(_P) :].split(".")[0] if module.startswith(_P) else ""


def test_the_inner_parts_import_no_outer_part() -> None:
    """core imports nothing else of the package; sources, state and outputs import only the
    parts inward of them: never the Spark jobs, the CLI or the Airflow layer, which import them."""
    wrong = sorted(
        (name, target)
        for name, targets in import_graph().items()
        if _part(name) in LOWER_PARTS
        for target in targets
        if _part(target) not in LOWER_PARTS[_part(name)] | {_part(name)} and target.startswith(_P)
    )
    assert wrong == []
