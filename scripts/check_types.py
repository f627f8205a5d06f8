"""Type-check memlocal and memlocal_sync with ``mypy --strict`` (the ``[tool.mypy]`` settings).

    python scripts/check_types.py [mypy options...]

The repository folder ``sync/`` is installed as the import package ``memlocal_sync`` (a
setuptools ``package-dir`` mapping, which mypy cannot follow through the editable install's
import hook), so mypy sees it through a symlink named ``memlocal_sync`` on its search path.
The symlink and mypy's incremental cache live under ``~/.cache/memlocal-tests/mypy/``
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
    """This checkout's folder for mypy's cache and the ``memlocal_sync`` symlink."""
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlocal-tests" / "mypy" / key


def main(argv: list[str]) -> int:
    base = cache_dir()
    shim = base / "path"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "memlocal_sync"
    if not (link.is_symlink() and link.resolve() == (ROOT / "sync").resolve()):
        tmp = shim / f".memlocal_sync.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(ROOT / "sync", target_is_directory=True)
        tmp.replace(link)  # atomic: a concurrent run sees the old link or the new one
    env = {**os.environ, "MYPYPATH": str(shim)}
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(base / "cache"), "-p", "memlocal", "-p", "memlocal_sync", *argv]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    # Name the sync's files by their place in the repository, not by the symlink.
    sys.stdout.write(result.stdout.replace(f"{link}{os.sep}", f"sync{os.sep}"))
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
