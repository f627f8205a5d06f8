"""The dashboard: one static page (HTML, CSS, plain JavaScript) that calls the REST API.

``memlocal serve`` serves it at ``/`` from files shipped inside the package: no build step, no
CDN, nothing fetched from outside, so it works offline. The page and its assets hold no data,
so they are served without the API token; every ``/api`` call the page makes carries the token
as a bearer header (the page asks for it when the API answers 401). See docs/dashboard.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

ASSETS_DIR: Final = Path(__file__).parent / "static"
ASSETS_PREFIX: Final = "/dashboard/"
# Paths the bearer-token check lets through (GET/HEAD only): the page and its static assets.
PUBLIC_PATHS: Final = frozenset({"/"})
PUBLIC_PREFIXES: Final = (ASSETS_PREFIX,)

# The page loads only its own files and talks only to this server; nothing inline, no eval.
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def install(app: FastAPI) -> None:
    """Serve the dashboard's page at ``/`` and its assets under ``/dashboard/``."""

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def dashboard() -> Response:
        return FileResponse(ASSETS_DIR / "index.html", media_type="text/html", headers=_HEADERS)

    app.mount(ASSETS_PREFIX.rstrip("/"), StaticFiles(directory=ASSETS_DIR), name="dashboard")
