"""A LangGraph store (``langgraph.store.base.BaseStore``) over a ``MemoryBank``: ``memlocal[langgraph]``.

``MemlocalStore(bank)`` is what a LangGraph graph or LangMem takes as its ``store``:

- **a namespace is a profile**: ``("users", "123")`` is the profile ``users.123`` (LangGraph's
  labels hold no ``.``); a namespace whose labels hold other characters than
  ``[A-Za-z0-9_-]``, or whose name would pass 64 characters, gets ``<readable part>-<12 hex of
  its hash>`` (:func:`profile_for`). The exact namespace is kept in every item, so the mapping
  needs no table and two namespaces never mix;
- **an item is a memory**: its text (what recall ranks) is the value's strings (or the
  ``fields`` it is indexed on), cut to 4096 bytes; the key, the namespace and the whole value are
  the memory's extra field ``langgraph``. A ``put`` over an existing key saves a new version that
  supersedes the old one (a ``put`` of the value it holds changes nothing); a ``delete`` removes the item's memory with its earlier versions.
  Items are redacted (credentials in the value's strings) and synced like any save, never
  deduplicated (two keys may hold the same value);
- **search with a query ranks with memlocal's formula**: the items the query gives evidence for
  come first, best first, each a :class:`MemlocalSearchItem` whose ``score`` is the composite
  score and whose ``breakdown`` and ``evidence`` say why; the others follow with ``score`` None
  (as ``InMemoryStore`` returns items it has no vectors for). Without a query, newest first;
- memories saved through the other faces are items too: key = the memory's id, value
  ``{"content", "category", "summary"}``, in the namespace of their profile's name.

``put``, ``get``, ``delete``, ``search`` (filters, limit, offset) and ``list_namespaces`` behave as
``InMemoryStore``'s: in a batch, reads see the state before the batch's writes, and the last write
to a key wins. See docs/integrations.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    Item,
    get_text_at_path,
    tokenize_path,
)

from ..model import CATEGORIES, PAGE_MAX_LIMIT, RAW_INPUT_MAX_BYTES, Memory, RecallQuery
from ..services.redact import redact, redact_json, refuse_credential_name
from ..bank.saving import SaveRequest

if TYPE_CHECKING:
    from ..bank.facade import MemoryBank

__all__ = ["ITEM_FIELD", "MemlocalSearchItem", "MemlocalStore", "namespace_of", "profile_for"]

# The extra field of a memory that is a store item: {"namespace": [...], "key": ..., "value": {...}}
# and "index": false for an item put with index=False.
ITEM_FIELD = "langgraph"

_CLEAN_LABEL = re.compile(r"[A-Za-z0-9_-]+")
_NOT_PROFILE = re.compile(r"[^A-Za-z0-9._-]")
_PROFILE_MAX_LEN = 64  # the profile name rule (docs/storage.md)
_READABLE = 50  # characters of a hashed profile name kept readable (50 + "-" + 12 hex <= 64)


def profile_for(namespace: Sequence[str]) -> str:
    """The profile that holds ``namespace``'s items: the labels joined with ``.`` when each is
    ``[A-Za-z0-9_-]+`` and the name fits 64 characters; otherwise the name with every other
    character as ``-``, cut to 50, then ``-`` and 12 hex digits of the namespace's SHA-256."""
    joined = ".".join(namespace)
    if len(joined) <= _PROFILE_MAX_LEN and all(_CLEAN_LABEL.fullmatch(label) for label in namespace):
        return joined
    digest = hashlib.sha256(json.dumps(list(namespace), ensure_ascii=False).encode("utf-8")).hexdigest()[:12]
    return f"{_readable(namespace)}-{digest}"


def _readable(namespace: Sequence[str]) -> str:
    return _NOT_PROFILE.sub("-", ".".join(namespace))[:_READABLE]


def namespace_of(profile: str) -> tuple[str, ...] | None:
    """The namespace of a memory saved outside the store: its profile's name split on ``.``
    (``None`` when that leaves an empty label)."""
    labels = tuple(profile.split("."))
    return labels if all(labels) else None


class MemlocalSearchItem(SearchItem):
    """A search result: ``score`` is memlocal's composite score (``None`` for an item the query
    gave no evidence for); ``breakdown`` its signals and weights, ``evidence`` the query's terms
    and clusters it matched (both ``None`` when unscored)."""

    __slots__ = ("breakdown", "evidence")

    def __init__(self, item: Item, score: float | None = None, breakdown: dict[str, Any] | None = None,
                 evidence: dict[str, Any] | None = None) -> None:
        super().__init__(namespace=item.namespace, key=item.key, value=item.value, created_at=item.created_at,
                         updated_at=item.updated_at, score=score)
        self.breakdown = breakdown
        self.evidence = evidence

    def dict(self) -> dict[str, Any]:
        out: dict[str, Any] = super().dict()
        out["breakdown"] = self.breakdown
        out["evidence"] = self.evidence
        return out


def _unchanged(memory: Memory, record: dict[str, Any], text: str, category: str) -> bool:
    """``memory`` (an item's current version) already holds ``record`` with ``text``: a ``put``
    of it would only add a version that supersedes an identical one. Compared as JSON holds
    them (a tuple in a value is stored as a list)."""
    stored = memory.extra.get(ITEM_FIELD)
    try:
        same = json.loads(json.dumps(record, ensure_ascii=False, sort_keys=True)) == stored
    except (TypeError, ValueError):  # a value JSON cannot hold as it is: save it as before
        return False
    return same and memory.processed_content == text and memory.category == category


class _Stored:
    """One item as the bank holds it."""

    __slots__ = ("item", "memory", "indexed")

    def __init__(self, item: Item, memory: Memory, indexed: bool) -> None:
        self.item, self.memory, self.indexed = item, memory, indexed


class MemlocalStore(BaseStore):
    """LangGraph's ``BaseStore`` over ``bank`` (see the module's docstring for the mapping).

    ``fields``: the value's paths whose text an item is ranked on (LangGraph's path syntax:
    ``"text"``, ``"content.body"``, ``"tags[*]"``), default every string of the value; a ``put``'s
    ``index`` list overrides it for that item, and ``index=False`` keeps the item out of the
    ranking. ``category``: the memories' category (default ``general``)."""

    __slots__ = ("bank", "fields", "category")

    def __init__(self, bank: "MemoryBank", *, fields: Sequence[str] | None = None, category: str = "general") -> None:
        if category not in CATEGORIES:
            raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
        self.bank = bank
        self.fields = list(fields) if fields is not None else None
        self.category = category

    # --- reading the bank ------------------------------------------------------------------------

    def _profiles(self, prefix: Sequence[str]) -> list[str]:
        """The profiles that may hold a namespace starting with ``prefix`` (a superset: items
        are then checked against their own namespace)."""
        names = sorted(p["name"] for p in self.bank.profiles())
        if not prefix:
            return names
        start = _readable(prefix)
        return [p for p in names if p.startswith(start)]

    def _load(self, profile: str, cache: dict[str, list[_Stored]]) -> list[_Stored]:
        if profile not in cache:
            stored = []
            for m in self.bank.memories(profile):  # redacted, as every face reads
                s = _from_memory(m)
                if s is not None:
                    stored.append(s)
            stored.sort(key=lambda s: (s.memory.created_at, s.memory.id), reverse=True)  # newest first
            cache[profile] = stored
        return cache[profile]

    def _find(self, namespace: tuple[str, ...], key: str, cache: dict[str, list[_Stored]]) -> _Stored | None:
        for s in self._load(profile_for(namespace), cache):
            if s.item.namespace == namespace and s.item.key == key:
                return s
        return None

    # --- the operations -----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; reads see the state before the batch's writes, which are then
        applied with the last write to each key winning (as ``InMemoryStore`` does)."""
        cache: dict[str, list[_Stored]] = {}
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                found = self._find(_shown_namespace(op.namespace), redact(op.key).text, cache)
                results.append(found.item if found is not None else None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op, cache))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op, cache))
            elif isinstance(op, PutOp):
                # Labels and keys are identifiers (a label is part of a profile name): one that
                # holds a credential is refused, never redacted into another's.
                op = PutOp(tuple(refuse_credential_name(label, "namespace label") for label in op.namespace),
                           refuse_credential_name(op.key, "item key"), op.value, op.index, op.ttl)
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        for op in puts.values():
            self._put(op, cache)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in the default executor (the bank's SQLite writes block)."""
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, ops)

    def _put(self, op: PutOp, cache: dict[str, list[_Stored]]) -> None:
        namespace = tuple(op.namespace)
        old = self._find(namespace, op.key, cache)
        if op.value is None:
            if old is not None:
                for version in reversed(self.bank.history(old.memory.profile_name, old.memory.id)):
                    if version.id == old.memory.id or not version.is_active:
                        self.bank.delete(old.memory.profile_name, version.id)
        else:
            value = self._redacted(dict(op.value))
            fields = self.fields if op.index is None else (op.index or [])
            record: dict[str, Any] = {"namespace": list(namespace), "key": op.key, "value": value}
            if op.index is False:
                record["index"] = False
            text = _cut(_text_of(value, fields) or json.dumps(value, ensure_ascii=False, sort_keys=True))
            if old is not None and _unchanged(old.memory, record, text, self.category):
                return  # the same value again: no new version, nothing to sync (a graph re-run puts it)
            self.bank.save(SaveRequest(profile_for(namespace), content=text, category=self.category, use_llm=False,
                           supersedes=old.memory.id if old is not None else None,
                           deduplicate=False, auto_supersede=False,  # two keys may hold related values
                           extra={ITEM_FIELD: record}))
        cache.pop(profile_for(namespace), None)

    def _redacted(self, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` with every credential in its strings redacted, object keys included, at any
        depth (``secrets.mode``: reject mode refuses it). Each string is checked as it is, never
        as JSON text (where a control character would be six harmless characters)."""
        out, kinds = redact_json(value)
        if kinds:
            self.bank.redact_fields({"value": value})  # raises in reject mode
        return dict(out)

    def _candidates(self, op: SearchOp, cache: dict[str, list[_Stored]]) -> list[_Stored]:
        prefix = _shown_namespace(op.namespace_prefix)
        found = []
        for profile in self._profiles(prefix):
            for s in self._load(profile, cache):
                if s.item.namespace[:len(prefix)] == prefix and (
                        not op.filter or all(_compare(s.item.value.get(k), v) for k, v in op.filter.items())):
                    found.append(s)
        found.sort(key=lambda s: (s.memory.created_at, s.memory.id), reverse=True)
        return found

    def _search(self, op: SearchOp, cache: dict[str, list[_Stored]]) -> list[SearchItem]:
        candidates = self._candidates(op, cache)
        if not op.query:
            return [MemlocalSearchItem(s.item) for s in candidates[op.offset:op.offset + op.limit]]
        by_id = {s.memory.id: s for s in candidates if s.indexed}
        scored = []
        for profile in sorted({s.memory.profile_name for s in by_id.values()}):
            # The whole profile is ranked (the filter's candidates may be anywhere in it), up to
            # the recall limit's maximum; candidates past it come unscored.
            size = min(len(self._load(profile, cache)), PAGE_MAX_LIMIT)
            for hit in self.bank.query_with_relevance(RecallQuery(profile, op.query, max(size, 1), 0.0)):
                if hit.memory.id in by_id:
                    scored.append(hit)
        scored.sort(key=lambda h: -h.score)  # stable: within a profile, the ranking's own order
        ranked_ids = {h.memory.id for h in scored}
        results = [MemlocalSearchItem(by_id[h.memory.id].item, h.score, h.breakdown.to_dict(),
                                      h.evidence.to_dict() if h.evidence is not None else None) for h in scored]
        results += [MemlocalSearchItem(s.item) for s in candidates if s.memory.id not in ranked_ids]
        return list(results[op.offset:op.offset + op.limit])

    def _list_namespaces(self, op: ListNamespacesOp, cache: dict[str, list[_Stored]]) -> list[tuple[str, ...]]:
        namespaces = {s.item.namespace for p in self._profiles(()) for s in self._load(p, cache)}
        if op.match_conditions:
            namespaces = {ns for ns in namespaces if all(_matches(c, ns) for c in op.match_conditions)}
        if op.max_depth is not None:
            namespaces = {ns[:op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset:op.offset + op.limit]


def _shown_namespace(namespace: Sequence[str]) -> tuple[str, ...]:
    """A namespace as the store keeps it: each label redacted (a put stored it so)."""
    return tuple(redact(label).text for label in namespace)


def _from_memory(m: Memory) -> _Stored | None:
    record = m.extra.get(ITEM_FIELD)
    created = m.created_at
    if isinstance(record, Mapping):
        namespace, key, value = record.get("namespace"), record.get("key"), record.get("value")
        if (isinstance(namespace, list) and namespace and all(isinstance(x, str) for x in namespace)
                and isinstance(key, str) and isinstance(value, dict)):
            item = Item(value=value, key=key, namespace=tuple(namespace), created_at=created, updated_at=created)
            return _Stored(item, m, record.get("index") is not False)
        return None  # written by something else: not an item
    namespace_ = namespace_of(m.profile_name)
    if namespace_ is None:
        return None
    value_ = {"content": m.processed_content, "category": m.category, "summary": m.summary}
    return _Stored(Item(value=value_, key=m.id, namespace=namespace_, created_at=created, updated_at=created), m, True)


def _text_of(value: dict[str, Any], fields: Sequence[str] | None) -> str:
    """The text an item is ranked on: the strings at ``fields`` (every string of the value by
    default), one per line."""
    if fields is None or list(fields) == ["$"]:
        out: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, str):
                if node.strip():
                    out.append(node)
            elif isinstance(node, dict):
                for v in node.values():
                    walk(v)
            elif isinstance(node, (list, tuple)):
                for v in node:
                    walk(v)

        walk(value)
        return "\n".join(out)
    texts = [t for f in fields for t in get_text_at_path(value, tokenize_path(f) if f != "$" else f) if t.strip()]
    return "\n".join(texts)


def _cut(text: str) -> str:
    """``text`` within the memory's 4096-byte cap (the whole value is kept beside it)."""
    data = text.encode("utf-8")
    if len(data) <= RAW_INPUT_MAX_BYTES:
        return text
    return data[:RAW_INPUT_MAX_BYTES].decode("utf-8", "ignore")


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """A ``list_namespaces`` prefix or suffix condition, ``*`` matching any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path))
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or k == p for k, p in pairs)


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: float(a) > float(b),
    "$gte": lambda a, b: float(a) >= float(b),
    "$lt": lambda a, b: float(a) < float(b),
    "$lte": lambda a, b: float(a) <= float(b),
}


def _compare(item_value: Any, wanted: Any) -> bool:
    """A search filter's test of one field, as ``InMemoryStore`` applies it: nested objects
    match field by field, lists element by element, ``{"$gt": 3}`` and the other operators
    compare numbers."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            for name, operand in wanted.items():
                if name not in _OPERATORS:
                    raise ValueError(f"Unsupported operator: {name}")
                if not _OPERATORS[name](item_value, operand):
                    return False
            return True
        return isinstance(item_value, dict) and all(_compare(item_value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (isinstance(item_value, (list, tuple)) and len(item_value) == len(wanted)
                and all(_compare(a, b) for a, b in zip(item_value, wanted)))
    return bool(item_value == wanted)

