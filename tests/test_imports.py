"""Third-party SDKs stay at their edges (import cycles and the layers are import-linter contracts:
tests/test_layers.py)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import memlocal

PACKAGE = Path(memlocal.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = ("memlocal",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _absolute_imports() -> dict[str, frozenset[str]]:
    """What each memlocal module imports by absolute name (anywhere in the module), read once:
    parsing every module is ~1 s of CPU, and each SDK's check needs the same answer."""
    imports: dict[str, frozenset[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names.add(node.module or "")
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
        imports[_module_name(path)] = frozenset(names)
    return imports


def _third_party_importers(package: str) -> set[str]:
    """The memlocal modules that import ``package`` (anywhere in the module)."""
    return {module for module, names in _absolute_imports().items()
            if any(n == package or n.startswith(package + ".") for n in names)}


def test_the_framework_sdks_stay_at_their_edges() -> None:
    """anthropic only in the LLM processor and the Claude memory tool; LangGraph only in its store."""
    assert _third_party_importers("anthropic") == {"memlocal.llm", "memlocal.integrations.claude"}
    assert _third_party_importers("langgraph") == {"memlocal.integrations.langgraph"}
