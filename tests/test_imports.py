"""Third-party SDKs stay at their edges (import cycles and the layers are import-linter contracts:
tests/test_layers.py)."""

from __future__ import annotations

from pathlib import Path

import memlocal
from support import absolute_imports

PACKAGE = Path(memlocal.__file__).resolve().parent


def _third_party_importers(package: str) -> set[str]:
    """The memlocal modules that import ``package`` (anywhere in the module)."""
    return {module for module, names in absolute_imports(PACKAGE, "memlocal").items()
            if any(n == package or n.startswith(package + ".") for n in names)}


def test_the_framework_sdks_stay_at_their_edges() -> None:
    """anthropic only in the LLM processor, the Claude memory tool and the memory stores bridge;
    LangGraph only in its store."""
    assert _third_party_importers("anthropic") == {"memlocal.services.llm", "memlocal.integrations.claude",
                                                   "memlocal.integrations.claude_stores"}
    assert _third_party_importers("langgraph") == {"memlocal.integrations.langgraph"}
