"""The public surface: ``memlocal.__all__`` is exactly what the package exports, and no module
reaches into another module's private names."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import memlocal

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"memlocal": ROOT / "memlocal", "memlocal_sync": ROOT / "memlocal_sync"}

EXPECTED = {
    "BankNotWiredError", "Config", "ConfigError", "InputTooLargeError", "Memory", "MemoryBank",
    "MemoryBankError", "NotFoundError", "Page", "RecallQuery", "SaveRequest", "SaveResult", "StoreError", "SyncError",
    "ValidationError", "__version__",
}


def test_all_is_the_documented_public_surface() -> None:
    assert set(memlocal.__all__) == EXPECTED
    assert len(memlocal.__all__) == len(set(memlocal.__all__))
    for name in memlocal.__all__:
        value = getattr(memlocal, name)  # every listed name exists
        if inspect.isclass(value):
            assert inspect.getdoc(value), f"memlocal.{name} has no docstring"
    namespace: dict[str, object] = {}
    exec("from memlocal import *", namespace)
    assert set(namespace) - {"__builtins__"} == EXPECTED


def _private_imports(path: Path, package: str) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_parts = [package, *path.relative_to(PACKAGES[package]).with_suffix("").parts]
    if module_parts[-1] == "__init__":
        module_parts.pop()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:  # relative: resolve against this module's package
            base = module_parts[: len(module_parts) - node.level]
            source = ".".join([*base, *(node.module.split(".") if node.module else [])])
        else:
            source = node.module or ""
        if source.split(".")[0] not in PACKAGES:
            continue
        found += [f"{source}.{a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_modules_import_only_public_names_of_each_other() -> None:
    offenders = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            private = _private_imports(path, package)
            if private:
                offenders[str(path.relative_to(ROOT))] = private
    assert offenders == {}
