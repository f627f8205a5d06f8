"""Third-party SDKs stay at their edges (import cycles and the layers are import-linter contracts:
tests/test_layers.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import memlocal

PACKAGE = Path(memlocal.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = ("memlocal",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
