"""Logging for the long-running commands (``serve``, ``sync daemon``, ``mcp``): lines a person can read.

- memlocal's own loggers (``memlocal``, ``memlocal_sync``) log at INFO, or DEBUG with ``-v``.
- Libraries (botocore, boto3, urllib3, watchfiles, APScheduler, httpx, anthropic, ...) log at
  WARNING at every verbosity: their DEBUG output is hundreds of lines a minute, and botocore's
  includes signed request headers.
- Whatever level anyone sets later, every line passes a filter on the handler that masks
  credentials (``Authorization`` headers, SigV4 ``Credential=``/``Signature=``, security tokens,
  ``aws_secret_access_key`` values, ``Bearer`` tokens), then the projection every memory text
  passes (:func:`memlocal.services.redact.redact`, registered here by that module through
  :func:`use_projection`: this layer cannot import it), so none can reach a log.
- The server's access log (uvicorn's ``uvicorn.access``) writes each path with its query's
  values left out (``/search?q=…&limit=…``): :class:`AccessLogFilter`.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Callable, Final

__all__ = ["OWN_LOGGERS", "QUIET_LIBRARIES", "AccessLogFilter", "HeldWarnings", "RedactingFilter",
           "configure_logging", "hold_warnings", "redact_credentials", "use_projection"]

OWN_LOGGERS: Final = ("memlocal", "memlocal_sync")
QUIET_LIBRARIES: Final = (
    "botocore", "boto3", "s3transfer", "urllib3", "watchfiles", "apscheduler", "httpx", "httpcore",
    "anthropic", "mcp", "asyncio", "filelock",
)

_PATTERNS: Final = (
    # A whole Authorization header value (SigV4 carries Credential=... and Signature=...).
    (re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)[^'\"\n,}]+"), r"\1[REDACTED]"),
    (re.compile(r"(?i)\b(Credential|Signature|X-Amz-Credential|X-Amz-Signature)=([^,&\s'\"]+)"), r"\1=[REDACTED]"),
    (re.compile(r"(?i)(x-amz-security-token['\"]?\s*[:=]\s*['\"]?)[^'\"\s,}]+"), r"\1[REDACTED]"),
    (re.compile(r"(?i)(secret_access_key['\"]?\s*[:=]\s*['\"]?)[^'\"\s,}]+"), r"\1[REDACTED]"),
    (re.compile(r"(?i)\b(Bearer)\s+[A-Za-z0-9._~+/=-]+"), r"\1 [REDACTED]"),
)


# The bank's own redaction (memlocal.services.redact), once that module is loaded: it registers itself.
_PROJECTION: list[Callable[[str], str]] = []


def use_projection(redactor: Callable[[str], str]) -> None:
    """Make every log line pass ``redactor`` too (``memlocal.services.redact`` calls this on import)."""
    _PROJECTION[:] = [redactor]


def redact_credentials(text: str) -> str:
    """``text`` with every credential-shaped value masked."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    for redactor in _PROJECTION:
        text = redactor(text)
    return text


def query_values_dropped(path: str) -> str:
    """A request path as the access log writes it: the query's names kept, its values left out
    (a search's ``q`` is what a user typed, and may be a token)."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    return base + "?" + "&".join(p.partition("=")[0] + ("=…" if "=" in p else "") for p in query.split("&"))


class AccessLogFilter(logging.Filter):
    """uvicorn's access lines (``client - "METHOD path HTTP/v" status``): the path without its
    query's values, each part through :func:`redact_credentials`. The record keeps its five
    arguments, which uvicorn's access formatter unpacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            client, method, _path, version, status = args
            record.args = (client, method, redact_credentials(query_values_dropped(args[2])), version, status)
        elif isinstance(record.msg, str):  # any other line on that logger
            return RedactingFilter().filter(record)
        return True


class RedactingFilter(logging.Filter):
    """A handler filter that masks credentials in the formatted message of every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is the library's bug; never lose the line for it
            return True
        cleaned = redact_credentials(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


class HeldWarnings(logging.Handler):
    """memlocal's warnings of a one-shot command, held until it ends (``hold_warnings``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.addFilter(RedactingFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def finish(self, *, show: bool) -> None:
        """Stop holding; with ``show``, print what was held on stderr, one line each."""
        for name in OWN_LOGGERS:
            logging.getLogger(name).removeHandler(self)
        records, self.records = self.records, []
        if show:
            for record in records:
                print(record.getMessage(), file=sys.stderr)


def hold_warnings() -> HeldWarnings:
    """For a one-shot CLI command: hold memlocal's own warnings until ``finish`` (the CLI prints
    them after a command that succeeded, and drops them after an error, so that a failing command
    prints its one error line only). Holds nothing when logging is configured already (a
    long-running command, a test run): those print as they come."""
    held = HeldWarnings()
    if logging.getLogger().handlers:
        return held
    for name in OWN_LOGGERS:
        logging.getLogger(name).addHandler(held)
    return held


def configure_logging(verbose: bool = False, *, level: int = logging.INFO, timestamps: bool = False) -> None:
    """Set up stderr logging for a long-running command (see the module docstring).

    ``level`` is the level of memlocal's own lines without ``verbose``; ``verbose`` makes it DEBUG.
    Libraries stay at WARNING either way.
    """
    fmt = ("%(asctime)s " if timestamps else "") + "%(levelname)-8s %(name)s: %(message)s"
    root = logging.getLogger()
    held = [h for name in OWN_LOGGERS for h in logging.getLogger(name).handlers if isinstance(h, HeldWarnings)]
    if not any(getattr(h, "_memlocal", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(fmt))
        handler.addFilter(RedactingFilter())
        handler._memlocal = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    for h in root.handlers:  # handlers others installed (uvicorn's come later, on their own loggers)
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
    root.setLevel(logging.WARNING)
    own = logging.DEBUG if verbose else level
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(own)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    for h in dict.fromkeys(held):  # a long-running command logs as things happen: nothing is held
        records, h.records = h.records, []
        h.finish(show=False)
        for record in records:
            logging.getLogger(record.name).handle(record)
