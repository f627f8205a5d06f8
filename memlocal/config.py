"""One registry of settings, resolved with a single precedence: flag > environment > TOML > default.

Every setting is declared once in ``SETTINGS`` with its type, default, environment variable and
help text; ``config.example.toml`` and ``memlocal config show`` are generated from (and tested
against) this table, so a setting cannot exist in one place and not the others.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Final, Iterator, Mapping, TypeVar

import platformdirs

from .errors import ConfigError, ValidationError
from .model import CATEGORIES, parse_age

APP_NAME: Final = "memlocal"


@dataclass(frozen=True, slots=True)
class Setting:
    """A declared setting: ``key`` is ``section.name`` in TOML; ``env`` lists variables in priority order."""

    key: str
    type: type
    default: Any
    help: str
    env: tuple[str, ...] = ()
    secret: bool = False
    # A "friend" of another setting (the bucket's endpoint, region, keys): of its variables only
    # the one with the same prefix as the variable that set the leader applies
    # (docs/spec.md, "Bucket and configuration").
    follows: str = ""
    # Limits, checked at load for every source (file, environment, flag): an inclusive range
    # (``above`` makes the lower bound exclusive: "more than 0"), a closed list of values, or a
    # function returning what is wrong with a value ("" or None when it is fine).
    min: float | None = None
    max: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] = ()
    check: Callable[[Any], str | None] | None = None
    allowed: str = ""  # how ``check`` describes the values it accepts, for the error and the docs

    def limits(self) -> str:
        """The allowed values in words (``""`` when any value of the type goes, booleans excepted)."""
        kind = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[self.type]
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        if self.allowed:
            return self.allowed
        lo = f"more than {_num(self.above)}" if self.above is not None else (
            f"at least {_num(self.min)}" if self.min is not None else "")
        if lo and self.max is not None:
            if self.min is not None:
                return f"{kind} from {_num(self.min)} to {_num(self.max)}"
            return f"{kind} {lo} and at most {_num(self.max)}"
        if lo:
            return f"{kind} {lo}"
        if self.max is not None:
            return f"{kind} at most {_num(self.max)}"
        return kind if self.type is bool else ""

    def problem(self, value: Any) -> str | None:
        """Why ``value`` (already of the setting's type) is not allowed; ``None`` when it is."""
        if isinstance(value, float) and not math.isfinite(value):
            return "not a finite number"
        if self.choices and value not in self.choices:
            return "not one of the choices"
        if self.min is not None and value < self.min:
            return "too small"
        if self.above is not None and value <= self.above:
            return "too small"
        if self.max is not None and value > self.max:
            return "too large"
        if self.check is not None:
            return self.check(value) or None
        return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def default_db_path() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME)) / "memlocal.db"


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def _http_url(value: str) -> str | None:
    # memory://<name>: the sync's in-process bucket (memlocal_sync.inmemory), for tests and embedding.
    return (None if not value or re.fullmatch(r"https?://[^\s/]+(/\S*)?|memory://[A-Za-z0-9._-]+", value)
            else "not an http(s) URL or memory://<name>")


def _bucket_name(value: str) -> str | None:
    # S3's rules (3-63 of a-z 0-9 . -) loosened for S3-compatible servers: never a slash,
    # a space or anything else that would change the meaning of a request path.
    return None if not value or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,254}", value) else "not a bucket name"


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "empty"


def _below_one(value: float) -> str | None:
    return None if 0 <= value < 1 else "not at least 0 and below 1"


def _age(value: str) -> str | None:
    try:
        if value:
            parse_age(value)
        return None
    except ValidationError:
        return "not an age"


def _categories(value: str) -> str | None:
    unknown = [c for c in (c.strip() for c in value.split(",")) if c and c not in CATEGORIES]
    return f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}" if unknown else None


_PATTERN_KIND: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


def parse_extra_patterns(spec: str) -> tuple[tuple[str, str], ...]:
    """``secrets.extra_patterns``: one ``kind: regex`` per line (blank lines and ``#`` lines
    skipped) as ``(kind, regex)`` pairs; ``ValueError`` naming the line that is not one (a kind
    of ``a-z 0-9 -``, a regular expression that compiles and never matches empty text)."""
    out = []
    for n, line in enumerate(spec.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        kind, sep, pattern = line.partition(":")
        kind, pattern = kind.strip(), pattern.strip()
        if not sep or not _PATTERN_KIND.fullmatch(kind) or not pattern:
            raise ValueError(f"line {n} is not 'kind: regex' (a kind of a-z 0-9 -)")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"line {n}: {exc}") from None
        if compiled.fullmatch(""):
            raise ValueError(f"line {n}: the pattern matches empty text")
        out.append((kind, pattern))
    return tuple(out)


def _extra_patterns(value: str) -> str | None:
    try:
        parse_extra_patterns(value)
    except ValueError as exc:
        return str(exc)
    return None


_DAY: Final = 86400.0

_SETTINGS: tuple[Setting, ...] = (
    Setting("store.path", str, "", "SQLite database file; empty means the user data dir", ("MEMLOCAL_DB",)),
    Setting("store.busy_timeout_s", float, 30.0, "how long a writer waits for another process's lock", ("MEMLOCAL_BUSY_TIMEOUT_S",), min=0, max=3600),
    Setting("recall.limit", int, 8, "results returned by recall when no limit is given", ("MEMLOCAL_RECALL_LIMIT",), min=1, max=1000),
    Setting("recall.min_score", float, 0.05, "lowest score recall returns", ("MEMLOCAL_RECALL_MIN_SCORE",), min=0, max=1),
    Setting("inject.budget_chars", int, 2000, "character budget of the whole context block (0: no memory block)", ("MEMLOCAL_INJECT_BUDGET_CHARS",), min=0, max=1_000_000),
    Setting("inject.relevant_limit", int, 8, "query-relevant entries in the context block", ("MEMLOCAL_INJECT_RELEVANT_LIMIT",), min=0, max=1000),
    Setting("inject.filler", str, "labelled", "evidence mode: the facts the task gives no evidence for, in the room left: 'labelled' in a last section saying so (after the facts it gives only weak evidence for), 'core' under the core heading, 'omit' left out (docs/relevance.md)", ("MEMLOCAL_INJECT_FILLER",), choices=("labelled", "core", "omit")),
    Setting("inject.min_score", float, 0.05, "lowest score of a query-relevant entry in the context block", ("MEMLOCAL_INJECT_MIN_SCORE",), min=0, max=1),
    Setting("semantic.enabled", bool, False, "add the semantic signal (needs the memlocal[semantic] extra)", ("MEMLOCAL_SEMANTIC_ENABLED",)),
    Setting("ranking.mode", str, "evidence", "'evidence': only memories the query gives evidence for, ordered by the spec's score; 'spec': the spec's literal top-k by score", ("MEMLOCAL_RANKING_MODE",), choices=("evidence", "spec")),
    Setting("ranking.evidence_ratio", float, 0.3, "evidence mode: a result's topic must be at least this share of the best match's topic", ("MEMLOCAL_RANKING_EVIDENCE_RATIO",), min=0, max=1),
    Setting("recall.cache_profiles", int, 16, "profiles whose recall index a process keeps in memory", ("MEMLOCAL_RECALL_CACHE_PROFILES",), min=1, max=100_000),
    Setting("dedup.enabled", bool, True, "a save that repeats an active memory of its profile, in any category (case, whitespace and punctuation aside, but not inside a path, a flag or an identifier) returns that memory instead of storing a copy", ("MEMLOCAL_DEDUP_ENABLED",)),
    Setting("dedup.near", bool, True, "also merge near-duplicates (the same statement reworded slightly; see docs/hygiene.md)", ("MEMLOCAL_DEDUP_NEAR",)),
    Setting("dedup.near_threshold", float, 1.0, "Jaccard similarity of the terms at which a guarded near-duplicate merges", ("MEMLOCAL_DEDUP_NEAR_THRESHOLD",), above=0, max=1),
    Setting("dedup.supersede", bool, True, "a save that restates an active memory's subject and scope with a changed value (a number, time, date, version, name) supersedes it when the rule is sure; off: both stay active, dated in the block (docs/hygiene.md, \"Updates\")", ("MEMLOCAL_DEDUP_SUPERSEDE",)),
    Setting("retention.enabled", bool, False, "let the sync daemon prune every profile by the policy below (off: nothing is ever pruned automatically)", ("MEMLOCAL_RETENTION_ENABLED",)),
    Setting("retention.interval_s", float, 3600.0, "seconds between the daemon's retention runs", ("MEMLOCAL_RETENTION_INTERVAL_S",), above=0, max=30 * _DAY),
    Setting("retention.staleness_above", float, 0.9, "the policy prunes memories whose current staleness is above this (0 to rely on age alone)", ("MEMLOCAL_RETENTION_STALENESS_ABOVE",), min=0, max=1, check=_below_one, allowed="a number at least 0 and below 1"),
    Setting("retention.older_than", str, "", "and, when set (e.g. 90d), untouched for longer than this", ("MEMLOCAL_RETENTION_OLDER_THAN",), check=_age, allowed="empty or an age: a number and a unit of s, m, h, d, w (e.g. 90d)"),
    Setting("retention.categories", str, "", "comma-separated categories the policy may prune; empty: all but preference and fact", ("MEMLOCAL_RETENTION_CATEGORIES",), check=_categories, allowed="empty or a comma-separated list of " + ", ".join(CATEGORIES)),
    Setting("llm.enabled", bool, True, "use the LLM processor when ANTHROPIC_API_KEY is set", ("MEMLOCAL_LLM_ENABLED",)),
    Setting("llm.model", str, "claude-haiku-4-5-20251001", "extraction model", ("ANTHROPIC_MEMORY_MODEL",), check=_non_empty, allowed="a model name (not empty)"),
    Setting("llm.timeout_s", float, 5.0, "deadline for one whole extraction, retries included", ("MEMLOCAL_LLM_TIMEOUT_S",), above=0, max=600),
    # The bucket: INTERNAL_S3_BUCKET, else S3_BUCKET; its friends follow the prefix that was chosen.
    Setting("bucket.name", str, "", "bucket for memory/<profile>/<id>.json; empty means local only", ("INTERNAL_S3_BUCKET", "S3_BUCKET"), check=_bucket_name, allowed="empty or a bucket name (2-255 of A-Z a-z 0-9 . _ -, starting with a letter or digit)"),
    Setting("bucket.local_only_notice", bool, True, "without a bucket, say so once per database (on its first open) on stderr; false: never", ("MEMLOCAL_LOCAL_ONLY_NOTICE",)),
    Setting("bucket.endpoint", str, "", "S3 endpoint URL; empty means AWS", ("INTERNAL_S3_ENDPOINT", "S3_ENDPOINT"), follows="bucket.name", check=_http_url, allowed="empty, an http:// or https:// URL, or memory://<name> (an in-process bucket)"),
    Setting("bucket.region", str, "", "bucket region; empty means boto3's default chain", ("INTERNAL_S3_REGION", "S3_REGION"), follows="bucket.name"),
    Setting("bucket.access_key_id", str, "", "access key; empty means boto3's credential chain", ("INTERNAL_S3_ACCESS_KEY_ID", "S3_ACCESS_KEY_ID"), follows="bucket.name"),
    Setting("bucket.secret_access_key", str, "", "secret key; empty means boto3's credential chain", ("INTERNAL_S3_SECRET_ACCESS_KEY", "S3_SECRET_ACCESS_KEY"), secret=True, follows="bucket.name"),
    Setting("sync.interval_s", float, 30.0, "seconds between the daemon's reconciliation passes", ("MEMLOCAL_SYNC_INTERVAL_S",), above=0, max=_DAY),
    Setting("sync.debounce_s", float, 1.0, "how long the daemon lets local writes settle before an early pass", ("MEMLOCAL_SYNC_DEBOUNCE_S",), min=0, max=3600),
    Setting("sync.put_timeout_s", float, 2.0, "timeout of a save's write-through PUT (no retries: the outbox retries)", ("MEMLOCAL_SYNC_PUT_TIMEOUT_S",), above=0, max=600),
    Setting("sync.breaker_s", float, 15.0, "after a write-through failure or timeout, saves of every process on this host go straight to the outbox for this many seconds (doubling while the bucket stays sick, up to 8x); then one save tries again", ("MEMLOCAL_SYNC_BREAKER_S",), min=0, max=_DAY),
    Setting("sync.timeout_s", float, 10.0, "connect/read timeout of one bucket request during a pass", ("MEMLOCAL_SYNC_TIMEOUT_S",), above=0, max=600),
    Setting("sync.attempts", int, 5, "attempts per bucket request on throttling, 5xx and connection errors", ("MEMLOCAL_SYNC_ATTEMPTS",), min=1, max=20),
    Setting("sync.workers", int, 16, "concurrent bucket requests during a pass", ("MEMLOCAL_SYNC_WORKERS",), min=1, max=256),
    Setting("sync.mass_delete_min", int, 5, "a pass may delete this many of a profile's memories before the half-of-profile guard applies", ("MEMLOCAL_SYNC_MASS_DELETE_MIN",), min=0, max=1_000_000),
    Setting("sync.max_delete_share", float, 0.5, "a pass holds back local deletions of more than this share of a profile's (or the whole pass's) synced memories, beyond sync.mass_delete_min of them (as rclone bisync's --max-delete)", ("MEMLOCAL_SYNC_MAX_DELETE_SHARE",), min=0, max=1),
    Setting("sync.allow_unconditional", bool, False, "sync with a bucket that ignores If-None-Match/If-Match (rclone serve s3, old MinIO/Ceph): last-writer-wins, other hosts' changes can be overwritten", ("MEMLOCAL_SYNC_ALLOW_UNCONDITIONAL",)),
    Setting("sync.max_object_bytes", int, 1048576, "bucket objects larger than this are skipped and reported", ("MEMLOCAL_SYNC_MAX_OBJECT_BYTES",), min=8192, max=1 << 30),
    Setting("sync.list_page_size", int, 1000, "objects per bucket listing page (S3 returns at most 1000)", ("MEMLOCAL_SYNC_LIST_PAGE_SIZE",), min=1, max=1000),
    Setting("sync.snapshot_min_objects", int, 100, "profiles with at least this many objects get a snapshot object (memlocal/snapshots/) that fresh hosts read instead of every object; 0 turns snapshots off", ("MEMLOCAL_SYNC_SNAPSHOT_MIN_OBJECTS",), min=0, max=10_000_000),
    Setting("sync.pull_on_open", bool, True, "a host pulls the bucket when a bank opens: the whole bucket before the first read while this host has never completed a pass against it (within sync.hydrate_deadline_s), else a background refresh", ("MEMLOCAL_SYNC_PULL_ON_OPEN",)),
    Setting("sync.hydrate_deadline_s", float, 5.0, "how long the first read of a host that has never completed a pass against its bucket waits for that pull; past it, reads answer from the local index (and say so once)", ("MEMLOCAL_SYNC_HYDRATE_DEADLINE_S",), min=0, max=3600),
    Setting("sync.full_listing_s", float, 3600.0, "between full listings of the bucket: other passes read only the change record (memlocal/changes/), so writers that do not keep it are seen at this cadence; 0 lists on every pass", ("MEMLOCAL_SYNC_FULL_LISTING_S",), min=0, max=365 * _DAY),
    Setting("sync.foreign_listing_s", float, 86400.0, "after a full listing finds changes that no change record explains (a writer that keeps no record: another implementation of the layout, the AWS CLI), list the bucket in full on every pass for this long; 0 never", ("MEMLOCAL_SYNC_FOREIGN_LISTING_S",), min=0, max=365 * _DAY),
    Setting("sync.deadline_s", float, 12.0, "a pass waits at most this long for an answer from the bucket, counted from its start (a cron sync run: its process's start) or the bucket's last answer: every attempt's timeout is capped by what is left, so a pass against a hung bucket ends with its one-line error within this long", ("MEMLOCAL_SYNC_DEADLINE_S",), above=0, max=3600),
    Setting("sync.change_retention_days", float, 7.0, "change segments (and the delete records in them) are kept this long; a host idle for half of it lists the bucket in full on its next pass", ("MEMLOCAL_SYNC_CHANGE_RETENTION_DAYS",), min=0.01, max=3650),
    Setting("sync.reprobe_s", float, 3600.0, "a pass probes again whether the server honours conditional writes when the last probe is older than this (and whenever the endpoint changes)", ("MEMLOCAL_SYNC_REPROBE_S",), min=0, max=365 * _DAY),
    Setting("sync.snapshot_max_bytes", int, 64 << 20, "a snapshot is read streaming and ignored (its objects fetched) past this many bytes, compressed or unpacked: a decompression bomb costs its cap, not its size", ("MEMLOCAL_SYNC_SNAPSHOT_MAX_BYTES",), min=1 << 16, max=1 << 30),
    Setting("sync.push_snapshot_min", int, 1000, "a pass that uploads at least this many memories of a profile writes that profile's snapshot at its end, so that a fresh host right after a first push reads it; 0 never", ("MEMLOCAL_SYNC_PUSH_SNAPSHOT_MIN",), min=0, max=10_000_000),
    Setting("sync.max_clock_skew_s", float, 300.0, "a bucket object's createdAt or lastAccessedAt later than now plus this is read as now (a forged or skewed clock cannot rank a memory first for good)", ("MEMLOCAL_SYNC_MAX_CLOCK_SKEW_S",), min=0, max=_DAY),
    Setting("sync.refresh_ttl_s", float, 2.0, "a read asks for a background pull of its profile when the last one is older than this", ("MEMLOCAL_SYNC_REFRESH_TTL_S",), min=0, max=_DAY),
    Setting("audit.enabled", bool, True, "record each rendered memory block (when, profile, memory ids per tier, size, query hash)", ("MEMLOCAL_AUDIT_ENABLED",)),
    Setting("audit.max_rows", int, 10000, "injection audit rows kept (the newest); 0 means no cap", ("MEMLOCAL_AUDIT_MAX_ROWS",), min=0, max=100_000_000),
    Setting("audit.retention_days", float, 30.0, "injection audit rows older than this are deleted; 0 keeps them until the cap", ("MEMLOCAL_AUDIT_RETENTION_DAYS",), min=0, max=36_500),
    Setting("secrets.mode", str, "redact", "credentials found in a save: 'redact' them to [REDACTED:<kind>], or 'reject' the save", ("MEMLOCAL_SECRETS_MODE",), choices=("redact", "reject")),
    Setting("secrets.extra_patterns", str, "", "more credential shapes, one 'kind: regex' per line (a TOML multi-line string); each match is redacted as [REDACTED:<kind>] on save and read, and by 'memlocal redact --rescan' in what is already stored", ("MEMLOCAL_SECRETS_EXTRA_PATTERNS",), check=_extra_patterns, allowed="empty or lines of 'kind: regex' (a kind of a-z 0-9 -; a regular expression that compiles)"),
    Setting("serve.host", str, "127.0.0.1", "address `memlocal serve` binds; non-loopback needs serve.api_token", ("MEMLOCAL_SERVE_HOST",), check=_non_empty, allowed="a host name or address (not empty)"),
    Setting("serve.port", int, 8765, "port `memlocal serve` listens on", ("MEMLOCAL_SERVE_PORT",), min=0, max=65535),
    Setting("serve.workers", int, 0, "processes `memlocal serve` answers with, each with its own connection and recall index over the one WAL database; 0: one per CPU core, up to 4", ("MEMLOCAL_SERVE_WORKERS",), min=0, max=64),
    Setting("serve.api_token", str, "", "when set, every REST request needs 'Authorization: Bearer <token>'", ("MEMLOCAL_API_TOKEN",), secret=True),
    Setting("serve.allowed_hosts", str, "", "comma-separated Host names the server answers besides loopback ones; with a token and no list, any", ("MEMLOCAL_ALLOWED_HOSTS",)),
    # The bridge to Claude's hosted memory stores (memlocal.integrations.claude_stores, docs/integrations.md).
    Setting("bridge.claude_profiles", str, "", "comma-separated profiles the sync daemon mirrors to Claude's hosted memory stores (memlocal bridge claude sync) every bridge.claude_interval_s; empty: none", ("MEMLOCAL_BRIDGE_CLAUDE_PROFILES",)),
    Setting("bridge.claude_interval_s", float, 300.0, "seconds between the daemon's bridge syncs of bridge.claude_profiles", ("MEMLOCAL_BRIDGE_CLAUDE_INTERVAL_S",), above=0, max=30 * _DAY),
    Setting("bridge.claude_deadline_s", float, 60.0, "a bridge sync waits at most this long for the memory stores API, retries and back-off included (counted from the sync's start); past it the sync stops with a one-line error, what it did kept", ("MEMLOCAL_BRIDGE_CLAUDE_DEADLINE_S",), above=0, max=3600),
    Setting("bridge.claude_timeout_s", float, 10.0, "timeout of one memory stores API request (capped by what is left of bridge.claude_deadline_s)", ("MEMLOCAL_BRIDGE_CLAUDE_TIMEOUT_S",), above=0, max=600),
    Setting("bridge.claude_confidence", float, 0.6, "confidence of a memory a hosted agent wrote, taken back by the bridge (source inferred)", ("MEMLOCAL_BRIDGE_CLAUDE_CONFIDENCE",), min=0, max=1),
)

SETTINGS: dict[str, Setting] = {s.key: s for s in _SETTINGS}


def _coerce(setting: Setting, value: Any, origin: str, *, typed: bool = False) -> Any:
    """Convert ``value`` to the setting's type and check it against the setting's limits.

    One error for every source, naming the setting, where the value came from and what is allowed.
    ``typed``: the source has types of its own (TOML), so a value must already be of the
    setting's type (``interval_s = "30"`` is a string, not a number); the environment and flags
    are text, which is parsed.
    """
    if typed and isinstance(value, str) and setting.type is not str:
        kind = {int: "an integer", float: "a number", bool: "true or false"}[setting.type]
        raise ConfigError(f"{origin}: {setting.key} must be {kind} (without quotes), got the string {value!r}")
    value = _typed(setting, value, origin)
    if setting.problem(value) is not None:
        shown = "***" if setting.secret else repr(value)
        raise ConfigError(f"{origin}: {setting.key} must be {setting.limits()}, got {shown}")
    return value


def _typed(setting: Setting, value: Any, origin: str) -> Any:
    """Check or convert ``value`` to the setting's type; strings from the environment are parsed."""
    t = setting.type
    if isinstance(value, str) and t is not str:
        text = value.strip()
        try:
            if t is bool:
                low = text.lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ValueError(text)
            return t(text)
        except ValueError:
            raise ConfigError(
                f"{origin}: {setting.key} must be a {t.__name__}, got {value!r}"
            ) from None
    if t is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, t) or (t is int and isinstance(value, bool)):
        raise ConfigError(
            f"{origin}: {setting.key} must be a {t.__name__}, got {type(value).__name__} {value!r}"
        )
    return value


def _not_a_file(path: Path) -> str:
    """Why ``path`` cannot be read as a config file (it is not a regular file)."""
    if path.is_dir():
        return "is a directory, not a config file"
    if path.exists():
        return "is not a regular file"
    return "does not exist"


def _flatten(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            yield from _flatten(value, key + ".")
        else:
            yield key, value


def _unknown(key: str, origin: str) -> ConfigError:
    hint = difflib.get_close_matches(key, SETTINGS.keys(), n=1)
    suggestion = f" (did you mean {hint[0]}?)" if hint else " (see config.example.toml for the list)"
    return ConfigError(f"{origin}: unknown setting {key!r}{suggestion}")


def _check_together(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """Rules between settings (each setting's own limits are checked as it is read)."""
    if bool(values["bucket.access_key_id"]) != bool(values["bucket.secret_access_key"]):
        raise ConfigError(
            "bucket.access_key_id and bucket.secret_access_key go together: set both or neither "
            f"(key id from {sources['bucket.access_key_id']}, secret from {sources['bucket.secret_access_key']})"
        )


# Typed views of the registry, one per section: ``config.sync.interval_s`` is a float to mypy, where
# ``config["sync.interval_s"]`` could only be ``object``. tests/test_config.py checks that every
# setting of a section is a field of its view, of the setting's type: a new setting is added
# to ``SETTINGS`` and to its view.


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The ``store.*`` settings, typed: ``config.store``."""

    path: str
    busy_timeout_s: float


@dataclass(frozen=True, slots=True)
class RecallConfig:
    """The ``recall.*`` settings, typed: ``config.recall``."""

    limit: int
    min_score: float
    cache_profiles: int


@dataclass(frozen=True, slots=True)
class InjectConfig:
    """The ``inject.*`` settings, typed: ``config.inject``."""

    budget_chars: int
    relevant_limit: int
    min_score: float
    filler: str


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    """The ``semantic.*`` settings, typed: ``config.semantic``."""

    enabled: bool


@dataclass(frozen=True, slots=True)
class RankingConfig:
    """The ``ranking.*`` settings, typed: ``config.ranking``."""

    mode: str
    evidence_ratio: float


@dataclass(frozen=True, slots=True)
class DedupConfig:
    """The ``dedup.*`` settings, typed: ``config.dedup``."""

    enabled: bool
    near: bool
    near_threshold: float
    supersede: bool


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """The ``bridge.*`` settings, typed: ``config.bridge``."""

    claude_profiles: str
    claude_interval_s: float
    claude_deadline_s: float
    claude_timeout_s: float
    claude_confidence: float


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """The ``retention.*`` settings, typed: ``config.retention``."""

    enabled: bool
    interval_s: float
    staleness_above: float
    older_than: str
    categories: str


@dataclass(frozen=True, slots=True)
class LlmConfig:
    """The ``llm.*`` settings, typed: ``config.llm``."""

    enabled: bool
    model: str
    timeout_s: float


@dataclass(frozen=True, slots=True)
class BucketConfig:
    """The ``bucket.*`` settings, typed: ``config.bucket``."""

    name: str
    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str
    local_only_notice: bool


@dataclass(frozen=True, slots=True)
class SyncConfig:
    """The ``sync.*`` settings, typed: ``config.sync``."""

    interval_s: float
    debounce_s: float
    put_timeout_s: float
    breaker_s: float
    timeout_s: float
    attempts: int
    workers: int
    mass_delete_min: int
    max_delete_share: float
    allow_unconditional: bool
    max_object_bytes: int
    list_page_size: int
    snapshot_min_objects: int
    pull_on_open: bool
    hydrate_deadline_s: float
    full_listing_s: float
    change_retention_days: float
    reprobe_s: float
    refresh_ttl_s: float
    deadline_s: float
    foreign_listing_s: float
    snapshot_max_bytes: int
    push_snapshot_min: int
    max_clock_skew_s: float


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """The ``audit.*`` settings, typed: ``config.audit``."""

    enabled: bool
    max_rows: int
    retention_days: float


@dataclass(frozen=True, slots=True)
class SecretsConfig:
    """The ``secrets.*`` settings, typed: ``config.secrets``."""

    mode: str
    extra_patterns: str


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """The ``serve.*`` settings, typed: ``config.serve``."""

    host: str
    port: int
    workers: int
    api_token: str
    allowed_hosts: str


V = TypeVar("V")


class Config:
    """Effective settings and where each came from (``default``, ``file:<path>``, ``env:<VAR>``, ``flag``)."""

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str], file: Path | None) -> None:
        self._values = dict(values)
        self._sources = dict(sources)
        self.file = file

    @classmethod
    def defaults(cls) -> "Config":
        """Every setting at its default (no file, no environment)."""
        return cls({k: s.default for k, s in SETTINGS.items()}, {k: "default" for k in SETTINGS}, None)

    @classmethod
    def load(
        cls,
        config_path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> "Config":
        """Resolve every setting. ``overrides`` are flags (``None`` values mean "not given")."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {k: s.default for k, s in SETTINGS.items()}
        sources: dict[str, str] = {k: "default" for k in SETTINGS}

        path: Path | None = None
        if config_path is not None:
            path = Path(config_path)
            if not path.is_file():
                raise ConfigError(f"config file {path} {_not_a_file(path)}")
        elif env.get("MEMLOCAL_CONFIG"):
            path = Path(env["MEMLOCAL_CONFIG"])
            if not path.is_file():
                raise ConfigError(f"MEMLOCAL_CONFIG names {path}, which {_not_a_file(path)}")
        elif default_config_path().is_file():
            path = default_config_path()
        if path is not None:
            origin = f"file:{path}"
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{path}: not valid TOML: {exc}") from None
            except OSError as exc:
                raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
            for key, value in _flatten(data):
                if key not in SETTINGS:
                    raise _unknown(key, str(path))
                values[key] = _coerce(SETTINGS[key], value, str(path), typed=True)
                sources[key] = origin

        env_used: dict[str, str] = {}
        for key, setting in SETTINGS.items():
            candidates = setting.env
            if setting.follows:
                # INTERNAL_S3_ENDPOINT goes with INTERNAL_S3_BUCKET, S3_ENDPOINT with S3_BUCKET;
                # with no bucket variable set, the friends come from the file only.
                leader = env_used.get(setting.follows, "")
                prefix = leader.rsplit("_", 1)[0] + "_" if leader else None
                candidates = tuple(v for v in candidates if prefix and v.startswith(prefix))
            for var in candidates:
                if env.get(var, "") != "":
                    values[key] = _coerce(setting, env[var], f"environment variable {var}")
                    sources[key] = f"env:{var}"
                    env_used[key] = var
                    break

        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if key not in SETTINGS:
                raise _unknown(key, "flag")
            values[key] = _coerce(SETTINGS[key], value, "flag")
            sources[key] = "flag"
        _check_together(values, sources)
        return cls(values, sources, path)

    def __getitem__(self, key: str) -> object:
        """The setting ``key``'s value, untyped (``config show``, tests): code reads the typed
        views (``config.recall.limit``) or ``get_int``/``get_float``/``get_str``/``get_bool``."""
        return self._value(key)

    def _value(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise _unknown(key, "config") from None

    def get(self, key: str, default: object = None) -> object:
        return self._values.get(key, default)

    def _view(self, cls: type[V], section: str) -> V:
        """The section's settings as ``cls`` (a float setting given as a TOML integer is a float)."""
        values = {f.name: self._value(f"{section}.{f.name}") for f in fields(cls)}  # type: ignore[arg-type]  # a view dataclass
        return cls(**{k: float(v) if SETTINGS[f"{section}.{k}"].type is float else v for k, v in values.items()})

    @cached_property
    def store(self) -> StoreConfig:
        """The ``store.*`` settings."""
        return self._view(StoreConfig, "store")

    @cached_property
    def recall(self) -> RecallConfig:
        """The ``recall.*`` settings."""
        return self._view(RecallConfig, "recall")

    @cached_property
    def inject(self) -> InjectConfig:
        """The ``inject.*`` settings."""
        return self._view(InjectConfig, "inject")

    @cached_property
    def semantic(self) -> SemanticConfig:
        """The ``semantic.*`` settings."""
        return self._view(SemanticConfig, "semantic")

    @cached_property
    def ranking(self) -> RankingConfig:
        """The ``ranking.*`` settings."""
        return self._view(RankingConfig, "ranking")

    @cached_property
    def dedup(self) -> DedupConfig:
        """The ``dedup.*`` settings."""
        return self._view(DedupConfig, "dedup")

    @cached_property
    def retention(self) -> RetentionConfig:
        """The ``retention.*`` settings."""
        return self._view(RetentionConfig, "retention")

    @cached_property
    def llm(self) -> LlmConfig:
        """The ``llm.*`` settings."""
        return self._view(LlmConfig, "llm")

    @cached_property
    def bucket(self) -> BucketConfig:
        """The ``bucket.*`` settings."""
        return self._view(BucketConfig, "bucket")

    @cached_property
    def sync(self) -> SyncConfig:
        """The ``sync.*`` settings."""
        return self._view(SyncConfig, "sync")

    @cached_property
    def audit(self) -> AuditConfig:
        """The ``audit.*`` settings."""
        return self._view(AuditConfig, "audit")

    @cached_property
    def secrets(self) -> SecretsConfig:
        """The ``secrets.*`` settings."""
        return self._view(SecretsConfig, "secrets")

    @cached_property
    def serve(self) -> ServeConfig:
        """The ``serve.*`` settings."""
        return self._view(ServeConfig, "serve")

    @cached_property
    def bridge(self) -> BridgeConfig:
        """The ``bridge.*`` settings."""
        return self._view(BridgeConfig, "bridge")

    # Typed reads by key, for a key chosen at run time (``config.get_float(f"{name}.interval_s")``).
    def get_int(self, key: str) -> int:
        """The setting ``key`` as an ``int``."""
        return int(self._value(key))

    def get_float(self, key: str) -> float:
        """The setting ``key`` as a ``float`` (a TOML integer such as ``5`` included)."""
        return float(self._value(key))

    def get_str(self, key: str) -> str:
        """The setting ``key`` as a ``str``."""
        return str(self._value(key))

    def get_bool(self, key: str) -> bool:
        """The setting ``key`` as a ``bool``."""
        return bool(self._value(key))

    def source(self, key: str) -> str:
        return self._sources.get(key, "default")

    def with_overrides(self, **overrides: Any) -> "Config":
        """A copy with ``key=value`` flags applied (keys use ``__`` for ``.``)."""
        values, sources = dict(self._values), dict(self._sources)
        for name, value in overrides.items():
            key = name.replace("__", ".")
            if key not in SETTINGS:
                raise _unknown(key, "flag")
            values[key] = _coerce(SETTINGS[key], value, "flag")
            sources[key] = "flag"
        _check_together(values, sources)
        return Config(values, sources, self.file)

    @property
    def db_path(self) -> Path:
        return Path(self.store.path).expanduser() if self.store.path else default_db_path()

    def rows(self) -> list[dict[str, Any]]:
        """Every setting with its effective value and source; secrets are masked."""
        out = []
        for key in sorted(SETTINGS):
            setting = SETTINGS[key]
            value = self._values.get(key, setting.default)
            if key == "store.path" and not value:
                value = str(default_db_path())
            if setting.secret and value:
                value = "***"
            out.append({"key": key, "value": value, "source": self.source(key), "env": list(setting.env)})
        return out


def example_toml() -> str:
    """The text of ``config.example.toml``: every setting, commented out, with its variable."""
    lines = [
        "# memlocal configuration. Precedence: flag > environment variable > this file > default.",
        "# Load it with --config PATH or MEMLOCAL_CONFIG, or place it in the user config dir",
        "# (~/.config/memlocal/config.toml on Linux). Generated by `memlocal config example`.",
        "",
    ]
    section = None
    for key in sorted(SETTINGS):
        setting = SETTINGS[key]
        sec, name = key.rsplit(".", 1)
        if sec != section:
            if section is not None:
                lines.append("")
            lines.append(f"# [{sec}]")
            section = sec
        env = ", ".join(setting.env) if setting.env else "no variable"
        lines.append(f"# {setting.help} (env: {env})")
        if setting.limits():
            lines.append(f"# allowed: {setting.limits()}")
        default = setting.default
        if isinstance(default, bool):
            shown = "true" if default else "false"
        elif isinstance(default, str):
            shown = f'"{default}"'
        else:
            shown = repr(default)
        lines.append(f"# {name} = {shown}")
    return "\n".join(lines) + "\n"
