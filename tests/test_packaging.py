"""The wheel, as a user installs it: built from a copy of the sources, installed into a fresh
virtual environment, and run from a folder where the repository is not on the path.

The sync package is ``memlocal_sync`` (folder and import name alike; a top-level ``sync`` would
clash with PyPI's package of that name): this test proves the wheel holds every module under that
name, that the entry points find it, and that nothing imports ``sync``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import support
import pytest

from s3server import S3

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "memlocal", "memlocal_sync")


def _modern_setuptools() -> bool:
    """The project's metadata (a PEP 639 ``license`` string) needs setuptools 77 or later."""
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


def _build_wheel(tmp: Path) -> Path:
    """Build from a copy, so the build's ``build/`` and ``*.egg-info`` never land in the repository."""
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)]
    if _modern_setuptools():
        cmd.insert(4, "--no-build-isolation")  # offline: the test extra's setuptools builds it
    support.run(cmd, check=True, capture_output=True, timeout=120)
    (wheel,) = (tmp / "dist").glob("memlocal-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_installs_memlocal_sync_and_runs(tmp_path: Path, s3: S3) -> None:
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every source module is in the wheel, the sync package under its installed name only.
    expected = {f"memlocal/{p.relative_to(REPO / 'memlocal').as_posix()}" for p in (REPO / "memlocal").rglob("*.py")}
    expected |= {f"memlocal_sync/{p.relative_to(REPO / 'memlocal_sync').as_posix()}" for p in (REPO / "memlocal_sync").rglob("*.py")}
    assert expected - names == set()
    assert not any(n.startswith("sync/") for n in names)
    assert "memlocal/faces/dashboard/static/index.html" in names

    # A fresh environment: memlocal only from the wheel, its dependencies from the environment
    # running this test (listed in a .pth file, so that folder's own .pth files, the editable
    # install's finder among them, are not run). The interpreter's system site-packages are not
    # used: what they hold differs from machine to machine.
    venv = tmp_path / "venv"
    support.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site_dir = Path(support.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True, timeout=60).stdout.strip())
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site_dir / "_memlocal_test_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    support.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=120)

    work = tmp_path / "work"  # not the repository: only the wheel's memlocal may be importable
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    db = str(work / "m.db")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        res = support.run([str(venv / "bin" / "memlocal"), "--db", db, *args], cwd=work, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return res

    assert run("--version").stdout.strip() == "memlocal, version 0.1.0"
    saved = json.loads(run("save", "-p", "alice", "--content", "Alice prefers tea over coffee", "--json").stdout)
    assert saved["synced"] is True  # the write-through replicator came through the entry point
    recalled = json.loads(run("recall", "-p", "alice", "tea", "--json").stdout)
    assert [r["memory"]["id"] for r in recalled["results"]] == [saved["memory"]["id"]]
    status = run("sync", "status", "--json")
    assert json.loads(status.stdout)["bucket"]["name"] == s3.bucket

    # The commands ran from the wheel, and its entry points name memlocal_sync. (Whether some
    # other top-level ``sync`` is importable depends on the machine's site-packages, not on us.)
    where = support.run([str(py), "-c", "import memlocal, memlocal_sync; from importlib.metadata import entry_points; "
                            "print(memlocal.__file__); print(memlocal_sync.__file__); "
                            "print(sorted(ep.value for g in ('memlocal.commands', 'memlocal.replicators', "
                            "'memlocal.daemons') for ep in entry_points(group=g)))"],
                           cwd=work, env=env, capture_output=True, text=True, check=True, timeout=60)
    lib_file, sync_file, eps = where.stdout.split("\n")[:3]
    assert Path(lib_file).is_relative_to(venv) and Path(sync_file).is_relative_to(venv)
    assert eps == str(["memlocal_sync.cli:sync_group", "memlocal_sync.daemon:factory", "memlocal_sync.replicator:factory"])


def test_the_langgraph_extra_installs_what_the_readme_example_imports() -> None:
    """``pip install 'memlocal[langgraph]'`` then the README's LangGraph example: every module it
    imports (``langgraph.graph`` for ``builder.compile(store=store)`` included) comes from a
    distribution the extra names (tests/test_docs.py runs the example itself)."""
    import ast
    import importlib.metadata as metadata
    import importlib.util
    import re
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A LangGraph store", 1)[1].split("\n## ", 1)[0]
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, re.S))
    modules = {node.module for node in ast.walk(ast.parse(code)) if isinstance(node, ast.ImportFrom) and node.module}
    modules |= {a.name for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Import) for a in node.names}
    third_party = sorted(m for m in modules if m.split(".")[0] not in ("memlocal", *sys.stdlib_module_names))
    assert "langgraph.graph" in third_party, third_party
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    named = {canonicalize_name(Requirement(r).name) for r in extras["langgraph"]}
    by_top = metadata.packages_distributions()
    for module in third_party:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"{module} is not installed: the [test] extra installs the [langgraph] one"
        origin = Path(spec.origin).resolve()
        owners = {canonicalize_name(d) for d in by_top.get(module.split(".")[0], [])
                  if any(Path(str(metadata.distribution(d).locate_file(f))).resolve() == origin
                         for f in metadata.distribution(d).files or ())}
        assert owners & named, f"{module} comes from {sorted(owners)}, which the [langgraph] extra does not name"
