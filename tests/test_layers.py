"""The layer rules of docs/architecture.md, as import-linter contracts (pyproject.toml), hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import support
import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` (no cache: nothing is written into the repository)."""
    return support.run([sys.executable, "-c", LINT, "--no-cache", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_lint_imports_is_clean() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout


@pytest.fixture(scope="module")
def violations(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``lint-imports`` on a copy of the packages with three violations: the store imports the CLI,
    a sync module imports a store internal, and the port module (which the sync imports) loads
    the store (one run: each costs seconds)."""
    tmp = tmp_path_factory.mktemp("violations")
    shutil.copytree(ROOT / "memlocal", tmp / "memlocal", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "memlocal_sync", tmp / "memlocal_sync", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    store = tmp / "memlocal" / "store" / "memories.py"
    store.write_text(store.read_text() + "\nfrom ..faces.cli import _common  # a layer violation\n")
    state = tmp / "memlocal_sync" / "state.py"
    state.write_text(state.read_text() + "\nfrom memlocal.store.memories import write_row  # past the port\n")
    # Indirectly: the port module, which the sync may import, loads a store module.
    port = tmp / "memlocal" / "plugins.py"
    port.write_text(port.read_text() + "\nfrom .store import derive  # the port reaching the store\n")
    result = lint_imports(tmp)
    assert result.returncode != 0
    return result.stdout


def test_a_library_module_importing_a_face_breaks_a_contract(violations: str) -> None:
    assert "faces are not imported by the library BROKEN" in violations
    assert "the layers of the module map BROKEN" in violations
    assert "memlocal.store.memories -> memlocal.faces.cli._common" in violations


def test_a_sync_module_importing_a_store_internal_breaks_the_port_contract(violations: str) -> None:
    """The sync package may import from memlocal only the replication port and the public modules
    the contract allows (pyproject.toml, docs/architecture.md)."""
    assert "the sync imports only the port and public modules BROKEN" in violations
    assert "memlocal_sync.state -> memlocal.store.memories" in violations


def test_a_sync_module_reaching_the_store_directly_or_through_the_port_breaks_a_contract(violations: str) -> None:
    """``allow_indirect_imports`` is off: a chain from the sync through a module it may import
    (here the port, memlocal.plugins) to the store breaks "nothing the sync imports reaches the
    store", and so does the direct import."""
    assert "nothing the sync imports reaches the store BROKEN" in violations
    section = violations.split("nothing the sync imports reaches the store\n", 1)[1]
    assert "memlocal.plugins -> memlocal.store" in section  # the indirect chain, link by link
    assert "memlocal_sync.state -> memlocal.store.memories" in section  # the direct import


def test_every_sync_contract_counts_indirect_imports() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    sync = [c for c in contracts if c.get("source_modules") == ["memlocal_sync"]]
    assert len(sync) >= 2 and all(c.get("allow_indirect_imports") is False for c in sync)
