"""The dashboard and the API docs: static pages (HTML, CSS, plain JavaScript) that call the REST API.

``memlocal serve`` serves the dashboard at ``/`` from files shipped inside the package: no build
step, no CDN, nothing fetched from outside, so it works offline. The page and its assets hold no
data, so they are served without the API token; every ``/api`` call the page makes carries the
token as a bearer header (the page asks for it when the API answers 401). See docs/dashboard.md.

The API docs (Swagger UI at ``/docs``, ReDoc at ``/redoc``) are served the same way, under the
same Content-Security-Policy: their scripts and stylesheet come from the ``fastapi-offline``
package (which ships Swagger UI and ReDoc), and the few lines that start Swagger UI are a file
of ours (FastAPI's own pages load them from a CDN and start them with an inline script).
"""

from __future__ import annotations

import html
import secrets
from importlib.resources import files
from pathlib import Path
from typing import Final

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

ASSETS_DIR: Final = Path(__file__).parent / "static"
ASSETS_PREFIX: Final = "/dashboard/"
# Swagger UI's and ReDoc's files, as the fastapi-offline package ships them.
DOCS_ASSETS_DIR: Final = Path(str(files("fastapi_offline") / "static"))
DOCS_ASSETS_PREFIX: Final = "/docs-assets/"
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


_SWAGGER_PAGE: Final = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} - Swagger UI</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="{root}{docs}swagger-ui.css">
  <script src="{root}{docs}swagger-ui-bundle.js" defer></script>
  <script src="{root}{assets}docs.js" defer></script>
</head>
<body>
  <div id="swagger-ui" data-openapi-url="{root}{openapi}"></div>
  <noscript>The API docs need JavaScript. The schema is at <a href="{root}{openapi}">{openapi}</a>.</noscript>
</body>
</html>
"""

# ReDoc writes its styles into <style> elements (styled-components), which the policy allows only
# with this page's nonce: redoc.js hands the nonce (readable only by script) to ReDoc, which puts
# it on each style element it adds. Its search index runs in a worker built from a blob of its
# own code (worker-src blob:; creating one already takes a script the policy let in).
_REDOC_PAGE: Final = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} - ReDoc</title>
  <link rel="icon" href="data:,">
  <script src="{root}{docs}redoc.standalone.js" defer></script>
  <script src="{root}{assets}redoc.js" nonce="{nonce}" defer></script>
</head>
<body>
  <div id="redoc" data-openapi-url="{root}{openapi}"></div>
  <noscript>The API docs need JavaScript. The schema is at <a href="{root}{openapi}">{openapi}</a>.</noscript>
</body>
</html>
"""


def _docs_page(template: str, app: FastAPI, request: Request, *, style_nonce: bool = False) -> HTMLResponse:
    """A docs page under the dashboard's policy; ``style_nonce`` adds a fresh nonce that lets the
    page's own script add ``<style>`` elements, and blob workers (scripts stay ``'self'`` only)."""
    nonce = secrets.token_urlsafe(18) if style_nonce else ""
    root = html.escape(str(request.scope.get("root_path", "")))
    page = template.format(title=html.escape(app.title), root=root, docs=DOCS_ASSETS_PREFIX, nonce=nonce,
                           assets=ASSETS_PREFIX, openapi=html.escape(str(app.openapi_url)))
    headers = dict(_HEADERS)
    if nonce:
        headers["Content-Security-Policy"] = headers["Content-Security-Policy"].replace(
            "style-src 'self'", f"style-src 'self' 'nonce-{nonce}'") + "; worker-src blob:"
    return HTMLResponse(page, headers=headers)


def install(app: FastAPI) -> None:
    """Serve the dashboard's page at ``/`` and its assets under ``/dashboard/``, and the API
    docs at ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with their assets under ``/docs-assets/``.

    Build the app with ``docs_url=None, redoc_url=None`` so FastAPI's CDN pages stay off.
    """

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def dashboard() -> Response:
        return FileResponse(ASSETS_DIR / "index.html", media_type="text/html", headers=_HEADERS)

    @app.api_route("/docs", methods=["GET", "HEAD"], include_in_schema=False)
    def swagger_ui(request: Request) -> Response:
        return _docs_page(_SWAGGER_PAGE, app, request)

    @app.api_route("/redoc", methods=["GET", "HEAD"], include_in_schema=False)
    def redoc(request: Request) -> Response:
        return _docs_page(_REDOC_PAGE, app, request, style_nonce=True)

    app.mount(ASSETS_PREFIX.rstrip("/"), StaticFiles(directory=ASSETS_DIR), name="dashboard")
    app.mount(DOCS_ASSETS_PREFIX.rstrip("/"), StaticFiles(directory=DOCS_ASSETS_DIR), name="docs-assets")
