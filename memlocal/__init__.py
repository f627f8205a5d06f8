"""memlocal: a local-first Memory Bank for AI agents.

The library API is :class:`MemoryBank`; see README.md for a tour.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bank.facade import MemoryBank
    from .config import Config
    from .errors import (
        BankNotWiredError,
        ConfigError,
        InputTooLargeError,
        MemoryBankError,
        NotFoundError,
        StoreError,
        SyncError,
        ValidationError,
    )
    from .model import Memory, RecallQuery
    from .bank.saving import SaveRequest, SaveResult
    from .store import Page

__version__ = "0.1.0"

__all__ = [
    "BankNotWiredError",
    "Config",
    "ConfigError",
    "InputTooLargeError",
    "Memory",
    "MemoryBank",
    "MemoryBankError",
    "NotFoundError",
    "Page",
    "RecallQuery",
    "SaveRequest",
    "SaveResult",
    "StoreError",
    "SyncError",
    "ValidationError",
    "__version__",
]

# Where each public name lives. They are imported on first use (PEP 562), so that a command that
# needs none of them (``memlocal --help``) does not load SQLite's helpers and their numpy.
_HOMES = {
    "MemoryBank": "bank.facade", "SaveRequest": "bank.saving", "SaveResult": "bank.saving", "Config": "config", "Memory": "model",
    "RecallQuery": "model", "Page": "store",
    **{name: "errors" for name in ("BankNotWiredError", "ConfigError", "InputTooLargeError", "MemoryBankError",
                                   "NotFoundError", "StoreError", "SyncError", "ValidationError")},
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'memlocal' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
