"""Error translation for the REST API: done once, here, into ``{"error": {"code", "message"}}``.

- :class:`memlocal.errors.MemoryBankError` answers the status :data:`HTTP_STATUS` gives its class
  (400 bad input, 413 too large, 404 not found, 503 not wired, ...), its ``code`` and its one-line
  message.
- FastAPI's request validation (bad JSON, wrong types, unknown fields) answers 422.
- Starlette's own HTTP errors (unknown path 404, wrong method 405) keep their status.
- Anything else is a bug: it is logged with its traceback and answers a generic 500.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Iterable, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...errors import (
    BankNotWiredError,
    BucketError,
    ConfigError,
    CorruptDatabaseError,
    DiskFullError,
    InputTooLargeError,
    MemoryBankError,
    NotFoundError,
    ObjectMissing,
    ObjectTooLarge,
    PreconditionFailed,
    SecretFoundError,
    StoreError,
    SyncError,
    ValidationError,
    fold_whitespace,
)
from ..inputs import describe_error
from .models import ErrorResponse

log = logging.getLogger("memlocal.api")

_HTTP_CODES = {
    400: "invalid_input",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    503: "not_wired",
}


one_line = fold_whitespace  # the API's name for it


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one error body of the API."""
    return JSONResponse({"error": {"code": code, "message": one_line(message)}}, status_code=status, headers=headers)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses an operation can answer."""
    descriptions = {
        400: "Bad input (a bad profile name, id, category, confidence, limit or offset)",
        401: "Missing or wrong bearer token (only when an API token is configured)",
        404: "Not found",
        413: "Input over its cap (rawInput: 4096 bytes of UTF-8)",
        422: "Malformed request (bad JSON, wrong types, unknown fields)",
        503: "The memory bank is not wired (the store could not be opened)",
    }
    return {s: {"model": ErrorResponse, "description": descriptions[s]} for s in statuses}


def _describe(errors: Iterable[Any]) -> str:
    parts = []
    for err in errors:
        loc = tuple(p for p in err.get("loc", ()) if p != "body")
        kind = err.get("type")
        if kind == "json_invalid":
            parts.append(f"request body is not valid JSON: {err.get('ctx', {}).get('error', err.get('msg'))}")
        elif not loc and kind in ("model_attributes_type", "dict_type"):
            parts.append("request body must be a JSON object")
        else:  # a field: worded as every face words it
            parts.append(describe_error({**err, "loc": loc or ("body",)}, noun="field"))
    return "; ".join(parts) or "invalid request"


# The HTTP status of each error class of the library (a subclass not listed answers its nearest
# listed base's: the sync's bucket errors are SyncErrors). tests/test_api.py checks every class
# of memlocal.errors is here.
HTTP_STATUS: Final[Mapping[type[MemoryBankError], int]] = {
    MemoryBankError: 500,
    ValidationError: 400,
    InputTooLargeError: 413,
    SecretFoundError: 422,
    NotFoundError: 404,
    ConfigError: 500,
    BankNotWiredError: 503,
    StoreError: 500,
    DiskFullError: 507,
    CorruptDatabaseError: 500,
    SyncError: 503,
    # A bucket request's answer that the sync handles where it asked; one that reached a face
    # anyway is the upstream's answer, not the caller's fault.
    BucketError: 502,
    PreconditionFailed: 502,
    ObjectMissing: 502,
    ObjectTooLarge: 502,
}


def http_status(exc: MemoryBankError) -> int:
    """The status REST answers ``exc`` with: its class's in :data:`HTTP_STATUS`, or its nearest base's."""
    for cls in type(exc).__mro__:
        status = HTTP_STATUS.get(cls)
        if status is not None:
            return status
    return 500


async def _bank_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MemoryBankError)
    status = http_status(exc)
    if status >= 500 and status != 503:
        log.error("%s %s: %s", request.method, request.url.path, exc)
    return error_response(status, exc.code, exc.message)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, "invalid_input", _describe(exc.errors()))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404 and message == "Not Found":
        message = f"no such endpoint: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    return error_response(exc.status_code, code, message, headers=dict(exc.headers or {}))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error in %s %s", request.method, request.url.path)
    return error_response(500, "internal", f"internal error ({type(exc).__name__}); see the server log")


def install(app: FastAPI) -> None:
    """Register the translations on ``app``."""
    app.add_exception_handler(MemoryBankError, _bank_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
