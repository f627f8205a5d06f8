"""The library's module structure: no import cycles, and the formula independent of the store."""

from __future__ import annotations

import ast
from pathlib import Path

import memlocal

PACKAGE = Path(memlocal.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = ("memlocal",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the memlocal modules it imports anywhere (top level, in functions, under
    TYPE_CHECKING alike: a cycle through a lazy import is still a cycle in the design)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    deps.add(full if full in files else module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def _cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start, if there is one (depth-first)."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for dep in sorted(graph[node]):
            if dep == start:
                return path + [start]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, path + [dep]))
    return None


def test_no_import_cycles() -> None:
    graph = _import_graph()
    cycles = [c for c in (_cycle_from(graph, m) for m in sorted(graph)) if c]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_formula_does_not_import_the_store() -> None:
    graph = _import_graph()
    assert "memlocal.store" not in graph["memlocal.scoring"]
    assert "memlocal.scoring" in graph["memlocal.recall"]


def _third_party_importers(package: str) -> set[str]:
    """The memlocal modules that import ``package`` (anywhere in the module)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n == package or n.startswith(package + ".") for n in names):
                found.add(_module_name(path))
    return found


def test_the_framework_sdks_stay_at_their_edges() -> None:
    """anthropic only in the LLM processor and the Claude memory tool; LangGraph only in its store."""
    assert _third_party_importers("anthropic") == {"memlocal.llm", "memlocal.integrations.claude"}
    assert _third_party_importers("langgraph") == {"memlocal.integrations.langgraph"}
