"""The API docs (/docs, /redoc) served offline from packaged files under the dashboard's
Content-Security-Policy, and HEAD on every GET route: real HTTP against a real uvicorn server.

The pages rendered in Chromium are in tests/test_dashboard_browser.py."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from api_live import LiveServer
from support import http_client

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app
from memlocal.config import Config

TOKEN = "docs-" + "5" * 24
DASHBOARD_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")


class _Refs(HTMLParser):
    """Every URL a page references (src, href and the spec URL data attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts = 0
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "data-openapi-url", "spec-url") and value:
                self.urls.append(value)
        self._in_script = tag == "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts += 1

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False


def _refs(html: str) -> _Refs:
    parser = _Refs()
    parser.feed(html)
    return parser


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[MemoryBank, httpx.Client]]:
    with MemoryBank(tmp_path / "d.db", config=Config.load(environ={})) as bank, \
            LiveServer(create_app(bank)) as server, http_client(base_url=server.url, timeout=30) as client:
        yield bank, client


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_pages_reference_no_external_url_and_their_assets_are_served(served: Any, path: str) -> None:
    _, c = served
    page = c.get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    refs = _refs(page.text)
    assert refs.inline_scripts == 0, "an inline script would need 'unsafe-inline'"
    assert refs.urls, page.text
    for url in refs.urls:
        if url.startswith("data:"):
            continue
        assert url.startswith("/") and not url.startswith("//"), f"{path} references {url}"
        asset = c.get(url)
        assert asset.status_code == 200 and asset.content, url
    assert not re.search(r"https?://", page.text)
    assert "/openapi.json" in refs.urls


def test_swagger_ui_has_the_dashboards_policy_and_redoc_adds_only_a_style_nonce(served: Any) -> None:
    _, c = served
    assert c.get("/docs").headers["content-security-policy"] == DASHBOARD_POLICY
    first, second = c.get("/redoc"), c.get("/redoc")
    policy = first.headers["content-security-policy"]
    nonce = re.search(r"'nonce-([A-Za-z0-9_-]+)'", policy)
    assert nonce and f'nonce="{nonce.group(1)}"' in first.text
    assert policy == DASHBOARD_POLICY.replace("style-src 'self'", f"style-src 'self' 'nonce-{nonce.group(1)}'") \
        + "; worker-src blob:"
    assert nonce.group(1) not in second.headers["content-security-policy"], "a fresh nonce per response"
    for r in (first, c.get("/docs")):
        assert r.headers["x-content-type-options"] == "nosniff"


def test_fastapis_cdn_pages_are_off(served: Any) -> None:
    _, c = served
    assert c.get("/docs/oauth2-redirect").status_code == 404
    assert "cdn.jsdelivr.net" not in c.get("/docs").text


def test_the_docs_need_the_token_like_the_schema(tmp_path: Path) -> None:
    with MemoryBank(tmp_path / "d.db", config=Config.load(environ={})) as bank, \
            LiveServer(create_app(bank, token=TOKEN)) as server, http_client(base_url=server.url) as c:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert c.get(path).status_code == 401
            assert c.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def _concrete(path: str, memory_id: str) -> str:
    return (path.replace("{name}", "ana").replace("{id}/memory", "nightly/memory").replace("{id}", memory_id))


def test_head_answers_every_get_route_like_get_without_a_body(served: Any) -> None:
    bank, c = served
    memory_id = bank.save(SaveRequest("ana", content="Ana prefers tea")).memory.id
    bank.automations.put("nightly", "stopped at page 3")
    gets = [path for path, ops in c.get("/openapi.json").json()["paths"].items() if "get" in ops]
    assert "/healthz" in gets and len(gets) >= 10
    for path in [*gets, "/", "/docs", "/redoc", "/openapi.json", "/dashboard/app.js", "/docs-assets/swagger-ui.css"]:
        url = _concrete(path, memory_id)
        params = {"q": "tea"} if url.endswith(("/search", "/injection-preview")) else {}
        got, head = c.get(url, params=params), c.head(url, params=params)
        assert got.status_code == 200, (url, got.text)
        assert head.status_code == 200, url
        assert head.content == b"", url
        if params:  # scores move with the clock between the two requests: lengths can differ
            assert head.headers["content-length"].isdigit(), url
        else:
            assert head.headers.get("content-length") == got.headers.get("content-length"), url
        assert head.headers["content-type"] == got.headers["content-type"], url


def test_head_keeps_errors_and_405_where_there_is_no_get(served: Any) -> None:
    _, c = served
    missing = c.head("/api/profiles/ana/memories/mem-00000000")
    assert missing.status_code == 404 and missing.content == b""
    assert c.head("/api/profiles/../x/memories").status_code in (400, 404)
    assert c.head("/api/automations/nightly").status_code == 405  # DELETE only
    assert c.head("/healthz").status_code == 200
