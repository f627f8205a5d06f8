"""memlocal: a local-first Memory Bank for AI agents.

The library API is :class:`MemoryBank`; see README.md for a tour.
"""

from .bank import MemoryBank, SaveResult
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
from .model import Memory
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
    "SaveResult",
    "StoreError",
    "SyncError",
    "ValidationError",
    "__version__",
]
