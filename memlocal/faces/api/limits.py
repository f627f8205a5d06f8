"""A cap on request bodies, so that a huge upload is refused before it is held in memory.

The largest legitimate body (a rawInput and a content of 4096 bytes each, JSON-escaped, or an
automation note) is far below the cap; uvicorn has no such limit of its own.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...model import RAW_INPUT_MAX_BYTES
from .errors import error_response

MAX_BODY_BYTES = 1024 * 1024


def _too_large(size: str) -> str:
    return (f"request body is {size} bytes; the cap is {MAX_BODY_BYTES} bytes "
            f"(rawInput itself is capped at {RAW_INPUT_MAX_BYTES} bytes)")


class BodySizeLimitMiddleware:
    """Answers 413 when the declared or the streamed body exceeds ``MAX_BODY_BYTES``."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await error_response(413, "too_large", _too_large(declared.decode()))(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises HTTPException from body reading; the handler answers 413.
                    raise HTTPException(413, _too_large(f"over {self.max_bytes}"))
            return message

        await self.app(scope, limited, send)
