"""Types are a gate: ``mypy --strict`` ([tool.mypy] in pyproject.toml) is clean over memlocal and
memlocal_sync. mypy's incremental cache lives under $HOME/.cache/memlocal-tests/mypy (see
scripts/check_types.py), so a run after the first re-checks only what changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # ~21 s of CPU in a fresh clone (no mypy cache yet): started first, not last
def test_mypy_strict_is_clean() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_types.py")], cwd=ROOT,
                            capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout


def test_both_packages_declare_their_types() -> None:
    """PEP 561: a checker uses an installed package's inline types only if it ships py.typed."""
    assert (ROOT / "memlocal" / "py.typed").is_file()
    assert (ROOT / "sync" / "py.typed").is_file()
