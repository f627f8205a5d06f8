"""``HEAD`` on every ``GET`` route.

FastAPI's routes answer only the methods they declare, so ``HEAD /healthz`` would be a 405
although ``GET /healthz`` is fine (Starlette's own routes add HEAD to GET; FastAPI's do not).
Declaring HEAD on each route would add a second operation per path to the OpenAPI schema, so
this middleware answers a HEAD as the GET it stands for, with the same status and headers
(``content-length`` included) and no body (RFC 9110, 9.3.2).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGetMiddleware:
    """Runs a ``HEAD`` request as ``GET`` and drops the response body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # the last (empty) body message below ends the response
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
