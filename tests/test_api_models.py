"""The REST response models against the library's values, field by field: a field added to a
dataclass (or to a dict the bank builds) without its response model fails here, so nothing the
API answers can bypass the OpenAPI schema."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Union

import pytest
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import models
from memlocal.faces.api.app import create_app
from memlocal.services.audit import Injection
from memlocal.services.automation import AutomationNote
from memlocal.bank.facade import SaveResult
from memlocal.model import LINK_FIELDS, Memory
from memlocal.relevance.scoring import Breakdown, Evidence, ScoredMemory, Weights
from memlocal.store import Page

# Each library value the API answers, and the response model that declares it.
PAIRS: dict[type, type[BaseModel]] = {
    Memory: models.MemoryOut,
    Page: models.MemoryPage,
    SaveResult: models.SaveResponse,
    Weights: models.Weights,
    Breakdown: models.Breakdown,
    Evidence: models.Evidence,
    ScoredMemory: models.SearchResult,
    Injection: models.InjectionEntry,
    AutomationNote: models.AutomationNoteEntry,
}
# Dataclass fields that are not JSON fields of their own (a memory's other-writer fields are
# spread beside the declared ones; the supersession links among them are declared).
NOT_FIELDS = {(Memory, "extra")}
EXTRA_DECLARED = {models.MemoryOut: {"supersedes": "supersedes", "supersededBy": "superseded_by"}}
# Models of the API's own envelopes (no library value of their own), and the request bodies.
ENVELOPES = {
    models.ErrorDetail, models.ErrorResponse, models.MemoryResponse, models.SearchResponse,
    models.GroupedMemories, models.AutomationNote, models.Health, models.ProfileList,
    models.InjectionPreview, models.InjectionList, models.AutomationList, models.PreviewEntry,
    models.MemoryHistory,
}
REQUESTS = {models.MemoryCreateRequest}
# Models of dicts the bank builds (checked against a real bank's output below).
FROM_DICTS = {models.Stats, models.ProfileSummary, models.SyncStatus}


def _expected(tp: Any) -> Any:
    """The response model's type for a dataclass field's type: times are RFC 3339 strings,
    tuples lists, mappings dicts, paired dataclasses their models."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is datetime:
        return str
    if tp in PAIRS:
        return PAIRS[tp]
    if origin in (Union, types.UnionType):
        kept = {_expected(a) for a in args}  # a time that may be unset is null
        return kept.pop() if len(kept) == 1 else frozenset(kept)
    if origin is tuple:
        return list[_expected(args[0])]  # type: ignore[misc]
    if origin is list:
        return list[_expected(args[0])]  # type: ignore[misc]
    if origin in (dict, Mapping):
        return dict[_expected(args[0]), _expected(args[1])]  # type: ignore[misc]
    return tp


def _normal(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return frozenset(_normal(a) for a in typing.get_args(tp))
    return tp


def _model_fields(model: type[BaseModel]) -> dict[str, Any]:
    return {name: _normal(f.annotation) for name, f in model.model_fields.items()}


def _response_models() -> set[type[BaseModel]]:
    return {obj for obj in vars(models).values()
            if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == models.__name__
            and not obj.__name__.startswith("_")}


def test_every_response_model_is_checked_here() -> None:
    known = set(PAIRS.values()) | ENVELOPES | REQUESTS | FROM_DICTS
    assert _response_models() - known == set(), "a new response model: pair it with its library value above"
    assert known - _response_models() == set()


def test_no_response_model_takes_undeclared_fields() -> None:
    for model in _response_models() - REQUESTS:
        assert model.model_config.get("extra") in (None, "ignore"), model


@pytest.mark.parametrize("cls", PAIRS, ids=lambda c: c.__name__)
def test_the_model_declares_the_dataclass_field_by_field(cls: type) -> None:
    model = PAIRS[cls]
    hints = typing.get_type_hints(cls)
    want = {f.name: _normal(_expected(hints[f.name])) for f in dataclasses.fields(cls)
            if (cls, f.name) not in NOT_FIELDS}
    got = _model_fields(model)
    for name in EXTRA_DECLARED.get(model, {}).values():
        got.pop(name)
    assert got == want
    # The JSON names are the camelCase of the Python names.
    assert all(f.alias == to_camel(n) for n, f in model.model_fields.items())


def _sample(tp: Any) -> Any:
    """A value of ``tp`` with every optional part present."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return _sample(next(a for a in args if a is not type(None)))
    if origin is tuple or origin is list:
        return origin((_sample(args[0]),))
    if origin in (dict, Mapping):
        return {}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _sample(hints[f.name]) for f in dataclasses.fields(tp)})
    samples: dict[Any, Any] = {str: "mem-0123abcd", int: 3, float: 0.5, bool: True, Any: "x",
                               datetime: datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)}
    return samples[tp]


@pytest.mark.parametrize("cls", [c for c in PAIRS if hasattr(c, "to_dict")], ids=lambda c: c.__name__)
def test_to_dict_is_what_the_model_answers(cls: type) -> None:
    value = _sample(cls)
    if cls is Memory:  # with a link and a field another implementation wrote
        value = dataclasses.replace(value, extra={"supersedes": "mem-00000001", "otherWriter": [1]})
    body = value.to_dict()
    model = PAIRS[cls]
    assert model.model_validate(body).model_dump(mode="json", by_alias=True) == body


def test_the_dicts_the_bank_builds_are_declared(bank: MemoryBank) -> None:
    from memlocal_sync.status import status_for

    bank.save(SaveRequest("p", content="Deploys go out on Mondays", category="fact"))
    aliases = lambda m: {f.alias for f in m.model_fields.values()}  # noqa: E731
    assert set(bank.stats()) == aliases(models.Stats)
    assert set(bank.profiles()[0]) == aliases(models.ProfileSummary)
    local = bank.sync_status()
    with_bucket = {"localOnly": False, "message": None, **status_for(None, bank.replica)}
    assert set(local) | set(with_bucket) == aliases(models.SyncStatus)
    # ... and typed: every key the bank and the replicator build is their TypedDict's
    from memlocal.bank.facade import SyncStatus
    from memlocal.plugins import ReplicatorStatus

    assert set(with_bucket) == set(SyncStatus.__annotations__)
    assert set(with_bucket) - {"localOnly", "message"} == set(ReplicatorStatus.__annotations__)
    assert set(local) <= set(SyncStatus.__annotations__)
    for body in (local, with_bucket):  # the route answers exactly what the bank gives
        dumped = models.SyncStatus.model_validate(body).model_dump(mode="json", by_alias=True, exclude_unset=True)
        assert dumped == body


def test_the_openapi_schema_documents_every_field(bank: MemoryBank) -> None:
    schemas = create_app(bank).openapi()["components"]["schemas"]
    for model in _response_models() - REQUESTS:
        schema = schemas.get(model.__name__) or schemas[f"{model.__name__}-Output"]
        assert set(schema["properties"]) == {f.alias for f in model.model_fields.values()}, model
    assert schemas["MemoryOut"]["additionalProperties"] is True  # other writers' fields are kept
    assert set(LINK_FIELDS) <= set(schemas["MemoryOut"]["properties"])
