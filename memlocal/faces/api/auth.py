"""Bearer-token authentication for the REST API, the Host and Origin checks, and the start-up
rule for binding.

When a token is configured (``serve.api_token`` / ``MEMLOCAL_API_TOKEN``) every request, the
schema and ``/docs`` included, must carry ``Authorization: Bearer <token>``; the comparison runs
in constant time. Without a token the server may only listen on a loopback address, and answers
only requests whose ``Host`` is a loopback name (``127.0.0.1``, ``localhost``, ``[::1]``, any
port): a web page that rebinds its own DNS name to 127.0.0.1 still sends its own name as the
Host, and is refused. Writes (any method but GET, HEAD and OPTIONS) that carry an ``Origin``
other than the server's own are refused too, whatever the token.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.types import ASGIApp, Receive, Scope, Send

from ...errors import ConfigError
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


def parse_host_list(text: str) -> tuple[str, ...]:
    """``serve.allowed_hosts``: comma-separated host names (no port), case-insensitive."""
    return tuple(h.strip().lower().rstrip(".") for h in text.split(",") if h.strip())


def _host_name(authority: str) -> str:
    """``example.com:80`` -> ``example.com``, ``[::1]:8765`` -> ``::1``, lowercased."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].split("]", 1)[0]
    return authority.rsplit(":", 1)[0].rstrip(".") if authority.count(":") == 1 else authority.rstrip(".")


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class HostOriginMiddleware:
    """Refuses a request whose ``Host`` is not allowed (421), and a write whose ``Origin`` is not
    the server's own (403).

    Allowed hosts: loopback names and addresses, plus ``allowed_hosts`` (``serve.allowed_hosts``);
    ``any_host`` (a token is set and no list is given) allows every host, the token being the guard.
    An ``Origin`` is the server's own when its host and port are the request's ``Host``; an origin
    whose host is in ``allowed_hosts`` is accepted too. Requests without ``Origin`` (curl, scripts,
    the CLI) are not browsers' cross-site requests and pass.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...] = (), any_host: bool = False) -> None:
        self.app = app
        self.allowed_hosts = frozenset(allowed_hosts)
        self.any_host = any_host

    def _host_allowed(self, name: str) -> bool:
        return self.any_host or is_loopback(name) or name in self.allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if not host or not self._host_allowed(_host_name(host)):
            response = error_response(
                421, "misdirected", f"this server does not answer for Host {host!r}: only loopback names"
                " (127.0.0.1, localhost, [::1]) and serve.allowed_hosts are accepted")
            await response(scope, receive, send)
            return
        origin = headers.get(b"origin")
        if origin is not None and scope.get("method") not in _SAFE_METHODS:
            text = origin.decode("latin-1").strip()
            scheme, sep, authority = text.partition("://")
            own = sep and scheme.lower() in ("http", "https") and (
                authority.lower() == host.strip().lower() or _host_name(authority) in self.allowed_hosts)
            if not own:
                response = error_response(
                    403, "forbidden", f"cross-origin write refused: Origin {text!r} is not this server ({host})")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


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
