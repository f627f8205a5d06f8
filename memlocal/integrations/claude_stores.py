"""A bridge between one profile of a ``MemoryBank`` and one of Claude's hosted memory stores.

``sync_profile(bank, profile)`` (``memlocal bridge claude sync -p PROFILE``) mirrors the profile's
active memories into the store whose metadata ``memlocal_profile`` names it (created when there is
none), and takes back what a hosted agent wrote there, through the anthropic SDK's
``client.beta.memory_stores`` with the SDK's own ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``:

- **the mapping**: a lineage (a memory and the versions that superseded it) is one hosted memory,
  whose content is the active version's text (what the agent should read, nothing to parse) at a
  path that stays the lineage's: the memory's ``memoryFile`` when the Claude memory tool wrote it
  (``/memories/people/ana.md``), else ``/<category>/<root id>.md`` (the lineage's first id).
  Superseded versions are not mirrored. A path the store would refuse is refused here, in one line.
- **both ways**: a local save, supersession or deletion reaches the store as a create, an update
  or a delete with a ``content_sha256`` precondition; a hosted agent's new memory comes back as a
  save (``source`` ``inferred``, ``bridge.claude_confidence``, the category its path names), an
  edit as a supersession, a deletion as a deletion through the mass-delete guard. Everything
  taken back passes the bank's save path (validation, redaction, duplicates, the update rule); a
  credential the agent wrote is redacted here and the store's copy and version rewritten redacted.
- **conflicts**: a lineage changed on both sides since the last sync keeps both texts: the local
  one in the lineage's hosted memory, the agent's as a second memory (on both sides); the report
  names both ids.
- **bounded**: one listing (pages of 100) finds what changed by hash, so a sync with nothing to do
  writes nothing; the store's 2,000-memory cap is met by a documented priority and what is left
  out is reported; 429, 5xx and connection errors are retried with back-off (``retry-after``
  honoured) inside ``bridge.claude_deadline_s``, each request bounded by ``bridge.claude_timeout_s``;
  the SDK's own retries are off, so a conditional write is never sent twice behind our back.
- **resumable**: the links (lineage -> hosted id and hash) are rows of the local table
  ``claude_store_links``, written as the sync goes; an interrupted sync resumes without duplicates
  (a create whose answer was lost is found again at its path, a take-back by the duplicate rule).

The anthropic SDK is imported here, in :mod:`memlocal.integrations.claude` and in :mod:`memlocal.services.llm`
only. See docs/integrations.md, "Claude's hosted memory stores".
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import threading
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Final, Mapping, TypeVar

import anthropic
from anthropic.types.beta import BetaManagedAgentsMemoryStore
from anthropic.types.beta.memory_stores import BetaManagedAgentsMemory

from ..errors import MemoryBankError, NotFoundError, SyncError, ValidationError
from ..humanize import plural
from ..services.llm import retry_after_s
from ..model import Memory, validate_profile
from ..services.redact import redact
from ..bank.saving import SaveRequest
from ..store import MigrationSet
from ..store.local import LocalRow
from .claude import FILE_FIELD, ROOT, category_for_path, path_problem

if TYPE_CHECKING:
    import sqlite_utils

    from ..bank.facade import MemoryBank

__all__ = ["HOSTED_FIELD", "PROFILE_KEY", "SCHEMA", "STORE_CAP", "BridgeReport", "hosted_path", "store_path_problem",
           "sync_profile", "sync_profiles"]

log = logging.getLogger("memlocal.bridge")

# The store's metadata key that names the profile it mirrors.
PROFILE_KEY: Final = "memlocal_profile"
# The extra field of a memory a hosted agent wrote: {"path": its hosted path} (the ids stay in
# the links table: detectors read a hosted id as a high-entropy string).
HOSTED_FIELD: Final = "claudeStore"
# The service's limits (the SDK's memory_create_params / memory_list_params).
STORE_CAP: Final = 2000
PAGE_LIMIT: Final = 100
FULL_PAGE_LIMIT: Final = 20
CONTENT_MAX_BYTES: Final = 102_400
PATH_MAX_BYTES: Final = 1024
PATH_MAX_SEGMENTS: Final = 20
# Past this many contents to read, one listing with view=full (pages of 20) beats one retrieve each,
# when the store is small enough that its pages are fewer than the retrieves (_Sync._contents).
_FULL_LISTING_FROM: Final = 40
# Creates in flight at once (a first sync is one create per lineage; the API's latency, not
# this process, is its time).
CREATE_WORKERS: Final = 8
# Links written in one transaction while a sync goes (and whatever is left at its end).
_FLUSH_EVERY: Final = 50
# Which lineages are mirrored first when the cap leaves room for only some: the core tier's
# categories, then the freshest (lowest staleness), then the newest.
PRIORITY: Final = ("preference", "fact", "behavior", "general", "context")

TABLE: Final = "claude_store_links"


def _create_links(db: "sqlite_utils.Database") -> None:
    db.execute(f"""CREATE TABLE {TABLE} (
        profile TEXT NOT NULL,
        path TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('store', 'link', 'seen')),
        text TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (profile, path)
    ) WITHOUT ROWID""")


# The bridge's own table (docs/storage.md, "Migrations"), rows (profile, path, kind, text):
# ('' , 'store', store id); (root id, 'link', JSON {hosted, sha, local, refused}); (hosted id,
# 'seen', sha): a hosted memory that repeated a local one (taken back as that one, no link).
SCHEMA: Final = MigrationSet("claude_store", {1: _create_links}, tables=(TABLE,))


def sha256(text: str) -> str:
    """The store's ``content_sha256``: the SHA-256 of the UTF-8 bytes, no normalisation."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def store_path_problem(path: str) -> str | None:
    """Why the memory store would refuse ``path`` (its rules: a leading ``/``, at most 1,024 bytes
    of UTF-8, NFC, 1 to 20 segments none empty, ``.`` or ``..``, no control or format character nor
    U+2028/U+2029), or ``None``."""
    if not path.startswith("/"):
        return "does not start with /"
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX_BYTES:
        return f"is {size} bytes long; the store takes at most {PATH_MAX_BYTES}"
    bad = next((ch for ch in path if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        return f"holds the control or format character U+{ord(bad):04X}"
    if unicodedata.normalize("NFC", path) != path:
        return "is not in Unicode NFC"
    segments = path[1:].split("/")
    if len(segments) > PATH_MAX_SEGMENTS:
        return f"has {len(segments)} segments; the store takes at most {PATH_MAX_SEGMENTS}"
    if any(s in ("", ".", "..") for s in segments):
        return "has an empty, '.' or '..' segment"
    return None


def hosted_path(memory: Memory, root: str) -> str:
    """The hosted path of ``memory``'s lineage (first id ``root``): its ``memoryFile`` when the
    Claude memory tool wrote it, the path a hosted agent gave it when it came from the store,
    else ``/<category>/<root>.md``."""
    file = memory.extra.get(FILE_FIELD)
    if isinstance(file, str):
        return file
    hosted = memory.extra.get(HOSTED_FIELD)
    if isinstance(hosted, dict) and isinstance(hosted.get("path"), str):
        return str(hosted["path"])
    return f"/{memory.category}/{root}.md"


@dataclass
class _Link:
    root: str
    hosted: str
    sha: str
    local: str | None
    refused: str | None = None  # the hosted sha whose text the save path refused (not fetched again)

    def row(self) -> LocalRow:
        return LocalRow(self.root, "link", json.dumps({"hosted": self.hosted, "sha": self.sha, "local": self.local,
                                                       "refused": self.refused}, sort_keys=True))


@dataclass
class BridgeReport:
    """What one sync of one profile did (or, with ``dry_run``, would do).

    ``result``: ``ok``; ``conflict`` (a lineage changed on both sides: both texts kept, see
    ``conflicts``); ``guarded`` (the mass-delete guard held deletions back, ``held`` says why);
    ``failed`` (the API did not answer within the deadline, ``error``; what was done is kept).
    """

    profile: str
    store: str | None = None
    dry_run: bool = False
    result: str = "ok"
    store_created: bool = False
    created: int = 0
    updated: int = 0
    deleted_hosted: int = 0
    taken_back: int = 0
    superseded: int = 0
    deleted_local: int = 0
    unchanged: int = 0
    adopted: int = 0
    duplicates: int = 0
    conflicts: list[dict[str, str]] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    redacted: list[str] = field(default_factory=list)
    held: str | None = None
    error: str | None = None
    requests: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (``--json``)."""
        return {"profile": self.profile, "store": self.store, "dryRun": self.dry_run, "result": self.result,
                "storeCreated": self.store_created, "created": self.created, "updated": self.updated,
                "deletedHosted": self.deleted_hosted, "takenBack": self.taken_back, "superseded": self.superseded,
                "deletedLocal": self.deleted_local, "unchanged": self.unchanged, "adopted": self.adopted,
                "duplicates": self.duplicates, "conflicts": self.conflicts, "refused": self.refused,
                "leftOut": self.left_out, "redacted": self.redacted, "held": self.held, "error": self.error,
                "requests": self.requests, "seconds": round(self.seconds, 3)}

    def summary(self) -> str:
        """One line: what was done, then what needs a look."""
        would = "would " if self.dry_run else ""
        parts = [f"{plural(n, noun, nouns)} {verb}" for n, noun, nouns, verb in (
            (self.created, "memory", "memories", "mirrored"), (self.updated, "memory", "memories", "updated in the store"),
            (self.deleted_hosted, "memory", "memories", "deleted from the store"),
            (self.taken_back, "new memory", "new memories", "taken back"),
            (self.superseded, "hosted edit", "hosted edits", "taken back"),
            (self.deleted_local, "hosted deletion", "hosted deletions", "applied here"),
            (self.adopted, "memory", "memories", "found again in the store"),
            (self.duplicates, "repeat", "repeats", "not saved twice")) if n]
        line = f"{self.profile} -> {self.store or 'a new store'}: {would}" + (", ".join(parts) or "nothing to do")
        if self.unchanged:
            line += f" ({self.unchanged} unchanged)"
        for c in self.conflicts:
            line += f"; conflict: {c['local']} and {c['hosted']} both changed, both kept ({c['kept']})"
        if self.refused:
            line += f"; refused {len(self.refused)}: " + "; ".join(f"{r['what']}: {r['reason']}" for r in self.refused[:3])
        if self.left_out:
            line += f"; left out {len(self.left_out)} (the store holds at most {STORE_CAP} memories)"
        if self.redacted:
            line += f"; redacted {len(self.redacted)} in the store"
        if self.held:
            line += f"; held: {self.held}"
        if self.error:
            line += f"; stopped: {self.error}"
        return line


_T = TypeVar("_T")


class _Api:
    """The SDK's memory stores calls with one deadline: the SDK's own retries are off
    (``max_retries=0``: a 409 or a conditional write is never sent again behind our back); 429, 5xx
    and connection errors are retried here with back-off (``retry-after`` honoured) while the
    deadline allows; every attempt's timeout is capped by what is left of it."""

    def __init__(self, client: anthropic.Anthropic, *, deadline_s: float, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client.with_options(max_retries=0)
        self.stores = self.client.beta.memory_stores
        self.deadline_s = deadline_s
        self.timeout_s = timeout_s
        self.clock, self.sleep = clock, sleep
        self.started = clock()
        self.requests = 0
        self._count = threading.Lock()  # creates run on several threads

    def left(self) -> float:
        return self.started + self.deadline_s - self.clock()

    def call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        attempt = 0
        while True:
            left = self.left()
            if left <= 0:
                raise SyncError(f"the memory stores API did not answer {what} within bridge.claude_deadline_s = "
                                f"{self.deadline_s:g} s")
            with self._count:
                self.requests += 1
            try:
                return fn(*args, timeout=min(self.timeout_s, left), **kwargs)
            except anthropic.APIStatusError as exc:
                if exc.status_code != 429 and exc.status_code < 500:
                    raise
                reason, wait = f"HTTP {exc.status_code}", _retry_after(exc.response.headers)
            except anthropic.APIConnectionError as exc:  # APITimeoutError too: a hung request
                reason, wait = type(exc).__name__, None
            backoff = wait if wait is not None else min(8.0, 0.2 * 2 ** attempt) * (0.5 + random.random() / 2)
            if backoff >= self.left():
                raise SyncError(f"the memory stores API did not answer {what} within bridge.claude_deadline_s = "
                                f"{self.deadline_s:g} s (last: {reason})")
            log.info("memory stores API: %s on %s, retrying in %.2fs", reason, what, backoff)
            self.sleep(backoff)
            attempt += 1


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait (:func:`memlocal.services.llm.retry_after_s`); an HTTP date is left to
    the back-off."""
    wait = retry_after_s(headers)
    return None if wait is None or math.isinf(wait) else max(0.0, wait)


def _error_kind(exc: anthropic.APIStatusError) -> tuple[str, str | None]:
    """The API error's ``type`` and ``conflicting_memory_id`` (a path conflict), from its body."""
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error") if isinstance(body.get("error"), dict) else body
    assert isinstance(err, dict)
    other = err.get("conflicting_memory_id")
    return str(err.get("type", "")), other if isinstance(other, str) else None


def _priority(m: Memory) -> tuple[int, float, float]:
    rank = PRIORITY.index(m.category) if m.category in PRIORITY else len(PRIORITY)
    return rank, m.staleness_score, -m.created_at.timestamp()


class _Sync:
    """One sync of one profile (:func:`sync_profile`)."""

    def __init__(self, bank: "MemoryBank", profile: str, api: _Api, report: BridgeReport, *, force: bool,
                 cap: int) -> None:
        self.bank, self.profile, self.api, self.report = bank, profile, api, report
        self.force, self.cap = force, cap
        self.table = bank.local_table(SCHEMA, TABLE, redacted=False)
        self.confidence = bank.config.bridge.claude_confidence
        self.dry = report.dry_run
        self.store_id: str | None = None
        self.links: dict[str, _Link] = {}
        self.seen: dict[str, str] = {}
        self._dirty: dict[str, LocalRow | None] = {}
        self._touched: set[str] = set()  # lineages this sync changed (not counted as unchanged)
        self._snapshot: tuple[dict[str, Memory | None], list[tuple[str, Memory]]] | None = None
        self._links_at: int = -1  # the links' version the snapshot was read at
        self._version = 0  # bumped by every change to the links or the profile

    # --- state ---------------------------------------------------------------------------------

    def _load(self) -> None:
        for row in self.table.rows(self.profile):
            if row.kind == "store":
                self.store_id = row.text
            elif row.kind == "seen":
                self.seen[row.path] = row.text
            else:
                data = json.loads(row.text)
                self.links[row.path] = _Link(row.path, data["hosted"], data["sha"], data.get("local"), data.get("refused"))

    def _put(self, link: _Link) -> None:
        self._version += 1
        self._touched.add(link.root)
        self.links[link.root] = link
        self._mark(link.root, link.row())

    def _drop(self, root: str) -> None:
        self._version += 1
        self.links.pop(root, None)
        self._mark(root, None)

    def _see(self, hosted: str, sha: str | None) -> None:
        if sha is None:
            self.seen.pop(hosted, None)
        else:
            self.seen[hosted] = sha
        self._mark(hosted, LocalRow(hosted, "seen", sha) if sha is not None else None)

    def _mark(self, key: str, row: LocalRow | None) -> None:
        if self.dry:
            return
        self._dirty[key] = row
        if len(self._dirty) >= _FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the links changed so far (one transaction each way)."""
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        self.table.put(self.profile, [r for r in dirty.values() if r is not None])
        for key, row in dirty.items():
            if row is None:
                self.table.delete(self.profile, key)

    # --- the store -----------------------------------------------------------------------------

    def _find_store(self) -> str | None:
        page: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE_LIMIT}
            if page:
                kwargs["page"] = page
            listed = self.api.call("the store listing", self.api.stores.list, **kwargs)
            for store in listed.data:
                if isinstance(store, BetaManagedAgentsMemoryStore) and store.metadata.get(PROFILE_KEY) == self.profile \
                        and store.archived_at is None:
                    return store.id
            page = listed.next_page
            if not page:
                return None

    def _list(self, *, full: bool = False, only: set[str] | None = None) -> dict[str, BetaManagedAgentsMemory] | None:
        """The store's memories by id (``None``: the store is gone); with ``only``, those of these
        ids, the listing stopped once it has them all."""
        assert self.store_id is not None
        out: dict[str, BetaManagedAgentsMemory] = {}
        page: str | None = None
        while True:
            kwargs: dict[str, Any] = {"memory_store_id": self.store_id, "limit": FULL_PAGE_LIMIT if full else PAGE_LIMIT,
                                      "view": "full" if full else "basic"}
            if page:
                kwargs["page"] = page
            try:
                listed = self.api.call("the memory listing", self.api.stores.memories.list, **kwargs)
            except anthropic.NotFoundError:
                return None
            for item in listed.data:
                if isinstance(item, BetaManagedAgentsMemory) and (only is None or item.id in only):
                    out[item.id] = item
            page = listed.next_page
            if not page or (only is not None and len(out) == len(only)):
                return out

    def _contents(self, wanted: list[BetaManagedAgentsMemory], size: int) -> dict[str, BetaManagedAgentsMemory]:
        """The full memories (with content) of ``wanted``, in a store of ``size`` memories: one
        retrieve each, or one listing with ``view=full`` when many are wanted and the store's
        pages are fewer than the retrieves (a store of 2,000 is 100 pages of every content: 40
        changed memories are read by 40 retrieves, not by reading the whole store)."""
        if not wanted:
            return {}
        assert self.store_id is not None
        if len(wanted) >= _FULL_LISTING_FROM and -(-size // FULL_PAGE_LIMIT) < len(wanted):
            listed = self._list(full=True, only={m.id for m in wanted}) or {}
            return {m.id: listed[m.id] for m in wanted if m.id in listed}
        out = {}
        for m in wanted:
            try:
                out[m.id] = self.api.call("a memory", self.api.stores.memories.retrieve, m.id,
                                          memory_store_id=self.store_id, view="full")
            except anthropic.NotFoundError:
                continue  # deleted since the listing: the next sync sees it gone
        return out

    # --- the sync ------------------------------------------------------------------------------

    def run(self) -> None:
        self._load()
        hosted: dict[str, BetaManagedAgentsMemory] | None = None
        if self.store_id is not None:
            hosted = self._list()
            if hosted is None:  # the store was deleted or archived away: find or make another
                self.store_id = None
        if self.store_id is None:
            found = self._find_store()
            if found is not None:
                self.store_id = found
                hosted = self._list() or {}
            else:
                hosted = {}
                self.report.store_created = True
                if not self.dry:
                    store = self.api.call("the store creation", self.api.stores.create,
                                          name=f"memlocal {self.profile}"[:255],
                                          description=(f"Memories of the memlocal profile {self.profile}, mirrored "
                                                       "by memlocal. One file per memory; write new files for new "
                                                       "memories, edit or delete a file to change or retire one.")[:1024],
                                          metadata={PROFILE_KEY: self.profile})
                    self.store_id = store.id
            # Another store: the links name the old one's memories (a dry run forgets them too,
            # or it would report each as deleted in the store).
            self.links.clear()
            self.seen.clear()
            if self.store_id is not None and not self.dry:
                self.table.delete(self.profile, "", below=True)
                self.table.put(self.profile, [LocalRow("", "store", self.store_id)])
        self.report.store = self.store_id
        assert hosted is not None
        self._hosted_to_local(hosted)
        self._local_to_hosted(hosted)

    def _lineages(self) -> tuple[dict[str, Memory | None], list[tuple[str, Memory]]]:
        """Each linked lineage's active memory (``None``: deleted here), and the active memories
        of no linked lineage (new lineages, each with its root: the first id of its chain), from
        one read of the profile (read again only after a change to the links or the profile)."""
        if self._snapshot is None or self._links_at != self._version:
            self._snapshot, self._links_at = self._read_lineages(), self._version
        return self._snapshot

    def _read_lineages(self) -> tuple[dict[str, Memory | None], list[tuple[str, Memory]]]:
        active = self.bank.memories(self.profile)
        by_local = {link.local: root for root, link in self.links.items() if link.local}
        current: dict[str, Memory | None] = {root: None for root in self.links}
        new: list[tuple[str, Memory]] = []
        for m in sorted(active, key=lambda m: (m.created_at, m.id)):
            root = by_local.get(m.id)
            first = m.id
            if root is None and m.supersedes is not None:
                root = by_local.get(m.supersedes)
                if root is None:  # several versions since the last sync, or never synced: the chain
                    try:
                        chain = self.bank.history(self.profile, m.id)
                    except NotFoundError:
                        chain = []
                    root = next((by_local[v.id] for v in reversed(chain) if v.id in by_local), None)
                    first = chain[0].id if chain else m.id
            if root is None:
                new.append((first, m))
            else:
                current[root] = m
        return current, new

    def _take_back(self, h: BetaManagedAgentsMemory, *, supersedes: str | None = None,
                   category: str | None = None, file: str | None = None) -> tuple[Memory | None, str, bool]:
        """Save what a hosted agent wrote, through the bank's save path (``file``: the memory
        tool's path, ``memoryFile``, of the version it supersedes). Returns the memory (or
        ``None``: refused, reported), the hosted sha now (after a rewrite) and whether the save
        repeated an existing memory."""
        text = h.content or ""
        what = f"{h.path} ({h.id})"
        if not text.strip():
            self.report.refused.append({"what": what, "reason": "blank: a memory needs text"})
            return None, h.content_sha256, False
        self._version += 1  # the profile may change (a save, a retired memory)
        extra: dict[str, Any] = {HOSTED_FIELD: {"path": h.path}}
        if file is not None:
            extra[FILE_FIELD] = file
        try:
            result = self.bank.save(SaveRequest(
                self.profile, content=text, category=category or category_for_path(h.path), confidence=self.confidence,
                source="inferred", use_llm=False, supersedes=supersedes, extra=extra))
        except MemoryBankError as exc:
            self.report.refused.append({"what": what, "reason": exc.message})
            return None, h.content_sha256, False
        sha = h.content_sha256
        path = redact(h.path).text
        # The store's copy is rewritten whenever its text or path held a credential, a repeat's
        # too: the save answered with the memory it repeats, so the agent's own text is kept,
        # redacted as the save redacted it (secrets.mode = redact: memlocal.services.redact.redact).
        clean = redact(text).text if result.deduplicated else result.memory.processed_content
        if clean != text or path != h.path:
            sha = self._rewrite(h, clean, path)
        return result.memory, sha, result.deduplicated

    def _rewrite(self, h: BetaManagedAgentsMemory, text: str, path: str) -> str:
        """Rewrite a hosted memory whose text held a credential with the redacted text, and
        redact the version that held it. Returns the new sha (the old one when the agent changed
        the memory meanwhile: the next sync takes that change)."""
        assert self.store_id is not None
        try:
            done = self.api.call("a redacting rewrite", self.api.stores.memories.update, h.id,
                                 memory_store_id=self.store_id, content=text, path=path if path != h.path else anthropic.omit,
                                 precondition={"type": "content_sha256", "content_sha256": h.content_sha256})
        except anthropic.APIStatusError as exc:
            if exc.status_code in (404, 409):
                return h.content_sha256
            raise
        self._redact_versions(h.id, done.memory_version_id)
        self.report.redacted.append(h.id)
        return done.content_sha256

    def _redact_versions(self, memory_id: str, keep: str) -> None:
        """Redact every version of the memory whose text or path holds a credential (the API's
        ``memory_versions.redact``), but ``keep`` (the clean rewrite)."""
        assert self.store_id is not None
        page: str | None = None
        while True:
            kwargs: dict[str, Any] = {"memory_store_id": self.store_id, "memory_id": memory_id, "view": "full",
                                      "limit": FULL_PAGE_LIMIT}
            if page:
                kwargs["page"] = page
            listed = self.api.call("the version listing", self.api.stores.memory_versions.list, **kwargs)
            for v in listed.data:
                if v.id == keep or v.redacted_at is not None or not redact(f"{v.path or ''}\n{v.content or ''}").kinds:
                    continue
                try:
                    self.api.call("a version redaction", self.api.stores.memory_versions.redact, v.id,
                                  memory_store_id=self.store_id)
                except anthropic.APIStatusError as exc:  # reported, never fatal: the memory itself is clean
                    self.report.refused.append({"what": f"version {v.id}", "reason": f"not redacted: {_describe(exc)}"})
            page = listed.next_page
            if not page:
                return

    def _hosted_to_local(self, hosted: dict[str, BetaManagedAgentsMemory]) -> None:
        """What the agent wrote, edited and deleted, taken back; conflicts found."""
        current, new = self._lineages()
        linked = {link.hosted: root for root, link in self.links.items()}
        planned = {hosted_path(m, root): (root, m) for root, m in new}
        edits: list[tuple[str, BetaManagedAgentsMemory]] = []
        fresh: list[BetaManagedAgentsMemory] = []
        deletions: list[tuple[str, Memory]] = []
        for root, link in list(self.links.items()):
            h = hosted.get(link.hosted)
            m = current[root]
            if h is None:
                if m is None:
                    self._drop(root)  # gone on both sides
                elif sha256(m.processed_content) == link.sha:
                    deletions.append((root, m))
                continue
            if h.content_sha256 == link.sha or h.content_sha256 == link.refused:
                continue
            if m is not None and sha256(m.processed_content) == h.content_sha256:
                link.sha, link.local = h.content_sha256, m.id  # the same change on both sides
                self._put(link)
                continue
            edits.append((root, h))
        for hid, h in sorted(hosted.items(), key=lambda kv: kv[1].path):
            if hid in linked:
                continue
            if self.seen.get(hid) == h.content_sha256:
                continue
            mine = planned.get(h.path)
            if mine is not None and sha256(mine[1].processed_content) == h.content_sha256:
                # Our own create whose answer was lost (an interrupted sync): the link, not a copy.
                self.report.adopted += 1
                self._put(_Link(mine[0], hid, h.content_sha256, mine[1].id))
                continue
            fresh.append(h)
        for hid in [hid for hid in self.seen if hid not in hosted]:
            self._see(hid, None)
        full = self._contents([h for _, h in edits] + fresh, len(hosted)) if not self.dry else {}
        for root, h in edits:
            link = self.links[root]
            m = current[root]
            local_changed = m is None or sha256(m.processed_content) != link.sha
            if self.dry:
                self._touched.add(root)
                if local_changed:
                    self.report.conflicts.append({"local": m.id if m else root, "hosted": h.id, "kept": "(a new memory)"})
                else:
                    self.report.superseded += 1
                continue
            hf = full.get(h.id)
            if hf is None:
                continue
            if not local_changed and m is not None:  # an edit over the mirrored text: a supersession
                saved, sha, _dup = self._take_back(hf, supersedes=m.id, category=m.category, file=_followed(m, hf.path))
                if saved is None:
                    link.refused = hf.content_sha256
                    self._put(link)
                    continue
                self.report.superseded += 1
                self._put(_Link(root, h.id, sha, saved.id))
                continue
            # Changed on both sides (or edited there, deleted here): the agent's text comes back as
            # a memory of its own; the local lineage keeps its text (pushed below to its hosted
            # memory, or to a new one when it was deleted here, with the agent's text at its path).
            saved, sha, dup = self._take_back(hf, category=m.category if m is not None else None)
            kept = saved.id if saved is not None else "(refused)"
            self.report.conflicts.append({"local": m.id if m is not None else root, "hosted": h.id, "kept": kept})
            if m is None:
                self._drop(root)
                if saved is not None and not dup:
                    self._put(_Link(saved.id, h.id, sha, saved.id))
                elif saved is not None:
                    self._see(h.id, sha)
            elif saved is None:
                # The agent's text could not be kept here (refused by the save's rules): the hosted
                # memory is left as the agent wrote it, as for a refused edit, so no text is lost.
                link.refused = hf.content_sha256
                self._put(link)
            else:
                # The hosted memory goes back to the local text below (its precondition: what the
                # agent wrote, whose hash now differs from the local text's, so it is pushed); the
                # agent's text is a new lineage, mirrored to a path of its own.
                link.sha, link.refused, link.local = sha, None, m.id
                self._put(link)
                self.report.taken_back += 1
        for h in fresh:
            if self.dry:
                self.report.taken_back += 1
                continue
            hf = full.get(h.id)
            if hf is None:
                continue
            saved, sha, dup = self._take_back(hf)
            if saved is None:
                self._see(h.id, h.content_sha256)  # refused: reported once, not fetched again
            elif dup:
                self.report.duplicates += 1
                self._see(h.id, sha)
            else:
                self.report.taken_back += 1
                self._put(_Link(saved.id, h.id, sha, saved.id))
        self._delete_here(deletions)

    def _guard(self, n: int, direction: str) -> bool:
        """The mass-delete guard (the sync's rule, its settings): more than ``sync.mass_delete_min``
        deletions and more than ``sync.max_delete_share`` of the lineages mirrored are held back
        unless forced. True: go ahead."""
        minimum, share = self.bank.config.sync.mass_delete_min, self.bank.config.sync.max_delete_share
        synced = len(self.links)
        if n == 0 or self.force or n <= minimum or n <= share * synced:
            return True
        reason = (f"would delete {n} of the {synced} mirrored memories {direction} (more than "
                  f"sync.max_delete_share = {share:g} and sync.mass_delete_min = {minimum}); --force applies them")
        self.report.held = reason if self.report.held is None else f"{self.report.held}; {reason}"
        return False

    def _delete_here(self, deletions: list[tuple[str, Memory]]) -> None:
        if not self._guard(len(deletions), "here (deleted in the store)"):
            return
        for root, m in deletions:
            self.report.deleted_local += 1
            if self.dry:
                continue
            self._version += 1
            try:
                self.bank.delete(self.profile, m.id)
            except NotFoundError:
                pass
            self._drop(root)

    def _local_to_hosted(self, hosted: dict[str, BetaManagedAgentsMemory]) -> None:
        """Local saves, supersessions and deletions, pushed with preconditions; the cap."""
        current, new = self._lineages()
        pushes: list[tuple[_Link, Memory]] = []
        removals: list[_Link] = []
        for root, link in self.links.items():
            m = current[root]
            if m is None:
                if link.hosted in hosted:
                    removals.append(link)
                continue
            if link.refused is not None and hosted.get(link.hosted) is not None \
                    and hosted[link.hosted].content_sha256 == link.refused:
                self.report.refused.append({"what": f"{hosted[link.hosted].path} ({link.hosted})",
                                            "reason": "the agent's text was refused here (above); left as it is"})
                continue
            changed = m.id != link.local or sha256(m.processed_content) != link.sha
            if changed:
                pushes.append((link, m))
            elif root not in self._touched:
                self.report.unchanged += 1
        paths = {h.path: hid for hid, h in hosted.items()}
        for link, m in pushes:
            self._push(link, m, hosted, paths)
        if self._guard(len(removals), "from the store (deleted here)"):
            for link in removals:
                self._remove(link)
        taken = {h.path for h in hosted.values()}
        room = self.cap - len(hosted) + self.report.deleted_hosted
        plan: list[tuple[str, Memory, str]] = []
        for root, m in sorted(new, key=lambda rm: _priority(rm[1])):
            path = hosted_path(m, root)
            problem = store_path_problem(path)
            if problem is not None:
                self.report.refused.append({"what": f"{m.id} ({path[:80]!r})", "reason": f"the path {problem}"})
                continue
            if room <= 0:
                self.report.left_out.append(m.id)
                continue
            if path in taken:  # a hosted agent's file at the memory tool's path: the default path
                path = f"/{m.category}/{root}.md"
            if path in taken:
                self.report.refused.append({"what": f"{m.id} ({path[:80]!r})", "reason": "the path is taken in the store"})
                continue
            plan.append((root, m, path))
            room -= 1
            taken.add(path)
        self._create_many(plan)

    def _create(self, root: str, m: Memory, path: str) -> bool:
        """Create the lineage's hosted memory at ``path``; True when it is (or was) there."""
        self.report.created += 1
        if self.dry:
            return True
        return self._created(root, m, path, self._send_create(m, path))

    def _create_many(self, plan: list[tuple[str, Memory, str]]) -> None:
        """:meth:`_create` for each of ``plan``, ``CREATE_WORKERS`` requests in flight (a first
        sync is one create per lineage); the outcomes are applied here, in order, and a deadline
        that passes stops the sync only once every create that landed is linked."""
        if self.dry or len(plan) <= 1:
            for root, m, path in plan:
                self._create(root, m, path)
            return
        failure: SyncError | None = None
        with ThreadPoolExecutor(max_workers=CREATE_WORKERS, thread_name_prefix="memlocal-bridge") as pool:
            outcomes = pool.map(lambda item: self._send_create(item[1], item[2]), plan)
            for (root, m, path), outcome in zip(plan, outcomes):
                if isinstance(outcome, SyncError):
                    failure = failure or outcome
                    continue
                self.report.created += 1
                self._created(root, m, path, outcome)
        if failure is not None:
            raise failure

    def _send_create(self, m: Memory, path: str) -> BetaManagedAgentsMemory | anthropic.APIStatusError | SyncError:
        assert self.store_id is not None
        try:
            return self.api.call("a create", self.api.stores.memories.create, self.store_id, path=path,
                                 content=m.processed_content)
        except (anthropic.APIStatusError, SyncError) as exc:
            return exc

    def _created(self, root: str, m: Memory, path: str,
                 outcome: BetaManagedAgentsMemory | anthropic.APIStatusError | SyncError) -> bool:
        if isinstance(outcome, SyncError):
            self.report.created -= 1
            raise outcome
        if isinstance(outcome, BetaManagedAgentsMemory):
            self._put(_Link(root, outcome.id, outcome.content_sha256, m.id))
            return True
        assert self.store_id is not None
        kind, other = _error_kind(outcome)
        self.report.created -= 1
        if kind == "memory_path_conflict_error" and other is not None:
            try:
                there = self.api.call("a memory", self.api.stores.memories.retrieve, other,
                                      memory_store_id=self.store_id, view="basic")
            except anthropic.NotFoundError:
                there = None
            if there is not None and there.content_sha256 == sha256(m.processed_content):  # ours, its answer lost
                self.report.adopted += 1
                self._put(_Link(root, other, there.content_sha256, m.id))
                return True
        self.report.refused.append({"what": f"{m.id} ({path[:80]!r})", "reason": _describe(outcome)})
        return False

    def _push(self, link: _Link, m: Memory, hosted: dict[str, BetaManagedAgentsMemory],
              paths: dict[str, str]) -> None:
        """The lineage's new text (and path) to its hosted memory, if the store's copy is still the
        one last synced; else (re)created. ``paths``: the hosted ids by path (the listing's, kept
        up to date with the moves this sync makes)."""
        h = hosted.get(link.hosted)
        # The lineage keeps its hosted path; only the memory tool's rename (memoryFile) moves it.
        file = m.extra.get(FILE_FIELD)
        path = file if isinstance(file, str) else h.path if h is not None else hosted_path(m, link.root)
        if store_path_problem(path) is not None:
            path = h.path if h is not None else f"/{m.category}/{link.root}.md"
        other = paths.get(path)
        if h is not None and other is not None and other != h.id:
            # A rename onto a path another hosted memory holds: the store would answer 409 on
            # every sync. The text goes to the lineage's path; the move is reported once (the
            # link then names this version: nothing is sent again until the lineage changes).
            self.report.refused.append({"what": f"{m.id} ({path[:80]!r})",
                                        "reason": f"the path is taken in the store (by {other}); the memory "
                                                  f"stays at {h.path[:80]!r}"})
            path = h.path
            if h.content_sha256 == sha256(m.processed_content) == link.sha:  # nothing else to send
                if not self.dry:
                    self._put(_Link(link.root, h.id, link.sha, m.id))
                return
        if h is None:
            # Deleted in the store while edited here: the edit is kept, at the lineage's path.
            self.report.conflicts.append({"local": m.id, "hosted": link.hosted, "kept": m.id})
            self._drop(link.root)
            self._create(link.root, m, path)
            return
        self.report.updated += 1
        if self.dry:
            return
        assert self.store_id is not None
        text = m.processed_content
        try:
            done = self.api.call("an update", self.api.stores.memories.update, h.id, memory_store_id=self.store_id,
                                 content=text, path=path if path != h.path else anthropic.omit,
                                 precondition={"type": "content_sha256", "content_sha256": link.sha})
        except anthropic.APIStatusError as exc:
            kind, _other = _error_kind(exc)
            self.report.updated -= 1
            if exc.status_code == 409 and kind == "memory_precondition_failed_error":
                # Changed in the store since the listing: the next sync takes it as a conflict.
                return
            self.report.refused.append({"what": f"{m.id} ({path[:80]!r})", "reason": _describe(exc)})
            return
        if path != h.path:  # moved: its old path is free for a later move of this sync
            paths.pop(h.path, None)
            paths[path] = h.id
        self._put(_Link(link.root, h.id, done.content_sha256, m.id))

    def _remove(self, link: _Link) -> None:
        self.report.deleted_hosted += 1
        if self.dry:
            return
        assert self.store_id is not None
        try:
            self.api.call("a delete", self.api.stores.memories.delete, link.hosted, memory_store_id=self.store_id,
                          expected_content_sha256=link.sha)
        except anthropic.NotFoundError:
            pass
        except anthropic.APIStatusError as exc:
            self.report.deleted_hosted -= 1
            if exc.status_code == 409:  # edited in the store since the listing: the next sync takes it back
                return
            raise
        self._drop(link.root)


def _followed(m: Memory, hosted: str) -> str | None:
    """The ``memoryFile`` of a hosted edit's version of ``m``: ``m``'s, moved to the path the
    agent gave it in the store (``hosted``) when that is a path the memory tool takes (under
    ``/memories``, redacted as the save redacts it); ``None`` when ``m`` was no file."""
    file = m.extra.get(FILE_FIELD)
    if not isinstance(file, str):
        return None
    moved = redact(hosted).text
    return moved if moved != file and moved.startswith(ROOT + "/") and path_problem(moved) is None else file


def _describe(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = err.get("message") if isinstance(err, dict) else None
    return f"the store answered {exc.status_code}" + (f": {message}" if isinstance(message, str) else "")


def sync_profile(bank: "MemoryBank", profile: str, *, dry_run: bool = False, force: bool = False,
                 client: anthropic.Anthropic | None = None, deadline_s: float | None = None,
                 timeout_s: float | None = None, cap: int = STORE_CAP) -> BridgeReport:
    """Mirror ``profile`` of ``bank`` into its Claude memory store and take back what a hosted
    agent wrote there (see the module's docstring). ``client``: an ``anthropic.Anthropic`` (by
    default one from the environment: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``); its
    retries are turned off for the bridge's calls. ``dry_run``: read only, the report says what
    would be done. ``force``: apply deletions the mass-delete guard holds back.

    ``ValidationError`` for a bad profile name or no API key; a sync that runs out of time stops
    with ``result`` ``failed`` and its ``error`` (what it did is kept and resumed next time)."""
    validate_profile(profile)
    config = bank.config.bridge
    deadline = deadline_s if deadline_s is not None else config.claude_deadline_s
    timeout = timeout_s if timeout_s is not None else config.claude_timeout_s
    if client is None:
        import os

        if not os.environ.get("ANTHROPIC_API_KEY") and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            raise ValidationError("the bridge needs ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) for the memory stores API")
        client = anthropic.Anthropic(max_retries=0, timeout=timeout)
    report = BridgeReport(profile, dry_run=dry_run)
    api = _Api(client, deadline_s=deadline, timeout_s=timeout)
    sync = _Sync(bank, profile, api, report, force=force, cap=cap)
    try:
        sync.run()
    except SyncError as exc:
        report.result, report.error = "failed", exc.message
    except anthropic.APIStatusError as exc:
        report.result, report.error = "failed", _describe(exc)
    finally:
        sync.flush()
        report.requests = api.requests
        report.seconds = api.clock() - api.started
    if report.result == "ok":
        report.result = "guarded" if report.held else "conflict" if report.conflicts else "ok"
    return report


def sync_profiles(bank: "MemoryBank", profiles: str | None = None) -> dict[str, int]:
    """The sync daemon's bridge job: :func:`sync_profile` for each profile that
    ``bridge.claude_profiles`` (or ``profiles``, comma-separated) names, each failure logged and
    the others still synced. Returns ``{profile: changes made}``."""
    names = [p.strip() for p in (profiles if profiles is not None else bank.config.bridge.claude_profiles).split(",")
             if p.strip()]
    out = {}
    for name in names:
        try:
            report = sync_profile(bank, name)
        except MemoryBankError as exc:
            log.warning("bridge sync of %s: %s", name, exc)
            continue
        log.info("bridge: %s", report.summary())
        out[name] = (report.created + report.updated + report.deleted_hosted + report.taken_back + report.superseded
                     + report.deleted_local)
    return out
