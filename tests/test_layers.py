"""The layer rules of docs/architecture.md, as import-linter contracts (pyproject.toml), hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` (no cache: nothing is written into the repository)."""
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_lint_imports_is_clean() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout


def test_a_library_module_importing_a_face_breaks_a_contract(tmp_path: Path) -> None:
    """The contracts do catch a violation: a copy of the packages where the store imports the CLI."""
    shutil.copytree(ROOT / "memlocal", tmp_path / "memlocal", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "sync", tmp_path / "memlocal_sync", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    store = tmp_path / "memlocal" / "store.py"
    store.write_text(store.read_text() + "\nfrom .cli import _common  # a layer violation\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "faces are not imported by the library BROKEN" in result.stdout
    assert "memlocal.store -> memlocal.cli._common" in result.stdout
