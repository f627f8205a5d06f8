"""Types are a gate: ``mypy --strict`` ([tool.mypy] in pyproject.toml) is clean over memlocal and
memlocal_sync. mypy's incremental cache lives under $HOME/.cache/memlocal-tests/mypy (see
scripts/check_types.py), so a run after the first re-checks only what changed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import support
from support import absolute_imports

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_is_clean() -> None:
    """~21 s of CPU in a fresh clone (no mypy cache yet): the session started the check in the
    background before its first test (tests/conftest.py, ``pytest_configure``), and this waits for
    its result; run alone or with ``-k`` (no background check), it runs the check itself. Not
    ``slow``: handed out late, it finds the result there rather than waiting for it."""
    result = support.type_check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout


def test_both_packages_declare_their_types() -> None:
    """PEP 561: a checker uses an installed package's inline types only if it ships py.typed."""
    assert (ROOT / "memlocal" / "py.typed").is_file()
    assert (ROOT / "memlocal_sync" / "py.typed").is_file()


def _follow_imports(module: str, overrides: list[dict[str, object]]) -> str:
    """mypy's ``follow_imports`` for ``module``: the most specific override that names it
    (a concrete name over ``pkg.*``, a longer ``pkg.*`` over a shorter; ``pkg.*`` covers pkg too)."""
    best, setting = -1, "normal"
    for override in overrides:
        if "follow_imports" not in override:
            continue
        patterns = override["module"]
        for pattern in [patterns] if isinstance(patterns, str) else patterns:
            base = pattern.removesuffix(".*")
            if pattern.endswith(".*") and (module == base or module.startswith(base + ".")):
                rank = 2 * base.count(".") + 1
            elif module == pattern:
                rank = 2 * pattern.count(".") + 2
            else:
                continue
            if rank > best:
                best, setting = rank, str(override["follow_imports"])
    return setting


def test_mypy_analyses_every_module_memlocal_imports() -> None:
    """pyproject.toml's ``follow_imports = "skip"`` override keeps mypy out of the parts of the
    dependencies memlocal never reaches. A module memlocal or memlocal_sync imports must not be
    one of them: its names would be Any, and mypy would check nothing about their use."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    assert any(o.get("follow_imports") == "skip" for o in overrides)
    imports = {**absolute_imports(ROOT / "memlocal", "memlocal"), **absolute_imports(ROOT / "memlocal_sync", "memlocal_sync")}
    hidden = [f"{module}: {name}" for module, names in imports.items() for name in sorted(names)
              if _follow_imports(name, overrides) == "skip"]
    assert hidden == []
    # The rule itself: the LangGraph store's embeddings stay analysed under the langchain_core skip.
    assert _follow_imports("langchain_core.runnables.config", overrides) == "skip"
    assert _follow_imports("langchain_core.embeddings", overrides) == "normal"
    assert _follow_imports("anthropic.types.beta", overrides) == "normal"
    assert _follow_imports("anthropic.types.beta.sessions.session", overrides) == "skip"
