"""Bearer-token authentication for the REST API, and the start-up rule for binding.

When a token is configured (``serve.api_token`` / ``MEMLOCAL_API_TOKEN``) every request, the
schema and ``/docs`` included, must carry ``Authorization: Bearer <token>``; the comparison runs
in constant time. Without a token the server may only listen on a loopback address.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ConfigError
from .errors import error_response


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1); anything else,
    host names included, counts as reachable from other machines."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str) -> None:
    """Refuse, with a one-line reason, to serve a non-loopback address without a token."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host}, which is not a loopback address, without an API token: "
            "set MEMLOCAL_API_TOKEN (or serve.api_token), or bind 127.0.0.1"
        )


class BearerAuthMiddleware:
    """Answers 401 to any HTTP request without the right bearer token.

    ``public_paths`` / ``public_prefixes``: GET and HEAD requests that need no token (the
    dashboard's page and static assets, which hold no data and must load to ask for the token).
    """

    def __init__(self, app: ASGIApp, token: str, public_paths: frozenset[str] = frozenset(),
                 public_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self._token = token.encode("utf-8")
        self._public_paths = public_paths
        self._public_prefixes = public_prefixes

    def _is_public(self, scope: Scope) -> bool:
        path = scope.get("path", "")
        return scope.get("method") in ("GET", "HEAD") and (
            path in self._public_paths or (bool(self._public_prefixes) and path.startswith(self._public_prefixes))
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._is_public(scope):
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        challenge = {"WWW-Authenticate": 'Bearer realm="memlocal"'}
        if header is None:
            response = error_response(401, "unauthorized", "missing 'Authorization: Bearer <token>' header", challenge)
        else:
            scheme, _, value = header.strip().partition(b" ")
            if scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token):
                await self.app(scope, receive, send)
                return
            response = error_response(401, "unauthorized", "wrong bearer token", challenge)
        await response(scope, receive, send)
