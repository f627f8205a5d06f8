"""memlocal as a LangGraph store (memlocal.integrations.langgraph, the ``langgraph`` extra).

An operation script run against LangGraph's ``InMemoryStore`` and against ``MemlocalStore`` gives
the same items (as sets where the order is the ranking's or the newest-first listing's); then
the cases of LangGraph's own store tests (libs/checkpoint/tests/test_store.py in
langchain-ai/langgraph), written anew against memlocal's store, minus those that test
``InMemoryStore``'s or ``AsyncBatchedBaseStore``'s internals (docs/integrations.md lists them).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from memlocal import MemoryBank, SaveRequest
from memlocal.integrations.langgraph import ITEM_FIELD, MemlocalSearchItem, MemlocalStore, namespace_of, profile_for


@pytest.fixture
def store(bank: MemoryBank) -> MemlocalStore:
    return MemlocalStore(bank)


# --- the oracle ---------------------------------------------------------------------------------

NAMESPACES = [("users", "123"), ("users", "456", "settings"), ("docs",), ("users", "a b"), ("ünï", "x"),
              ("admin", "users", "789"), ("l" * 40, "m" * 30), ("users",)]
WORDS = ["apple", "red", "car", "python", "coffee", "allergy", "peanut", "travel", "lisbon", "pytest", "deploy",
         "monday", "green", "tea", "book", "dark", "theme"]


def _value(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))}
    if rng.random() < 0.5:
        value["color"] = rng.choice(["red", "green", "blue"])
    if rng.random() < 0.85:
        value["score"] = rng.choice([1, 2.5, 3, 4.5])
    if rng.random() < 0.3:
        value["meta"] = {"kind": rng.choice(["a", "b"]), "tags": [rng.choice(WORDS)]}
    if rng.random() < 0.1:
        value = {"n": rng.randint(0, 9)}  # no text at all
    return value


def _filter(rng: random.Random) -> dict[str, Any] | None:
    return rng.choice([None, None, {"color": "red"}, {"score": {"$gt": 2}}, {"score": {"$lte": 3}, "color": "green"},
                       {"meta": {"kind": "a"}}, {"score": {"$ne": 1}}, {"color": {"$eq": "blue"}}])


def _op(rng: random.Random, keys: list[tuple[tuple[str, ...], str]]) -> Any:
    kind = rng.choices(["put", "delete", "get", "search", "list"], weights=[40, 10, 15, 25, 10])[0]
    if kind in ("put", "delete", "get"):
        if keys and rng.random() < 0.6:
            ns, key = rng.choice(keys)
        else:
            ns, key = rng.choice(NAMESPACES), rng.choice(["k1", "k2", "k3", "prefs", "a key"])
        if kind == "put":
            return PutOp(ns, key, _value(rng), index=rng.choice([None, None, None, False, ["text"]]))
        return PutOp(ns, key, None) if kind == "delete" else GetOp(ns, key)
    if kind == "search":
        prefix = rng.choice([(), ("users",), ("users", "123"), ("docs",), ("ünï",), ("nothing",), ("l" * 40,)])
        query = rng.choice([None, None, "", "red apple", "coffee allergy", "nothing-matches"])
        limit, offset = rng.choice([(100, 0), (100, 0), (3, 0), (2, 1), (5, 2)])
        return SearchOp(prefix, _filter(rng), limit, offset, query)
    conditions = rng.choice([None, (MatchCondition("prefix", ("users",)),), (MatchCondition("suffix", ("*",)),),
                             (MatchCondition("prefix", ("users", "*")), MatchCondition("suffix", ("settings",))),
                             (MatchCondition("suffix", ("123",)),)])
    return ListNamespacesOp(conditions, rng.choice([None, 1, 2]), rng.choice([100, 2]), rng.choice([0, 0, 1]))


def _rows(items: list[Any]) -> list[tuple[Any, ...]]:
    # A value is a JSON object: equal values, whatever the order of their keys.
    return [(i.namespace, i.key, json.dumps(i.value, sort_keys=True)) for i in items]


def test_an_operation_script_gives_the_same_items_as_in_memory_store(store: MemlocalStore) -> None:
    rng = random.Random(7)
    oracle = InMemoryStore()
    keys: list[tuple[tuple[str, ...], str]] = []
    compared = {"get": 0, "search": 0, "list": 0, "raised": 0}
    for step in range(250):
        ops = [_op(rng, keys) for _ in range(rng.choice([1, 1, 1, 3]))]  # sometimes a batch of three
        # Listings first in a batch: a GetOp adds its namespace to InMemoryStore's listing, empty.
        ops.sort(key=lambda op: not isinstance(op, ListNamespacesOp))
        keys += [(op.namespace, op.key) for op in ops if isinstance(op, PutOp) and op.value is not None]
        # InMemoryStore lists a namespace once any operation touched it, items or not (its
        # defaultdict); a store lists the namespaces that hold items, as PostgresStore does.
        for empty in [ns for ns, items in oracle._data.items() if not items]:
            del oracle._data[empty]
        try:
            expected = oracle.batch(ops)
        except Exception as exc:  # noqa: BLE001 - e.g. {"$gt": 2} on an item without the field
            with pytest.raises(type(exc)):
                store.batch(ops)
            compared["raised"] += 1
            continue
        got = store.batch(ops)
        for op, want, have in zip(ops, expected, got):
            where = f"step {step}: {op}"
            if isinstance(op, GetOp):
                assert (want is None) == (have is None), where
                if want is not None:
                    assert (have.namespace, have.key, have.value) == (want.namespace, want.key, want.value), where
                    assert have.created_at == have.updated_at and have.created_at.tzinfo is not None
                compared["get"] += 1
            elif isinstance(op, SearchOp):
                assert len(have) == len(want), where
                if op.offset == 0 and len(want) < op.limit:  # the page holds every match: same set
                    assert sorted(_rows(have)) == sorted(_rows(want)), where
                compared["search"] += 1
            elif isinstance(op, ListNamespacesOp):
                assert have == want, where
                compared["list"] += 1
            else:
                assert have is None and want is None
    everything = SearchOp((), None, 10_000, 0, None)
    assert sorted(_rows(store.batch([everything])[0])) == sorted(_rows(oracle.batch([everything])[0]))
    assert min(compared["get"], compared["search"], compared["list"]) >= 10 and compared["raised"] >= 1


def test_a_search_with_a_query_ranks_with_memlocal_and_says_why(store: MemlocalStore, bank: MemoryBank) -> None:
    store.put(("users", "ana"), "diet", {"text": "Ana is allergic to peanuts"})
    store.put(("users", "ana"), "editor", {"text": "Ana writes Rust in Helix"})
    store.put(("users", "ana"), "quiet", {"text": "peanuts peanuts"}, index=False)
    first, *rest = store.search(("users",), query="what should Ana avoid in her diet?")
    assert isinstance(first, MemlocalSearchItem) and first.key == "diet"
    assert first.score is not None and first.breakdown is not None and first.evidence is not None
    assert set(first.breakdown) >= {"recency", "usage", "topic", "confidenceMul", "weights", "score"}
    assert "food" in first.evidence["clusters"] and first.dict()["breakdown"] == first.breakdown
    assert {r.key: r.score for r in rest}["quiet"] is None  # put with index=False: never ranked
    # The items are the profile's memories, ranked and injected like any other.
    assert profile_for(("users", "ana")) == "users.ana"
    assert "allergic to peanuts" in bank.inject("users.ana", ["@memory"], "Plan Ana's lunch")


def test_namespaces_map_onto_valid_profile_names() -> None:
    assert profile_for(("users", "123", "prefs")) == "users.123.prefs"
    odd = profile_for(("users", "a b", "ünï"))
    assert odd.startswith("users.a-b.-n--") and len(odd) <= 64
    assert profile_for(("users", "a-b", "-n-")) != odd  # the hash keeps them apart
    long = profile_for(("x" * 40, "y" * 40))
    assert len(long) == 63 and long.startswith("x" * 40 + ".yyyyyyyyy-")
    assert namespace_of("users.123") == ("users", "123") and namespace_of("a..b") is None


def test_an_update_is_a_new_version_and_a_delete_takes_every_version(store: MemlocalStore, bank: MemoryBank) -> None:
    store.put(("docs",), "d1", {"text": "first draft"})
    store.put(("docs",), "d1", {"text": "second draft"})
    [current] = bank.list("docs", active_only=True)
    assert current.extra[ITEM_FIELD]["value"] == {"text": "second draft"}
    assert [m.processed_content for m in bank.history("docs", current.id)] == ["first draft", "second draft"]
    store.delete(("docs",), "d1")
    assert bank.list("docs").total == 0 and store.get(("docs",), "d1") is None


def test_two_keys_may_hold_the_same_value(store: MemlocalStore) -> None:
    store.put(("docs",), "a", {"text": "the same words here"})
    store.put(("docs",), "b", {"text": "the same words here"})
    assert {i.key for i in store.search(("docs",))} == {"a", "b"}


def test_credentials_in_a_value_are_redacted(store: MemlocalStore) -> None:
    store.put(("ops",), "deploy", {"text": "use AKIAIOSFODNN7EXAMPLE", "n": 1, "nested": ["AKIAIOSFODNN7EXAMPLE"]})
    item = store.get(("ops",), "deploy")
    assert item is not None and "AKIA" not in repr(item.value) and item.value["n"] == 1


def test_memories_saved_elsewhere_are_items_of_their_profiles_namespace(store: MemlocalStore, bank: MemoryBank) -> None:
    saved = bank.save(SaveRequest("team.alpha", content="Standup is at 9:30", category="fact")).memory
    item = store.get(("team", "alpha"), saved.id)
    assert item is not None and item.value == {"content": "Standup is at 9:30", "category": "fact",
                                               "summary": "Standup is at 9:30"}
    assert store.list_namespaces() == [("team", "alpha")]
    store.put(("team", "alpha"), saved.id, {"text": "Standup is at 10:00"})  # supersedes it
    assert not bank.get("team.alpha", saved.id).is_active


def test_the_store_serves_a_langgraph_graph(store: MemlocalStore) -> None:
    """A graph node reads and writes the store LangGraph hands it."""
    from langgraph.store.base import BaseStore

    assert isinstance(store, BaseStore)
    store.put(("memories", "u1"), "m1", {"text": "likes dark roast coffee"})
    assert [i.key for i in store.search(("memories", "u1"), query="coffee")] == ["m1"]


# --- LangGraph's own store tests, written for memlocal's store -------------------------------------
# Source: langchain-ai/langgraph, libs/checkpoint/tests/test_store.py. The same cases and
# expectations; the vector-search cases use memlocal's lexical ranking in place of their toy
# character embeddings, so their queries are words the items hold.


def _put_all(store: MemlocalStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})


def test_list_namespaces_basic(store: MemlocalStore) -> None:
    _put_all(store, [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
                     ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789")])
    assert sorted(store.list_namespaces(prefix=("a", "b"))) == [("a", "b", "c"), ("a", "b", "d", "e"),
                                                                ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "b"), max_depth=3)) == [("a", "b", "c"), ("a", "b", "d"),
                                                                             ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_list_namespaces_with_wildcards(store: MemlocalStore) -> None:
    _put_all(store, [("users", "123"), ("users", "456"), ("users", "789", "settings"), ("admin", "users", "789"),
                     ("guests", "123"), ("guests", "456", "preferences")])
    assert sorted(store.list_namespaces(prefix=("users", "*"))) == [("users", "123"), ("users", "456"),
                                                                    ("users", "789", "settings")]
    assert store.list_namespaces(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    store.put(namespace=("admin", "users", "settings", "789"), key="foo", value={"data": "some_val"})
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "789")) == [("admin", "users", "789"),
                                                                                 ("admin", "users", "settings", "789")]


def test_list_namespaces_pagination(store: MemlocalStore) -> None:
    _put_all(store, [("namespace", f"sub_{i:02d}") for i in range(20)])
    for offset in (0, 5, 15):
        assert store.list_namespaces(prefix=("namespace",), limit=5, offset=offset) == [
            ("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]


def test_list_namespaces_max_depth(store: MemlocalStore) -> None:
    _put_all(store, [("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"), ("a", "g"), ("h", "i", "j", "k")])
    assert sorted(store.list_namespaces(max_depth=2)) == [("a", "b"), ("a", "g"), ("h", "i")]


def test_list_namespaces_no_conditions_and_empty_store(store: MemlocalStore) -> None:
    assert store.list_namespaces() == []
    _put_all(store, [("a", "b"), ("c", "d"), ("e", "f", "g")])
    assert sorted(store.list_namespaces()) == [("a", "b"), ("c", "d"), ("e", "f", "g")]


def test_cannot_put_empty_namespace(store: MemlocalStore) -> None:
    doc = {"foo": "bar"}

    async def bad_async(ns: tuple[str, ...], key: str) -> None:
        await store.aput(ns, key, doc)

    for ns, key in [((), "foo"), (("the", "thing.about"), "foo"), (("some", "fun", ""), "foo"), (("langgraph", "foo"), "bar")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(ns, key, doc)
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(bad_async(ns, key))

    async def round_trip(ns: tuple[str, ...]) -> None:
        await store.aput(ns, "bar", doc)
        assert (await store.aget(ns, "bar")).value == doc  # type: ignore[union-attr]
        assert (await store.asearch(ns))[0].value == doc
        await store.adelete(ns, "bar")
        assert await store.aget(ns, "bar") is None

    asyncio.run(round_trip(("foo", "langgraph", "foo")))
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    assert store.search(("foo", "langgraph", "foo"))[0].value == doc
    store.delete(("foo", "langgraph", "foo"), "bar")
    assert store.get(("foo", "langgraph", "foo"), "bar") is None
    # Past the public put API: the batch takes the namespace as it is.
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.get(("langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    assert store.search(("langgraph", "foo"))[0].value == doc
    store.delete(("langgraph", "foo"), "bar")
    assert store.get(("langgraph", "foo"), "bar") is None


def test_async_batch_deduplication_semantics(store: MemlocalStore) -> None:
    """The outcomes of the deduplication test (concurrent gets agree; the last of two puts to a
    key wins; two equal searches agree) through ``abatch``."""

    async def run() -> None:
        await store.abatch([PutOp(("test",), "same", {"value": "same"}), PutOp(("test",), "different",
                                                                                {"value": "different"})])
        same, again, different = await store.abatch([GetOp(("test",), "same"), GetOp(("test",), "same"),
                                                      GetOp(("test",), "different")])
        assert same == again and same != different
        assert same.value == {"value": "same"} and different.value == {"value": "different"}  # type: ignore[union-attr]
        assert await store.abatch([PutOp(("test",), "key", {"value": 1}), PutOp(("test",), "key", {"value": 2})]) == [None, None]
        assert (await store.aget(("test",), "key")).value == {"value": 2}  # type: ignore[union-attr]
        one, two = await asyncio.gather(store.asearch(("test",), filter={"value": 2}),
                                        store.asearch(("test",), filter={"value": 2}))
        assert one == two and [i.value for i in one] == [{"value": 2}]

    asyncio.run(run())


def test_search_with_auto_indexing(store: MemlocalStore) -> None:
    for key, value in [("doc1", {"text": "short text"}), ("doc2", {"text": "longer text document"}),
                       ("doc3", {"text": "longest text document here"}), ("doc4", {"description": "text in description field"}),
                       ("doc5", {"content": "text in content field"}), ("doc6", {"body": "text in body field"})]:
        store.put(("test",), key, value)
    keys = [r.key for r in store.search(("test",), query="longer text document")]
    assert keys[0] == "doc2" and "doc3" in keys


def test_update_changes_the_ranking(store: MemlocalStore) -> None:
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    first = store.search(("test",), query="Zany Xerxes")[0]
    assert first.key == "doc1" and first.score is not None
    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = next(r.score for r in store.search(("test",), query="Zany Xerxes") if r.key == "doc1")
    assert after is None  # no evidence left for that query
    assert next(r.score for r in store.search(("test",), query="new text about dogs") if r.key == "doc1") is not None
    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)  # don't index this one
    assert all(r.score is None for r in store.search(("test",), query="new text about dogs") if r.key == "doc4")


def test_search_with_filters(store: MemlocalStore) -> None:
    for key, value in [("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
                       ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
                       ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
                       ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]:
        store.put(("test",), key, value)
    results = store.search(("test",), query="apple", filter={"color": "red"})
    assert len(results) == 2 and results[0].key == "doc1"
    results = store.search(("test",), query="car", filter={"color": "red"})
    assert len(results) == 2 and results[0].key == "doc2"
    results = store.search(("test",), query="blue", filter={"score": {"$gt": 3.2}})
    assert len(results) == 3 and results[0].key == "doc4"
    results = store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [r.key for r in results] == ["doc3"]


def test_concurrent_searches_with_filters(store: MemlocalStore) -> None:
    colors, things, scores = ["red", "blue", "green", "yellow", "purple"], ["apple", "car", "house", "book", "phone"], \
        [3.0, 3.5, 4.0, 4.5, 5.0]
    docs = [(f"doc{i}", {"text": f"{colors[i % 5]} {things[i % 5]} number{i}", "color": colors[i % 5],
                         "score": scores[i % 5], "index": i}) for i in range(25)]

    async def run() -> list[list[Any]]:
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs])
        await asyncio.gather(*[store.adelete(("test",), k) for k, _ in docs])
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs])
        return list(await asyncio.gather(*[store.asearch(("test",), query=q, filter=f) for q, f in queries]))

    queries: list[tuple[str, dict[str, Any]]] = [
        ("apple", {"color": "red"}), ("car", {"color": "blue"}), ("phone", {"score": {"$gt": 4.99}}),
        ("book", {"score": {"$lte": 3.5}}), ("house", {"index": {"$gt": 12}}), ("phone", {"index": {"$lte": 10}})]
    for results, (query, filter_) in zip(asyncio.run(run()), queries):
        assert results, (query, filter_)
        for r in results:
            for name, want in filter_.items():
                have = r.value[name]
                if isinstance(want, dict):
                    for op, bound in want.items():
                        assert {"$gt": have > bound, "$lte": have <= bound}[op]
                else:
                    assert have == want


def test_search_pagination(store: MemlocalStore) -> None:
    for i in range(5):
        store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = store.search(("test",), query="test", limit=2)
    page2 = store.search(("test",), query="test", limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 2 and page1[0].key != page2[0].key
    assert len(store.search(("test",), query="test", limit=10)) == 5
    assert {r.key for r in page1 + page2} | {r.key for r in store.search(("test",), query="test", offset=4)} == \
        {f"doc{i}" for i in range(5)}


def test_search_edge_cases(store: MemlocalStore) -> None:
    store.put(("test",), "doc1", {"text": "test document"})
    for query in ["", None, "test " * 100, "test!@#$%^&*()"]:
        assert len(store.search(("test",), query=query)) == 1


def test_index_fields_at_the_store_and_the_put(bank: MemoryBank) -> None:
    store = MemlocalStore(bank, fields=["key0", "key1", "key3"])
    store.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})  # no key0: no error
    store.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
    results = store.search(("test",), query="xxx")
    assert len(results) == 2 and all(r.score is not None for r in results)
    results = store.search(("test",), query="uuu")
    assert [r.key for r in results] == ["doc2", "doc1"] and results[1].score is None
    assert all(r.score is None for r in store.search(("test",), query="www"))  # key2 is not indexed

    per_put = MemlocalStore(bank, fields=["key17"])
    per_put.put(("other",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"}, index=["key0", "key1"])
    per_put.put(("other",), "doc4", {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"}, index=["key1", "key3"])
    assert [r.key for r in per_put.search(("other",), query="aaa")][0] == "doc3"
    assert [r.key for r in per_put.search(("other",), query="ggg")][0] == "doc4"
    both = per_put.search(("other",), query="bbb")
    assert {r.key for r in both} == {"doc3", "doc4"} and all(r.score is not None for r in both)
    assert all(r.score is None for r in per_put.search(("other",), query="ccc"))
    per_put.put(("other",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
    results = per_put.search(("other",), query="hhh")
    assert len(results) == 3 and next(r for r in results if r.key == "doc5").score is None


def test_non_ascii(store: MemlocalStore) -> None:
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    for i, text in enumerate(texts, 1):
        store.put(("user_123", "memories"), str(i), {"text": text})
    for i, text in enumerate(texts, 1):
        assert store.search(("user_123", "memories"), query=text)[0].key == str(i)


def test_item_equality_and_round_trip(store: MemlocalStore) -> None:
    store.put(("a",), "k", {"x": [1, {"y": None}], "t": "text"})
    item = store.get(("a",), "k")
    assert isinstance(item, Item) and item == store.get(("a",), "k") and item.value == {"x": [1, {"y": None}], "t": "text"}


def test_items_sync_to_another_host(hosts: Any, s3: Any) -> None:
    a, b = hosts("a"), hosts("b")
    MemlocalStore(a.bank).put(("users", "ana"), "diet", {"text": "Ana is allergic to peanuts", "level": 3})
    assert [k.split("/")[1] for k in s3.keys()] == ["users.ana"]
    assert b.sync().ok
    item = MemlocalStore(b.bank).get(("users", "ana"), "diet")
    assert item is not None and item.value == {"text": "Ana is allergic to peanuts", "level": 3}


def test_a_filtered_search_ranks_its_items_among_the_whole_profile(store: MemlocalStore) -> None:
    for i in range(12):
        store.put(("docs",), f"other{i}", {"text": f"coffee notes number {i}", "kind": "other"})
    store.put(("docs",), "mine", {"text": "coffee tasting at nine", "kind": "mine"})
    [hit] = store.search(("docs",), query="coffee notes", filter={"kind": "mine"}, limit=1)
    assert hit.key == "mine" and hit.score is not None
