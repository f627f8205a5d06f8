"""The FastAPI application: the spec's per-profile and global endpoints, automation notes, health.

Most endpoints are plain ``def`` functions, so FastAPI runs them in its thread pool; the bank's
writing SQLite connection is guarded by the store's lock, reads have connections of their own, and
no lock is held while the bank waits on the network (the LLM processor, the bucket), so concurrent
requests are safe and do not serialise on I/O.

The hot reads (search, list, injection preview) are ``async``: a bank without a bucket answers
them from memory and its read connections, which never wait on a write or the network, so they run
on the event loop itself (no hand-over to a pool thread and back: under load that hand-over cost
more than a search); with a bucket, whose first reads may wait for the pull on open, they go to
the pool like the rest. The hot routes also answer their JSON directly (:func:`_json`): what
their response model would answer (``tests/test_api_fast.py`` checks it), without validating
every field of every memory again on the way out. The response models still document them.

When the store could not be opened, the app is built around the error instead of a bank: every
``/api`` endpoint answers 503 with the reason and ``/healthz`` reports ``degraded``.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Annotated, Any, Callable, Union

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool as _to_thread
from pydantic import ValidationError as PydanticError
from starlette.concurrency import run_in_threadpool

from ... import __version__
from .. import dashboard
from ...bank.facade import MemoryBank
from ...bank.facade import Stats as BankStats
from ...config import Config
from ...errors import BankNotWiredError, ValidationError
from ...humanize import shown_summary
from ..inputs import AutomationId, AutomationNoteInput, Category, MemoryId, MinScore, Offset, PageLimit, ProfileName
from ...model import CORE_CATEGORIES, RecallQuery
from ...bank.replication import SyncStatus as BankSyncStatus
from ...bank.saving import SaveRequest
from . import errors
from .auth import BearerAuthMiddleware, HostOriginMiddleware, parse_host_list
from .head import HeadAsGetMiddleware
from .limits import BodySizeLimitMiddleware
from .models import (
    AutomationList,
    AutomationNote,
    GroupedMemories,
    Health,
    InjectionList,
    InjectionPreview,
    MemoryCreateRequest,
    MemoryHistory,
    MemoryPage,
    MemoryResponse,
    ProfileList,
    SaveResponse,
    SearchResponse,
    Stats,
    SyncStatus,
)

if TYPE_CHECKING:
    from ...relevance.scoring import ScoredMemory

log = logging.getLogger("memlocal.api")

# Path and query parameters take their types from memlocal/faces/inputs.py: each type checks its rule
# with the library's validator (one message; 400, as from the bank) and writes its schema facts.


ProfilePath = Annotated[ProfileName, Path(
    description="Profile name: 1-64 characters of A-Z a-z 0-9 . _ -, not starting with '.'")]
IdPath = Annotated[MemoryId, Path(description="Memory id: mem- and 8 lowercase hex digits")]
AutomationPath = Annotated[AutomationId, Path(
    description="Automation id: 1-128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit")]


async def _bank(request: Request) -> MemoryBank:
    """The wired bank, or 503 with the reason it could not be opened. (``async``: no thread hop.)"""
    wired = request.app.state.bank
    if isinstance(wired, BaseException):
        raise BankNotWiredError(f"the memory bank is not wired: {wired}")
    bank: MemoryBank = wired
    return bank


BankDep = Depends(_bank)


def _refresh(bank: MemoryBank, response: Response, profile: str | None = None) -> None:
    """The bank's refresh-before-read policy (``MemoryBank.refresh_for_read``): a background pull
    is asked for, the request is answered from the local index at once, and the local data's
    age in seconds goes into the standard ``Age`` header when it is known."""
    age = bank.refresh_for_read(profile)
    if age is not None:
        response.headers["Age"] = str(int(age))


def _age_headers(bank: MemoryBank, profile: str | None = None) -> dict[str, str]:
    """:func:`_refresh` for a route that answers its own :class:`Response` (:func:`_json`)."""
    age = bank.refresh_for_read(profile)
    return {} if age is None else {"Age": str(int(age))}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``body`` (JSON values only: the library's ``to_dict`` forms) as the JSON response FastAPI
    would make of it, without the response model's second pass over every field."""
    return Response(json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8"),
                    status_code=status, headers=headers, media_type="application/json")


def _scored(scored: "ScoredMemory") -> dict[str, Any]:
    """A ranked memory as its response model answers it: ``evidence.semantic`` is ``null`` when the
    semantic signal is off (``Evidence.to_dict`` leaves it out)."""
    out = scored.to_dict()
    evidence = out.get("evidence")
    if evidence is not None:
        evidence.setdefault("semantic", None)
    return out


async def _read(bank: MemoryBank, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a read of the bank: on the event loop when the bank is local only (its reads wait on
    neither a write nor the network), else in the thread pool (the pull on open may be waited for)."""
    if bank.local_only:
        return fn(*args)
    return await _to_thread(fn, *args)


router = APIRouter(prefix="/api", responses=errors.error_responses(401, 503))

# --- per-profile --------------------------------------------------------------------------------


@router.get(
    "/profiles/{name}/memories",
    response_model=MemoryPage,
    summary="List a profile's memories",
    responses=errors.error_responses(400, 422),
)
async def list_memories(
    name: ProfilePath,
    limit: Annotated[PageLimit, Query()] = 50,
    offset: Annotated[Offset, Query()] = 0,
    category: Annotated[Category | None, Query(description="Keep one category")] = None,
    active_only: Annotated[bool, Query(alias="activeOnly", description=(
        "Only the active memories (leave out the superseded ones), as `memlocal list` without "
        "--all; `total` then counts those"))] = False,
    bank: MemoryBank = BankDep,
) -> Response:
    """Newest first, with ``limit`` / ``offset`` paging, optionally one ``category``; superseded
    memories too unless ``activeOnly``. Read-only: access counts do not change."""
    def page() -> Response:
        headers = _age_headers(bank, name)
        listed = bank.list(name, limit=limit, offset=offset, category=category, active_only=active_only)
        return _json(listed.to_dict(), headers=headers)
    response: Response = await _read(bank, page)
    return response


@router.post(
    "/profiles/{name}/memories",
    response_model=SaveResponse,
    status_code=201,
    summary="Create a memory",
    responses={**errors.error_responses(400, 404, 413, 422),
               200: {"model": SaveResponse, "description": "The body repeated an active memory: it is returned "
                                                           "with deduplicated true and nothing new is stored"}},
)
def create_memory(
    body: MemoryCreateRequest,
    name: ProfilePath,
    bank: MemoryBank = BankDep,
) -> Response:
    """Save a memory from ``rawInput`` (structured by the LLM processor when one is configured)
    and/or ``content``. Returns once it is committed durably; ``synced`` says whether the bucket
    has it yet (always false without a bucket). A body that repeats an active memory answers
    200 with that memory and ``deduplicated: true``; ``supersedes`` retires the memory named."""
    result = bank.save(SaveRequest(
        name,
        body.raw_input,
        content=body.content,
        summary=body.summary,
        category=body.category,
        confidence=body.confidence,
        supersedes=body.supersedes,
        auto_supersede=body.auto_supersede,
    ))
    return _json(result.to_dict(), 200 if result.deduplicated else 201)


@router.get(
    "/profiles/{name}/memories/search",
    response_model=SearchResponse,
    summary="Search a profile's memories by relevance",
    responses=errors.error_responses(400, 422),
)
async def search_memories(
    name: ProfilePath,
    q: Annotated[str, Query(description="The query text")],
    limit: Annotated[PageLimit | None, Query(description="Default: recall.limit (8)")] = None,
    min_score: Annotated[MinScore | None, Query(alias="minScore",
                                                description="Default: recall.min_score (0.05)")] = None,
    bank: MemoryBank = BankDep,
) -> Response:
    """Ranked best first, each with its score breakdown. A dashboard read: unlike the
    ``memory_recall`` tool, it does not bump ``accessCount`` or ``lastAccessedAt``."""
    def search() -> Response:
        headers = _age_headers(bank, name)
        results = bank.query_with_relevance(RecallQuery(name, q, limit, min_score))
        return _json({"results": [_scored(r) for r in results]}, headers=headers)
    response: Response = await _read(bank, search)
    return response


@router.get(
    "/profiles/{name}/injection-preview",
    response_model=InjectionPreview,
    summary="Preview the memory block prompt injection would add",
    responses=errors.error_responses(400, 422),
)
async def injection_preview(
    name: ProfilePath,
    q: Annotated[str, Query(description="The query (a run's prompt)")],
    bank: MemoryBank = BankDep,
) -> Response:
    """The exact ``--- CONTEXT FROM MEMORY ---`` block for ``q`` (as for a profile that opts in
    to ``@memory``), its length against ``inject.budget_chars``, the entries in it and the ones
    the budget trimmed. A dashboard read: nothing is marked accessed."""
    def preview() -> Response:
        headers = _age_headers(bank, name)
        return _json(_preview(bank, name, q), headers=headers)
    response: Response = await _read(bank, preview)
    return response


def _preview(bank: MemoryBank, name: str, q: str) -> dict[str, Any]:
    """The body of ``injection_preview``."""
    rendered = bank.render_context_block(name, q)

    def entry(scored: "ScoredMemory") -> dict[str, Any]:  # the tiers split the categories
        return {**_scored(scored), "tier": "core" if scored.memory.category in CORE_CATEGORIES else "relevant"}

    return {
        "query": q,
        "block": rendered.text,
        "chars": len(rendered.text),
        "budget": bank.config.get_int("inject.budget_chars"),
        "included": [entry(s) for s in (*rendered.core, *rendered.relevant)],
        "trimmed": [entry(s) for s in rendered.trimmed],
    }


@router.get("/profiles", response_model=ProfileList, summary="Every profile, newest activity first")
def list_profiles(response: Response, bank: MemoryBank = BankDep) -> dict[str, Any]:
    """Each profile with its memory count (as in the stats) and its latest createdAt or
    lastAccessedAt, newest activity first. Read-only."""
    _refresh(bank, response)
    return {"profiles": bank.profiles()}


@router.get(
    "/profiles/{name}/memories/{id}",
    response_model=MemoryResponse,
    summary="Get one memory",
    responses=errors.error_responses(400, 404, 422),
)
def get_memory(response: Response, name: ProfilePath, id: IdPath, bank: MemoryBank = BankDep) -> dict[str, Any]:
    """One memory of the profile (404 when absent, or in another profile). Read-only."""
    _refresh(bank, response, name)
    return {"memory": bank.get(name, id).to_dict()}


@router.get(
    "/profiles/{name}/memories/{id}/history",
    response_model=MemoryHistory,
    summary="A memory's supersession chain",
    responses=errors.error_responses(400, 404, 422),
)
def memory_history(response: Response, name: ProfilePath, id: IdPath, bank: MemoryBank = BankDep) -> dict[str, Any]:
    """The chain of versions through ``id``, oldest first (``MemoryBank.history``, what
    ``memlocal history`` shows): the memories it superseded before it, the ones that superseded
    it after; just that memory when it has neither. 404 when absent. Read-only."""
    _refresh(bank, response, name)
    return {"memories": [m.to_dict() for m in bank.history(name, id)]}


@router.post(
    "/profiles/{name}/memories/{id}/restore",
    response_model=MemoryResponse,
    summary="Undo a supersession",
    responses=errors.error_responses(400, 404, 422),
)
def restore_memory(name: ProfilePath, id: IdPath, bank: MemoryBank = BankDep) -> dict[str, Any]:
    """The superseded memory ``id`` is active again; the memory that superseded it stays active
    without the link (``MemoryBank.restore``). 400 when ``id`` is active."""
    return {"memory": bank.restore(name, id).to_dict()}


@router.delete(
    "/profiles/{name}/memories/{id}",
    status_code=204,
    response_class=Response,
    summary="Delete one memory",
    responses=errors.error_responses(400, 404, 422),
)
def delete_memory(name: ProfilePath, id: IdPath, bank: MemoryBank = BankDep) -> Response:
    """Delete one memory of the profile (and from the bucket, when one is configured)."""
    bank.delete(name, id)
    return Response(status_code=204)


# --- global ---------------------------------------------------------------------------------------


@router.get(
    "/memory-bank",
    response_model=Union[GroupedMemories, MemoryPage],
    summary="All memories, grouped by profile or as a flattened page",
    responses=errors.error_responses(400, 422),
)
def memory_bank(
    response: Response,
    limit: Annotated[PageLimit | None, Query(description="Page size (default 50)")] = None,
    offset: Annotated[Offset | None, Query(description="Default 0")] = None,
    q: Annotated[str | None, Query(
        description="Keep memories whose rawInput, processedContent or summary contains this text")] = None,
    category: Annotated[Category | None, Query()] = None,
    bank: MemoryBank = BankDep,
) -> dict[str, Any]:
    """Without parameters: ``{"profiles": {name: [memories newest first]}}``. With any of
    ``limit``, ``offset``, ``q``, ``category``: one page across profiles, newest first,
    ``{"memories", "total", "limit", "offset"}``. Read-only."""
    _refresh(bank, response)
    if limit is None and offset is None and q is None and category is None:
        return {"profiles": {p: [m.to_dict() for m in ms] for p, ms in bank.grouped().items()}}
    page = bank.list_all(limit if limit is not None else 50, offset or 0, q=q, category=category)
    return page.to_dict()


@router.get(
    "/memory-bank/{name}/injections",
    response_model=InjectionList,
    summary="The injection audit trail of a profile",
    responses=errors.error_responses(400, 422),
)
def profile_injections(
    name: ProfilePath,
    memory_id: Annotated[MemoryId | None, Query(alias="memoryId",
                                                description="Only the runs that saw this memory")] = None,
    limit: Annotated[PageLimit, Query()] = 20,
    bank: MemoryBank = BankDep,
) -> dict[str, Any]:
    """The memory blocks rendered for the profile's runs, newest first: when, the memory ids of
    each tier, the block's size and a hash of the query (never its text). The first entry is
    what the last run saw; with ``memoryId``, the runs that saw that memory. Local to this host.
    ``summaries``: the summary of each of those memories still stored (deleted ones are absent)."""
    runs = bank.injections(name, memory_id=memory_id, limit=limit)
    found = bank.get_many(name, [i for r in runs for i in (*r.core, *r.relevant)])
    return {"injections": [r.to_dict() for r in runs],
            "summaries": {i: shown_summary(m.summary, m.processed_content) for i, m in found.items()}}


@router.get("/memory-bank/stats", response_model=Stats, summary="Roll-up counts")
def memory_bank_stats(response: Response, bank: MemoryBank = BankDep) -> BankStats:
    """Total memories, profiles with memory, and per-profile counts."""
    _refresh(bank, response)
    return bank.stats()


# --- automation notes -----------------------------------------------------------------------------

_NOTE_BODY = {
    "requestBody": {
        "required": False,
        "description": "The new note, as text or as {\"memory\": \"...\"}; an empty body clears it.",
        "content": {
            "text/plain": {"schema": {"type": "string"}},
            "application/json": {"schema": AutomationNoteInput.model_json_schema(by_alias=True)},
        },
    }
}


def _note_from_body(body: bytes, content_type: str) -> str:
    """The note a PUT carries: raw text, or ``{"memory": "..."}`` (a JSON string is taken too)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError("the note is not valid UTF-8 text") from None
    media = content_type.split(";")[0].strip().lower()
    if not (media == "application/json" or media.endswith("+json")) or not text.strip():
        return text
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"request body is not valid JSON: {exc}") from None
    if isinstance(data, str):
        return data
    try:
        return AutomationNoteInput.model_validate(data).memory or ""
    except PydanticError:
        raise ValidationError('a JSON body must be {"memory": "<text>"}') from None


@router.get("/automations", response_model=AutomationList, summary="Every automation note")
def list_automation_notes(response: Response, bank: MemoryBank = BankDep) -> dict[str, Any]:
    """Every automation that has a note, most recently written first (an automation without a
    note is not known to the bank)."""
    _refresh(bank, response)  # notes sync with every profile's pull (docs/sync.md)
    return {"automations": [n.to_dict() for n in bank.automations.list()]}


@router.get(
    "/automations/{id}/memory",
    response_model=AutomationNote,
    summary="Read an automation's note",
    responses=errors.error_responses(400, 422),
)
def get_automation_note(response: Response, id: AutomationPath, bank: MemoryBank = BankDep) -> dict[str, Any]:
    """The note its automation agent rewrote after the last firing ("" when it has none)."""
    _refresh(bank, response)
    note = bank.automations.get(id)
    return {"memory": note.note if note is not None else ""}


@router.put(
    "/automations/{id}/memory",
    response_model=AutomationNote,
    summary="Replace (or clear) an automation's note",
    responses=errors.error_responses(400, 413, 422),
    openapi_extra=_NOTE_BODY,
)
async def put_automation_note(
    request: Request, id: AutomationPath, bank: MemoryBank = BankDep
) -> dict[str, Any]:
    """Replace the note with the body (text, or ``{"memory": "..."}``), trimmed, at most 4096
    bytes of UTF-8 (else 413); an empty or blank body clears it. Answers the stored note."""
    text = _note_from_body(await request.body(), request.headers.get("content-type", ""))
    stored = await run_in_threadpool(bank.automations.put, id, text)
    return {"memory": stored.note if stored is not None else ""}


@router.delete(
    "/automations/{id}",
    status_code=204,
    response_class=Response,
    summary="Remove an automation (its note goes with it)",
    responses=errors.error_responses(400, 422),
)
def delete_automation(id: AutomationPath, bank: MemoryBank = BankDep) -> Response:
    """The schedule is gone: its note dies with it (204 whether or not it had one). The
    memories its agents saved stay."""
    bank.automations.delete(id)
    return Response(status_code=204)


# --- sync ---------------------------------------------------------------------------------------


@router.get("/sync/status", response_model=SyncStatus, response_model_exclude_unset=True,
            summary="The bucket sync's status")
def sync_status(bank: MemoryBank = BankDep) -> BankSyncStatus:
    """What ``memlocal sync status --json`` shows: the bucket in use and where its name came
    from, what is pending (the outbox), the last pass and its result, the last error, skipped
    objects. Without a bucket: ``localOnly`` and the message "no bucket configured (local only)"."""
    return bank.sync_status()


# --- the app --------------------------------------------------------------------------------------


def create_app(
    bank_or_error: MemoryBank | BaseException, config: Config | None = None, *, token: str | None = None
) -> FastAPI:
    """Build the API around an open bank, or around the error that kept it from opening (503s).

    When a token is set (``token``, else ``serve.api_token`` of ``config``, else of the bank's
    config), every request must carry it as a bearer token. The caller owns the bank and closes it.
    """
    if config is None and isinstance(bank_or_error, MemoryBank):
        config = bank_or_error.config
    if token is None:
        token = config.serve.api_token if config is not None else ""
    allowed_hosts = parse_host_list(config.serve.allowed_hosts) if config is not None else ()
    app = FastAPI(
        title="memlocal",
        version=__version__,
        description="The Memory Bank REST API. See docs/rest.md. Errors are "
        '`{"error": {"code": ..., "message": ...}}`.',
        generate_unique_id_function=lambda route: route.name,  # operationId = the function's name
        docs_url=None,  # /docs and /redoc come from the dashboard package, served offline
        redoc_url=None,
    )
    app.state.bank = bank_or_error
    errors.install(app)
    app.include_router(router)
    dashboard.install(app)  # the web page at / (docs/dashboard.md)

    @app.get("/healthz", response_model=Health, summary="Health", responses=errors.error_responses(401))
    def healthz(request: Request) -> dict[str, Any]:
        """``ok`` when the bank is wired, else ``degraded`` with the reason (still 200: the
        server is up and answers every memory endpoint with 503)."""
        wired = request.app.state.bank
        if isinstance(wired, BaseException):
            return {"status": "degraded", "reason": errors.one_line(wired), "version": __version__}
        return {"status": "ok", "reason": None, "version": __version__}

    # Outermost first at run time: Host and Origin (DNS rebinding, cross-site writes), then
    # authentication, then the body cap, then HEAD as GET.
    app.add_middleware(HeadAsGetMiddleware)
    app.add_middleware(BodySizeLimitMiddleware)
    if token:
        app.add_middleware(BearerAuthMiddleware, token=token, public_paths=dashboard.PUBLIC_PATHS,
                           public_prefixes=dashboard.PUBLIC_PREFIXES)
    app.add_middleware(HostOriginMiddleware, allowed_hosts=allowed_hosts, any_host=bool(token) and not allowed_hosts)
    return app
