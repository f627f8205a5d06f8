"""Type-check memlocal and memlocal_sync with ``mypy --strict`` (the ``[tool.mypy]`` settings).

    python scripts/check_types.py [mypy options...]

mypy's incremental cache lives under ``~/.cache/memlocal-tests/mypy/``
(``$XDG_CACHE_HOME``), one
folder per checkout (worktrees run side by side), never in the repository: a warm run re-checks
only the changed modules (about 1.5 s of CPU against about 21 s cold; the
``follow_imports = "skip"`` override in pyproject.toml keeps mypy out of the parts of the
anthropic SDK and of langchain_core that memlocal never reaches).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """This checkout's folder for mypy's cache."""
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlocal-tests" / "mypy" / key


def main(argv: list[str]) -> int:
    base = cache_dir()
    base.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(base / "cache"), "-p", "memlocal", "-p", "memlocal_sync", *argv]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
