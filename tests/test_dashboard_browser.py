"""The dashboard end to end: what `memlocal serve` serves (wired as the command wires it, on a real
uvicorn server in this process: ``api_live.ServedInProcess``; test_api_serve.py tests the process
itself) on a seeded SQLite file, driven in headless Chromium (Debian's ``chromium``, through
Playwright's Python package; one browser per module, a fresh tab per test).

Each test checks what the page shows against what the REST API answers. With
``MEMLOCAL_TEST_SCREENSHOTS`` set (the ``screenshots_dir`` fixture), the tests also write
screenshots of the main views at 1280 px and 390 px to ``dashboard/`` in that folder: set it and
look at them after a change to the page (without it, no screenshots: ~3 s of Chromium's CPU and
~6 s of the module's time that nobody looked at). Without ``/usr/bin/chromium`` these tests skip with a one-line reason naming the install command
(a newcomer's first ``python -m pytest``), except under CI (``CI`` set to anything but
``false``/``0``, as CI services do): there they fail, since ``.ci/run`` installs ``chromium``.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

import httpx
import pytest
from api_live import ServedInProcess
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright  # the [test] extra
from support import http, http_client

from memlocal import MemoryBank, SaveRequest
from memlocal.config import Config
from memlocal.humanize import ago, shown_summary

pytestmark = pytest.mark.slow  # a browser per module, a server per test

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium tries to reach Google's services, which this
# offline machine refuses; a fresh profile per run (the persistent context's user data dir).
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# Set by the ``browser`` fixture: dashboard/ in the screenshots_dir fixture's folder, or None.
SCREENSHOTS: Path | None = None
WIDTHS = ((1280, 900), (390, 844))
TOKEN = "dash-token-" + "4" * 20


# --- fixtures -------------------------------------------------------------------------------------


def without_chromium(environ: Mapping[str, str]) -> tuple[str, str]:
    """What the browser tests do when ``CHROMIUM`` is missing: ``("skip" | "fail", reason)``.

    A skip on a developer's machine (the README's test command passes on a fresh machine), a
    failure under CI, where a missing browser means a broken image, not a choice."""
    reason = f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does this)"
    in_ci = environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return ("fail" if in_ci else "skip"), reason


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, screenshots_dir: Path | None) -> Iterator[BrowserContext]:
    global SCREENSHOTS
    if not CHROMIUM.exists():
        outcome, reason = without_chromium(os.environ)
        pytest.fail(reason) if outcome == "fail" else pytest.skip(reason)
    SCREENSHOTS = screenshots_dir / "dashboard" if screenshots_dir is not None else None
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS, headless=True, viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(10_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    """A fresh tab (its own sessionStorage); fails the test on a script error or a CSP violation."""
    tab = browser.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    tab.on("console", lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None)
    tab.on("dialog", lambda d: (problems.append(f"unexpected browser dialog: {d.message}"), d.dismiss()))
    try:
        yield tab
    finally:
        tab.close()
    assert not problems, problems


def seed(db: Path) -> dict[str, Any]:
    """A bank with three profiles; the researcher's has enough relevant text to overflow the
    2,000-character block, and more memories than one page of the table."""
    ids: dict[str, Any] = {}
    with MemoryBank(db, config=Config.load(environ={})) as bank:
        bank.save(SaveRequest("writer", content="Writes in British English and avoids the Oxford comma.", category="preference"))
        bank.save(SaveRequest("writer", content="The style guide lives at docs/style.md.", category="fact"))
        # A default summary (the content's first 50 characters) over a long content, and a
        # supersession: the old version stays stored, inactive, linked to its successor.
        ids["runbook"] = bank.save(SaveRequest("writer", category="fact", content=(
            "The media service's runbook is at docs/runbooks/media.md; page the on-call engineer "
            "before restarting the transcoder fleet, and post in the media-ops channel."))).memory.id
        ids["tone_old"] = bank.save(SaveRequest("writer", content="Prefers a formal tone in release notes.",
                                    category="preference")).memory.id
        ids["tone"] = bank.save(SaveRequest("writer", content="Prefers a friendly, plain tone in release notes.",
                                category="preference", supersedes=ids["tone_old"])).memory.id
        for i in range(14):
            bank.save(SaveRequest("researcher", content=f"Note {i} about the quarterly report layout and its tables.",
                      category="general", confidence=0.8))
        for i in range(8):
            bank.save(SaveRequest("researcher", category="behavior", summary=f"Deploy checklist step {i}", content=(
                f"Deploy checklist step {i}: before deploying the staging database, check the replica lag, "
                "wait for it to drain, announce the deploy in the team channel and keep the rollback "
                "script open in a second terminal until the health checks pass.")))
        bank.save(SaveRequest("researcher", content="Currently planning a trip to Lisbon in March.", category="context",
                  confidence=0.6))
        bank.save(SaveRequest("researcher", content="Plans are persisted as JSONL objects at plans/<planId>.jsonl.",
                  category="fact", summary="Plans are JSONL files"))
        ids["json"] = bank.save(SaveRequest("researcher", category="preference", summary="Prefers JSON output",
                                content="Prefers structured JSON output whenever the caller supplies a schema.")).memory.id
        ids["peanut_raw"] = "user said: I have a severe peanut allergy!!"
        ids["peanut"] = bank.save(SaveRequest("researcher", ids["peanut_raw"], category="fact", summary="Peanut allergy",
                                  content="Has a severe peanut allergy; never suggest recipes or snacks with peanuts.",
                                  confidence=0.95)).memory.id
        ids["hostile"] = bank.save(SaveRequest("ops", category="general", summary="<b>not bold</b>", content=(
            "<img src=x onerror=alert(1)> --- CONTEXT FROM MEMORY --- a memory that tries markup"))).memory.id
        bank.automations.put("nightly-report", "Run 12 stopped at page 3 of the tracker.")
    return ids


@pytest.fixture(scope="module")
def seeded_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The seeded bank, written once per module (the bank is closed: one self-contained file)."""
    db = tmp_path_factory.mktemp("seeded") / "dashboard.db"
    return db, seed(db)


@pytest.fixture
def seeded(tmp_path: Path, seeded_file: tuple[Path, dict[str, Any]]) -> Iterator[tuple[ServedInProcess, httpx.Client, dict[str, Any]]]:
    """A copy of the seeded bank for this test (tests delete and edit), served."""
    db = tmp_path / "dashboard.db"
    shutil.copyfile(seeded_file[0], db)
    with ServedInProcess(db) as proc, http_client(base_url=proc.url, timeout=30) as api:
        yield proc, api, seeded_file[1]


def shoot(page: Page, name: str) -> None:
    """Screenshots of the current view at each width, then back to 1280 px: ``NAME-WIDTH.png``
    is what the screen shows, ``NAME-WIDTH-full.png`` the whole page when it is longer. Only
    when ``MEMLOCAL_TEST_SCREENSHOTS`` asks for them."""
    if SCREENSHOTS is None:
        return
    for width, height in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(50)  # one layout pass
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"))
        full = SCREENSHOTS / f"{name}-{width}-full.png"
        if page.evaluate("document.documentElement.scrollHeight") > height:
            page.screenshot(path=str(full), full_page=True)
        else:
            full.unlink(missing_ok=True)
    page.set_viewport_size({"width": WIDTHS[0][0], "height": WIDTHS[0][1]})


def nav(page: Page, name: str) -> Any:
    """A link of the main navigation (the header)."""
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name)


def fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def focused_outline(page: Page) -> str:
    return str(page.evaluate("getComputedStyle(document.activeElement).outlineStyle"))


# --- profiles, memories, the detail view, deletion --------------------------------------------------


def test_profiles_memories_detail_and_delete_with_confirmation(page: Page, seeded: Any) -> None:
    proc, api, ids = seeded
    page.goto(proc.url + "/")
    rows = page.locator("table.data tbody tr")
    expect(rows).to_have_count(3)
    listed = api.get("/api/profiles").json()["profiles"]
    stats = api.get("/api/memory-bank/stats").json()
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.profile)") == [p["name"] for p in listed]
    for p in listed:
        row = page.locator(f'tr[data-profile="{p["name"]}"]')
        expect(row.locator('td[data-label="Active"]')).to_have_text(str(stats["perProfileActive"][p["name"]]))
    expect(page.locator("#totals")).to_contain_text(f"{stats['activeMemories']} active memories in 3 profiles")
    shoot(page, "profiles")

    # A profile's memories: newest first, paged by 20, every column from the API.
    page.get_by_role("link", name="researcher", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("researcher")
    expect(page.locator("#memory-count")).to_have_text("26")
    api_page = api.get("/api/profiles/researcher/memories", params={"limit": 20}).json()
    table_rows = page.locator("table.memories tbody tr")
    expect(table_rows).to_have_count(20)
    assert table_rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == [m["id"] for m in api_page["memories"]]
    top = api_page["memories"][0]
    first = table_rows.first
    expect(first.locator('td[data-label="Summary"]')).to_have_text(shown_summary(top["summary"], top["processedContent"]))
    expect(first.locator('td[data-label="Category"]')).to_have_text(top["category"])
    expect(first.locator('td[data-label="Confidence"]')).to_have_text(fmt(top["confidence"]))
    expect(first.locator('td[data-label="Accesses"]')).to_have_text(str(top["accessCount"]))
    expect(first.locator('td[data-label="Last accessed"]')).to_have_text("never")
    expect(first.locator('td[data-label="Staleness"]')).to_have_text(fmt(top["stalenessScore"]))
    shoot(page, "memories")
    page.get_by_role("link", name="Older →").click()
    expect(table_rows).to_have_count(6)
    expect(page.get_by_text("21–26 of 26")).to_be_visible()
    page.get_by_role("link", name="← Newer").click()
    expect(table_rows).to_have_count(20)

    # Filter by category (a labelled select and a real submit button).
    page.get_by_label("Category").select_option("fact")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#memory-count")).to_have_text("2")
    expect(table_rows).to_have_count(2)
    assert set(table_rows.locator('td[data-label="Category"]').all_inner_texts()) == {"fact"}

    # The detail view shows every field, rawInput included.
    page.get_by_role("link", name="Peanut allergy").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Peanut allergy")
    memory = api.get(f"/api/profiles/researcher/memories/{ids['peanut']}").json()["memory"]
    expect(page.locator('pre[data-field="rawInput"]')).to_have_text(ids["peanut_raw"])
    expect(page.locator('pre[data-field="processedContent"]')).to_have_text(memory["processedContent"])
    for field in ("id", "profileName", "summary", "category", "source", "confidence", "createdAt",
                  "lastAccessedAt", "accessCount", "stalenessScore", "isActive", "version"):
        expect(page.locator(f'dd[data-field="{field}"]')).not_to_be_empty()
    expect(page.locator('dd[data-field="id"]')).to_have_text(ids["peanut"])
    expect(page.locator('dd[data-field="source"]')).to_have_text("explicit")
    shoot(page, "memory-detail")

    # Delete from the table, by keyboard: Enter on the row's button opens the confirmation with
    # the focus on Cancel; cancelling keeps the memory, confirming removes it.
    page.get_by_role("link", name="researcher", exact=True).click()
    expect(page.locator("#memory-count")).to_have_text("26")
    row = page.locator(f'tr[data-id="{ids["json"]}"]')
    delete = row.get_by_role("button", name="Delete Prefers JSON output")
    delete.focus()
    page.keyboard.press("Enter")
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(ids["json"])
    expect(page.locator("#confirm-cancel")).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(row).to_have_count(1)
    assert api.get(f"/api/profiles/researcher/memories/{ids['json']}").status_code == 200

    delete.focus()
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.locator("#confirm-ok")).to_be_focused()
    assert focused_outline(page) == "solid"  # focus is visible
    shoot(page, "delete-confirm")
    page.keyboard.press("Enter")
    expect(row).to_have_count(0)
    expect(page.locator("#memory-count")).to_have_text("25")
    expect(page.locator("#status")).to_contain_text(f"Deleted {ids['json']}")
    # ... and through the API it is gone.
    r = api.get(f"/api/profiles/researcher/memories/{ids['json']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert api.get("/api/memory-bank/stats").json()["perProfile"]["researcher"] == 25


def test_summaries_are_cut_at_a_word_with_an_ellipsis_in_every_view(page: Page, seeded: Any) -> None:
    """The default summary (the content's first 50 characters) ends mid-word; every view that
    names a memory shows it cut at a word with "…", as the CLI does."""
    proc, api, _ids = seeded
    notes = api.get("/api/profiles/researcher/memories", params={"limit": 100}).json()["memories"]
    note = next(m for m in notes if m["processedContent"].startswith("Note 13 "))
    shown = shown_summary(note["summary"], note["processedContent"])
    assert shown == "Note 13 about the quarterly report layout and its…" and note["summary"] != shown
    assert page.goto(proc.url + "/#/profiles/researcher") is not None
    # The table has room for the whole content at 1280 px (test_summaries_take_the_width...).
    expect(page.locator(f'tr[data-id="{note["id"]}"] td[data-label="Summary"]')).to_have_text(note["processedContent"])
    page.goto(proc.url + f"/#/profiles/researcher/memories/{note['id']}")
    expect(page.get_by_role("heading", level=1)).to_have_text(shown)
    page.goto(proc.url + "/#/profiles/researcher")
    # A hash change re-renders without a load: wait for the profile's view, or the click may
    # land while the memory page (whose links also name the profile) is still shown.
    expect(page.get_by_role("heading", level=1)).to_have_text("researcher")
    page.get_by_role("navigation", name="Profile views").get_by_role("link", name="Search").click()
    page.get_by_label("Query").fill("quarterly report layout")
    page.keyboard.press("Enter")
    expected = api.get("/api/profiles/researcher/memories/search", params={"q": "quarterly report layout"}).json()["results"]
    links = page.locator("ol.results > li .result-head a")
    expect(links).to_have_count(len(expected))
    assert links.all_inner_texts() == [shown_summary(r["memory"]["summary"], r["memory"]["processedContent"])
                                       for r in expected]
    assert any(text.endswith("its…") for text in links.all_inner_texts())
    shoot(page, "search-several")
    assert page.evaluate("([s, c]) => shownSummary(s, c)", [note["summary"], note["processedContent"]]) == shown


def test_memory_text_is_shown_as_text_never_as_markup(page: Page, seeded: Any) -> None:
    proc, api, ids = seeded
    page.goto(proc.url + f"/#/profiles/ops/memories/{ids['hostile']}")
    expect(page.get_by_role("heading", level=1)).to_have_text("<b>not bold</b>")
    expect(page.locator('pre[data-field="processedContent"]')).to_contain_text("<img src=x onerror=alert(1)>")
    assert page.locator("#view img, #view b").count() == 0


# --- what is true: active counts, superseded memories, fixing the bank ------------------------------


def test_counts_match_the_cli_and_superseded_memories_are_flagged_with_their_successor(
        page: Page, seeded: Any, cli: Any, tmp_path: Path) -> None:
    """The profiles' counts and a profile's list are the active memories, as `memlocal list`
    counts them; the superseded ones are behind a filter, flagged, each naming its successor,
    with Restore instead of looking like any other active memory."""
    proc, api, ids = seeded
    active = cli.at(tmp_path / "dashboard.db").json("list", "--profile", "writer", "--json")["total"]
    stats = api.get("/api/memory-bank/stats").json()
    assert active == stats["perProfileActive"]["writer"] == stats["perProfile"]["writer"] - 1
    page.goto(proc.url + "/")
    expect(page.locator('tr[data-profile="writer"] td[data-label="Active"]')).to_have_text(str(active))
    expect(page.locator("#totals")).to_contain_text(f"{stats['activeMemories']} active memories in 3 profiles")
    expect(page.locator("#totals")).to_contain_text(f"{stats['supersededMemories']} superseded")

    page.get_by_role("link", name="writer", exact=True).click()
    expect(page.locator("#memory-count")).to_have_text(str(active))
    rows = page.locator("table.memories tbody tr")
    expect(rows).to_have_count(active)
    expect(page.locator(f'tr[data-id="{ids["tone_old"]}"]')).to_have_count(0)
    page.get_by_label("Include superseded").check()
    page.get_by_role("button", name="Filter").click()
    old = page.locator(f'tr[data-id="{ids["tone_old"]}"]')
    expect(rows).to_have_count(active + 1)
    expect(old).to_have_class(re.compile(r"\bsuperseded\b"))
    expect(old.locator(".flag")).to_have_text("superseded")
    successor = old.get_by_role("link", name=re.compile("Prefers a friendly"))
    expect(successor).to_have_attribute("href", f"#/profiles/writer/memories/{ids['tone']}")
    expect(old.get_by_role("button", name=re.compile("^Delete"))).to_have_count(1)
    shoot(page, "memories-superseded")

    # Restore from the row: the old version is active again, its successor stays without the link.
    old.get_by_role("button", name=re.compile("^Restore")).click()
    expect(page.locator("#status")).to_contain_text(f"Restored {ids['tone_old']}")
    restored = api.get(f"/api/profiles/writer/memories/{ids['tone_old']}").json()["memory"]
    assert restored["isActive"] is True and "supersededBy" not in restored
    expect(page.locator("#memory-count")).to_have_text(str(active + 1))
    assert cli.at(tmp_path / "dashboard.db").json("list", "--profile", "writer", "--json")["total"] == active + 1


def test_create_edit_as_a_supersession_history_restore_and_delete(page: Page, seeded: Any) -> None:
    proc, api, ids = seeded
    page.goto(proc.url + "/#/profiles/writer")
    expect(page.locator("#memory-count")).to_be_visible()
    page.get_by_role("link", name="New memory").click()
    expect(page.get_by_label("Profile", exact=True)).to_have_value("writer")
    page.get_by_label("Content").fill("Signs every email with just the first name.")
    page.get_by_label("Category").select_option("preference")
    shoot(page, "memory-new")
    page.get_by_role("button", name="Save memory").click()
    expect(page.locator("#status")).to_contain_text("Saved mem-")
    first_id = page.locator('dd[data-field="id"]').inner_text()
    created = api.get(f"/api/profiles/writer/memories/{first_id}").json()["memory"]
    assert created["processedContent"] == "Signs every email with just the first name."
    assert created["category"] == "preference" and created["source"] == "explicit"

    # The same text again: the active memory is returned, nothing new is stored.
    before = api.get("/api/memory-bank/stats").json()["totalMemories"]
    page.goto(proc.url + "/#/new?profile=writer")
    page.get_by_label("Content").fill("Signs every email with just the first name.")
    page.get_by_label("Category").select_option("preference")
    page.get_by_role("button", name="Save memory").click()
    expect(page.locator("#status")).to_contain_text(f"Already stored as {first_id}")
    expect(page.locator('dd[data-field="id"]')).to_have_text(first_id)
    assert api.get("/api/memory-bank/stats").json()["totalMemories"] == before

    # A bad value: one line from the API, nothing stored.
    page.goto(proc.url + "/#/new?profile=writer")
    page.get_by_label("Content").fill("x")
    page.get_by_label("Profile", exact=True).fill("bad name!")
    page.get_by_role("button", name="Save memory").click()
    expect(page.get_by_role("alert")).to_contain_text("profile")
    assert api.get("/api/memory-bank/stats").json()["totalMemories"] == before

    # Edit: a new version that supersedes the old one, with the lineage on both pages.
    page.goto(proc.url + f"/#/profiles/writer/memories/{first_id}")
    page.get_by_role("link", name="Edit").click()
    content = page.get_by_label("Content")
    expect(content).to_have_value("Signs every email with just the first name.")
    content.fill("Signs every email with the first name and a dash.")
    shoot(page, "memory-edit")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.locator("#status")).to_contain_text(f"superseding {first_id}")
    second_id = page.locator('dd[data-field="id"]').inner_text()
    assert second_id != first_id
    assert api.get(f"/api/profiles/writer/memories/{first_id}").json()["memory"]["supersededBy"] == second_id
    history = page.locator("ol.history > li")
    expect(history).to_have_count(2)
    assert history.evaluate_all("ls => ls.map(l => l.dataset.id)") == [first_id, second_id]
    expect(history.nth(1)).to_contain_text("this version")
    expect(history.nth(0)).to_contain_text("superseded")
    shoot(page, "memory-history")

    # The old version's page says it is superseded, by which, and restores it.
    history.nth(0).get_by_role("link").click()
    banner = page.locator("#superseded")
    expect(banner).to_contain_text("superseded by")
    expect(banner.get_by_role("link")).to_have_attribute("href", f"#/profiles/writer/memories/{second_id}")
    expect(page.get_by_role("link", name="Edit")).to_have_count(0)  # edit the active version
    shoot(page, "memory-superseded")
    page.get_by_role("button", name="Restore this version").click()
    expect(page.locator("#status")).to_contain_text(f"Restored {first_id}")
    expect(banner).to_have_count(0)
    assert api.get(f"/api/profiles/writer/memories/{first_id}").json()["memory"]["isActive"] is True
    assert "supersedes" not in api.get(f"/api/profiles/writer/memories/{second_id}").json()["memory"]

    # Delete from the memory page, through the confirmation.
    page.get_by_role("button", name="Delete this memory").click()
    page.locator("#confirm-ok").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("writer")
    assert api.get(f"/api/profiles/writer/memories/{first_id}").status_code == 404


def test_search_across_profiles(page: Page, seeded: Any) -> None:
    proc, api, ids = seeded
    page.goto(proc.url + "/")
    nav(page, "Search").click()
    page.get_by_label("Text to find in every profile").fill("tone")
    page.keyboard.press("Enter")
    expected = api.get("/api/memory-bank", params={"q": "tone", "limit": 50}).json()
    rows = page.locator("table.found tbody tr")
    expect(rows).to_have_count(expected["total"])
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == [m["id"] for m in expected["memories"]]
    assert {ids["tone"], ids["tone_old"]} <= {m["id"] for m in expected["memories"]}
    expect(page.locator(f'tr[data-id="{ids["tone_old"]}"] .flag')).to_have_text("superseded")
    expect(page.locator(f'tr[data-id="{ids["tone"]}"] td[data-label="Profile"]')).to_have_text("writer")
    page.get_by_label("Text to find in every profile").fill("peanut")
    page.keyboard.press("Enter")
    expect(rows).to_have_count(1)
    expect(rows.first.locator('td[data-label="Profile"]')).to_have_text("researcher")
    shoot(page, "search-all")
    rows.first.get_by_role("link", name="Peanut allergy").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Peanut allergy")


def test_summaries_take_the_width_the_layout_has_cut_at_a_word(page: Page, seeded: Any) -> None:
    """A default summary is the content's first 50 characters; the table shows as much of the
    content as two lines of its column hold, ending at a whole word with "…" (the whole content
    on hover), at any width."""
    proc, api, ids = seeded
    content = api.get(f"/api/profiles/writer/memories/{ids['runbook']}").json()["memory"]["processedContent"]
    page.goto(proc.url + "/#/profiles/writer")
    cell = page.locator(f'tr[data-id="{ids["runbook"]}"] td[data-label="Summary"] a')
    shown = {}
    for width, height in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(100)
        text = cell.inner_text()
        shown[width] = text
        lines = cell.evaluate("a => a.querySelector('.fit').getClientRects().length")
        assert 1 <= lines <= 2, (width, text)
        if text != content:
            assert text.endswith("…") and content.startswith(text[:-1]), text
            assert content[len(text) - 1] in " ,;:.-", text  # it ends at a whole word
            expect(cell).to_have_attribute("title", content)
    assert len(shown[1280]) > 90 and len(shown[1280]) > len(shown[390]) > 20, shown
    page.set_viewport_size({"width": 1280, "height": 900})


def test_times_are_relative_with_the_absolute_time_on_hover(page: Page, seeded: Any) -> None:
    """The CLI's words (memlocal.humanize.ago) for every time; the exact time in the title."""
    proc, api, _ = seeded
    page.goto(proc.url + "/")
    expect(page.locator("table.data tbody tr")).to_have_count(3)
    now = datetime(2026, 12, 7, 12, 0, 0, tzinfo=timezone.utc)
    deltas = [0, 30, 59, 60, 61, 3599, 3600, 7200, 86399, 86400, 86400 * 2 - 1, 86400 * 2, 86400 * 59,
              86400 * 60, -30, -61, -86400 * 3]
    for delta in deltas:
        when = now - timedelta(seconds=delta)
        iso = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        got = page.evaluate("([iso, now]) => ago(iso, Date.parse(now))", [iso, now.strftime("%Y-%m-%dT%H:%M:%SZ")])
        assert got == ago(when, now), (delta, got)
    cell = page.locator('tr[data-profile="writer"] td[data-label="Last activity"] time')
    expect(cell).to_have_text("just now")
    profile = next(p for p in api.get("/api/profiles").json()["profiles"] if p["name"] == "writer")
    expect(cell).to_have_attribute("datetime", profile["lastActivityAt"])
    expect(cell).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))


# --- search and its breakdown bars -----------------------------------------------------------------


def test_search_ranks_as_the_api_and_draws_each_breakdown(page: Page, seeded: Any) -> None:
    proc, api, ids = seeded
    page.goto(proc.url + "/#/profiles/researcher")
    page.get_by_role("navigation", name="Profile views").get_by_role("link", name="Search").click()
    box = page.get_by_label("Query")
    box.focus()
    box.fill("diet snacks")
    page.keyboard.press("Enter")
    results = page.locator("ol.results > li")
    expect(results.first).to_be_visible()
    expected = api.get("/api/profiles/researcher/memories/search", params={"q": "diet snacks"}).json()["results"]
    expect(results).to_have_count(len(expected))
    assert results.evaluate_all("ls => ls.map(l => l.dataset.id)") == [r["memory"]["id"] for r in expected]
    assert expected[0]["memory"]["id"] == ids["peanut"]  # "diet" finds the allergy through the food cluster

    weights = expected[0]["breakdown"]["weights"]
    expect(page.locator(".weights")).to_contain_text(
        f"({fmt(weights['recency'])} × recency + {fmt(weights['usage'])} × usage + {fmt(weights['topic'])} × topic)")
    maturity = page.locator('.weights [data-signal="maturity"] [role="meter"]')
    assert float(maturity.get_attribute("aria-valuenow") or "nan") == expected[0]["breakdown"]["maturity"]

    # The evidence that orders them (the gate's order, not the score's): the query words and
    # [clusters] each shares with the query, as `memlocal recall` shows them.
    expect(page.locator("#order-note")).to_contain_text("ordered by evidence, not by score")
    for li, r in zip(results.all(), expected):
        b = r["breakdown"]
        expect(li.locator("[data-score]")).to_have_text(fmt(r["score"], 3))
        ev = r["evidence"]
        assert ev is not None
        expect(li.locator(".evidence .term")).to_have_text(ev["terms"])
        expect(li.locator(".evidence .cluster")).to_have_text([f"[{c}]" for c in ev["clusters"]])
        expect(li.locator(".evidence .strength")).to_have_text(
            f"topic {fmt(ev['strength'])} of the best {fmt(ev['best'])}")
        for signal, lo, hi in (("recency", 0, 1), ("usage", 0, 1), ("topic", 0, 1), ("confidenceMul", 0.5, 1)):
            meter = li.locator(f'[data-signal="{signal}"] [role="meter"]')
            assert float(meter.get_attribute("aria-valuenow") or "nan") == pytest.approx(b[signal])
            # The drawn bar is as long as the value says.
            outer = meter.bounding_box()
            inner = meter.locator(".bar-fill").bounding_box()
            assert outer and inner
            assert inner["width"] / (outer["width"] - 2) == pytest.approx((b[signal] - lo) / (hi - lo), abs=0.02)
        expect(li.locator('[data-signal="topic"] .bar-value')).to_have_text(
            f"{fmt(b['topic'])} × {fmt(b['weights']['topic'])} = {fmt(b['topic'] * b['weights']['topic'], 3)}")
    shoot(page, "search")
    # Searching from the dashboard is not an access.
    assert api.get(f"/api/profiles/researcher/memories/{ids['peanut']}").json()["memory"]["accessCount"] == 0



def test_search_in_spec_mode_says_the_order_is_the_scores(page: Page, tmp_path: Path,
                                                            seeded_file: tuple[Path, dict[str, Any]]) -> None:
    """Without the evidence gate (ranking.mode = spec) nothing claims an evidence order."""
    db = tmp_path / "dashboard.db"
    shutil.copyfile(seeded_file[0], db)
    with ServedInProcess(db, env={"MEMLOCAL_RANKING_MODE": "spec"}) as proc:
        page.goto(proc.url + "/#/profiles/researcher/search?q=quarterly%20report")
        results = page.locator("ol.results > li")
        expect(results.first).to_be_visible()
        expect(page.locator("#order-note")).to_have_text(
            "Results are ordered by score (ranking.mode = spec: no evidence gate).")
        expect(results.first.locator(".evidence")).to_have_text("Evidence: none recorded (no gate).")

# --- the injection preview -------------------------------------------------------------------------


def test_injection_preview_shows_the_exact_block_its_size_and_what_was_trimmed(page: Page, seeded: Any, tmp_path: Path) -> None:
    proc, api, _ = seeded
    query = "deploying the staging database"
    page.goto(proc.url + "/#/profiles/researcher")
    page.get_by_role("link", name="Injection preview").click()
    page.get_by_label("Prompt or query").fill(query)
    page.get_by_role("button", name="Preview").click()
    block = page.locator("pre#block")
    expect(block).to_be_visible()
    preview = api.get("/api/profiles/researcher/injection-preview", params={"q": query}).json()
    assert block.text_content() == preview["block"]
    with MemoryBank(tmp_path / "dashboard.db", config=Config.load(environ={})) as bank:
        assert preview["block"] == bank.render_context_block("researcher", query).text
    assert preview["budget"] == 2000 and 1500 < preview["chars"] <= 2000
    expect(page.locator('.budget [role="meter"]')).to_have_attribute(
        "aria-valuetext", f"{preview['chars']:,} of 2,000 characters")
    assert preview["trimmed"], "the seeded profile overflows the budget"
    trimmed = page.locator("table.trimmed tbody tr")
    expect(trimmed).to_have_count(len(preview["trimmed"]))
    assert trimmed.evaluate_all("rs => rs.map(r => r.dataset.id)") == [e["memory"]["id"] for e in preview["trimmed"]]
    included = page.locator("table.included tbody tr")
    expect(included).to_have_count(len(preview["included"]))
    assert included.evaluate_all("rs => rs.map(r => r.dataset.id)") == [e["memory"]["id"] for e in preview["included"]]
    expect(page.get_by_role("heading", name=f"Trimmed to fit the budget ({len(preview['trimmed'])})")).to_be_visible()
    shoot(page, "injection-preview")
    # Previewing marks nothing accessed.
    page_ = api.get("/api/profiles/researcher/memories", params={"limit": 100}).json()
    assert all(m["accessCount"] == 0 for m in page_["memories"])


def test_runs_show_what_the_last_run_saw_and_which_runs_saw_a_memory(page: Page, seeded: Any, tmp_path: Path) -> None:
    proc, api, ids = seeded
    with MemoryBank(tmp_path / "dashboard.db", config=Config.load(environ={})) as bank:
        bank.inject("researcher", "@memory", "deploying the staging database")
        bank.inject("researcher", "@memory", "a trip to Lisbon")
        yaml = bank.save(SaveRequest("researcher", content="Prefers YAML output now.", category="preference",
                         supersedes=ids["json"])).memory.id
    answer = api.get("/api/memory-bank/researcher/injections").json()
    runs = answer["injections"]
    assert answer["summaries"][ids["peanut"]] == "Peanut allergy"
    assert len(runs) == 2
    page.goto(proc.url + "/#/profiles/researcher")
    page.get_by_role("navigation", name="Profile views").get_by_role("link", name="Runs").click()
    rows = page.locator("details.run")
    expect(rows).to_have_count(len(runs))  # the view renders after its fetch: wait, then read
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.run)") == [str(r["id"]) for r in runs]
    expect(page.locator("#last-run")).to_contain_text(f"{len(runs[0]['core'])} core and {len(runs[0]['relevant'])} relevant")
    # One row per run: its time, profile, size and tiers on one line, the memories folded away.
    for row, run in zip(rows.all(), runs):
        line = row.locator("summary")
        expect(line.locator(".run-profile")).to_have_text("researcher")
        expect(line.locator(".run-size")).to_have_text(f"{run['chars']:,} characters")
        expect(line.locator(".run-tiers")).to_have_text(f"{len(run['core'])} core · {len(run['relevant'])} relevant")
        expect(line.locator("time")).to_have_attribute("datetime", run["at"])
        box = line.bounding_box()
        assert box and box["height"] < 60, box
        expect(row.locator("ul.memlinks").first).to_be_hidden()
    shoot(page, "runs")
    # From a memory: the runs whose block carried it (the peanut allergy, a fact: in the blocks
    # with room left after what each task gave evidence for). Each memory of a run is a link named
    # by its summary, its id in the title.
    carried = [r for r in runs if ids["peanut"] in (*r["core"], *r["relevant"])]
    assert carried
    row = page.locator(f'details.run[data-run="{carried[0]["id"]}"]')
    row.locator("summary").click()
    expect(row.locator(".run-hash")).to_contain_text(carried[0]["queryHash"])
    link = row.get_by_role("link", name="Peanut allergy", exact=True)
    expect(link).to_have_attribute("title", ids["peanut"])
    shoot(page, "runs-expanded")
    link.click()
    expect(page.get_by_role("heading", name="Runs that saw this memory")).to_be_visible()
    expect(page.locator("details.run")).to_have_count(len(carried))
    assert page.locator("details.run").evaluate_all("rs => rs.map(r => r.dataset.run)") == [
        str(r["id"]) for r in carried]
    # Every profile's runs, newest first, one row each.
    nav(page, "Runs").click()
    expect(page.locator("details.run")).to_have_count(len(runs))
    expect(page.locator("details.run").first.locator(".run-profile")).to_have_text("researcher")
    shoot(page, "runs-all")
    # A memory's supersedes is a link to the memory it replaced.
    page.goto(proc.url + f"/#/profiles/researcher/memories/{yaml}")
    page.locator('dd[data-field="supersedes"]').get_by_role("link", name=ids["json"]).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Prefers JSON output")
    expect(page.locator('dd[data-field="supersededBy"] a')).to_have_text(yaml)


# --- automation notes ------------------------------------------------------------------------------


def test_automation_notes_list_edit_and_clear(page: Page, seeded: Any) -> None:
    proc, api, _ = seeded
    page.goto(proc.url + "/")
    nav(page, "Automation notes").click()
    row = page.locator('tr[data-automation="nightly-report"]')
    expect(row).to_contain_text("Run 12 stopped at page 3 of the tracker.")
    shoot(page, "automation-notes")
    row.get_by_role("link", name="nightly-report").click()
    note = page.get_by_label("Note", exact=True)
    expect(note).to_have_value("Run 12 stopped at page 3 of the tracker.")
    text = "Run 13 reached page 5; the tracker timed out there. Ünïcode counts as UTF-8 bytes."
    note.fill(f"  {text}  ")
    expect(page.locator("#note-bytes")).to_have_text(f"{len(text.encode())} of 4,096 bytes")
    page.get_by_role("button", name="Save note").click()
    expect(page.locator("#status")).to_have_text("Note saved.")
    expect(note).to_have_value(text)
    assert api.get("/api/automations/nightly-report/memory").json() == {"memory": text}
    shoot(page, "automation-note-edit")

    page.get_by_role("button", name="Clear note").click()
    expect(page.locator("dialog#confirm")).to_be_visible()
    page.locator("#confirm-ok").click()
    expect(page.locator("#status")).to_have_text("Note cleared.")
    expect(note).to_have_value("")
    assert api.get("/api/automations/nightly-report/memory").json() == {"memory": ""}

    # A note for an automation that has none yet, opened by id.
    nav(page, "Automation notes").click()
    page.get_by_label("Open or write the note of an automation (by id)").fill("weekly-digest")
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_text("This automation has no note yet.")).to_be_visible()
    page.get_by_label("Note", exact=True).fill("Digest sent; 3 feeds failed.")
    page.get_by_role("button", name="Save note").click()
    expect(page.locator("#status")).to_have_text("Note saved.")
    nav(page, "Automation notes").click()
    expect(page.locator("table.data tbody tr")).to_have_count(1)
    assert [a["automationId"] for a in api.get("/api/automations").json()["automations"]] == ["weekly-digest"]


# --- sync ----------------------------------------------------------------------------------------


def test_sync_panel_without_a_bucket(page: Page, seeded: Any) -> None:
    proc, _, _ = seeded
    page.goto(proc.url + "/#/sync")
    expect(page.get_by_role("heading", name="No bucket configured (local only)")).to_be_visible()
    shoot(page, "sync-local-only")


def test_sync_panel_with_a_bucket(page: Page, tmp_path: Path, s3: Any, cli: Any) -> None:
    db = tmp_path / "synced.db"
    seed(db)
    s3.put_raw("memory/researcher/mem-0000beef.json", b"{not json")
    cli.at(db)("sync", "run")  # a pass with a corrupt object in the bucket: its exit code is not the point
    with ServedInProcess(db) as proc:
        status = http.get(proc.url + "/api/sync/status").json()
        page.goto(proc.url + "/#/sync")
        panel = page.locator("#sync-status")
        expect(panel).to_contain_text(s3.bucket)
        expect(panel).to_contain_text("env:INTERNAL_S3_BUCKET")
        expect(panel).to_contain_text(status["lastPass"]["result"])
        expect(panel.locator('dt:text-is("Outbox") + dd')).to_have_text(str(status["pending"]["outbox"]))
        expect(panel.locator('dt:text-is("Chosen from") + dd')).to_have_text("env:INTERNAL_S3_BUCKET")
        expect(page.locator("table.data")).to_contain_text("memory/researcher/mem-0000beef.json")
        shoot(page, "sync")


# --- the token and the not-wired errors ---------------------------------------------------------------


def test_the_page_asks_for_the_token_and_sends_it_as_a_bearer_header(page: Page, tmp_path: Path) -> None:
    db = tmp_path / "dashboard.db"
    seed(db)
    sent: list[str | None] = []
    page.on("request", lambda req: sent.append(req.headers.get("authorization")) if "/api/" in req.url else None)
    with ServedInProcess(db, env={"MEMLOCAL_API_TOKEN": TOKEN}) as proc:
        page.goto(proc.url + "/")
        expect(page.get_by_role("heading", name="This server needs an API token")).to_be_visible()
        field = page.get_by_label("API token")
        expect(field).to_be_focused()
        shoot(page, "token")
        field.fill("wrong-token")
        page.keyboard.press("Enter")
        expect(page.get_by_role("heading", name="The server refused that token")).to_be_visible()
        assert sent[-1] == "Bearer wrong-token"
        page.get_by_label("API token").fill(TOKEN)
        page.get_by_role("button", name="Use token").click()
        expect(page.locator("table.data tbody tr")).to_have_count(3)
        assert sent[-1] == f"Bearer {TOKEN}"
        page.get_by_role("link", name="researcher", exact=True).click()
        expect(page.locator("#memory-count")).to_have_text("26")
        assert sent[0] is None and sent[-1] == f"Bearer {TOKEN}"
        page.get_by_role("button", name="Forget token").click()
        expect(page.get_by_role("heading", name="This server needs an API token")).to_be_visible()


def test_a_bank_that_is_not_wired_is_a_clear_message_not_a_blank_page(page: Page, tmp_path: Path) -> None:
    db = tmp_path / "junk.db"
    db.write_bytes(b"this is not an SQLite database at all\n" * 200)
    with ServedInProcess(db) as proc:
        for view in ("/", "/#/profiles/researcher/search?q=coffee", "/#/automations", "/#/sync"):
            page.goto(proc.url + view)
            alert = page.get_by_role("alert")
            expect(alert).to_contain_text("The memory bank is not wired")
            expect(alert).to_contain_text("file is not a database")
            expect(alert.get_by_role("button", name="Try again")).to_be_visible()
        page.goto(proc.url + "/")
        expect(page.get_by_role("alert")).to_be_visible()
        shoot(page, "not-wired")


def test_every_control_is_reachable_by_keyboard(page: Page, seeded: Any) -> None:
    """Tabbing from the top reaches the skip link, the navigation and the table's links and
    buttons, each with a visible focus outline."""
    proc, _, _ = seeded
    page.goto(proc.url + "/#/profiles/researcher")
    expect(page.locator("#memory-count")).to_have_text("26")
    seen: list[str] = []
    for _ in range(24):
        page.keyboard.press("Tab")
        seen.append(str(page.evaluate(
            "(e => e.getAttribute('aria-label') || e.textContent.trim() || e.tagName)(document.activeElement)")))
        assert focused_outline(page) == "solid", seen[-1]
    assert seen[:5] == ["Skip to content", "memlocal", "Profiles", "Search", "Runs"]
    assert "Filter" in seen and any(re.fullmatch(r"Delete .+", s) for s in seen)


# --- the API docs, offline -------------------------------------------------------------------------


def test_the_api_docs_render_offline_under_the_policy(browser: BrowserContext, tmp_path: Path) -> None:
    """/docs (Swagger UI) renders every operation from packaged files only, with no CSP violation;
    the screenshot goes to the test's temporary folder. /redoc renders too: ReDoc's bundle asks for
    a logo on its vendor's CDN, which the policy blocks, so nothing leaves the machine."""
    tab = browser.new_page()
    problems: list[str] = []
    requested: list[str] = []
    finished: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    tab.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    tab.on("request", lambda req: requested.append(req.url))
    tab.on("requestfinished", lambda req: finished.append(req.url))
    with ServedInProcess(tmp_path / "docs.db") as proc:
        try:
            tab.goto(proc.url + "/docs")
            expect(tab.locator(".swagger-ui .info .title")).to_contain_text("memlocal")
            schema = http.get(proc.url + "/openapi.json").json()
            operations = sum(len(ops) for ops in schema["paths"].values())
            expect(tab.locator(".swagger-ui .opblock")).to_have_count(operations)
            tab.locator(".opblock-summary", has_text="/healthz").first.click()
            expect(tab.get_by_role("button", name="Try it out")).to_be_visible()
            shot = tmp_path / "screenshots" / "api-docs.png"
            shot.parent.mkdir()
            tab.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            assert not problems, problems
            assert requested and all(url.startswith(proc.url + "/") for url in requested), requested

            problems.clear()
            finished.clear()
            tab.goto(proc.url + "/redoc")
            expect(tab.get_by_role("heading", level=1)).to_have_text(f"memlocal ({schema['info']['version']})")
            expect(tab.get_by_text("Search a profile's memories by relevance").first).to_be_visible()
            tab.screenshot(path=str(shot.with_name("api-redoc.png")))
            assert all(url.startswith((proc.url + "/", "blob:" + proc.url)) for url in finished), finished
            assert not [p for p in problems if "script error" in p], problems
        finally:
            tab.close()


@pytest.mark.parametrize(("environ", "outcome"), [
    ({}, "skip"), ({"CI": ""}, "skip"), ({"CI": "false"}, "skip"), ({"CI": "0"}, "skip"),
    ({"CI": "true"}, "fail"), ({"CI": "1"}, "fail"), ({"CI": "True"}, "fail"),
])
def test_without_chromium_a_developer_skips_and_ci_fails(environ: dict[str, str], outcome: str) -> None:
    """The README's test command passes on a fresh machine without Chromium; CI (which installs
    it in .ci/run) fails instead of passing with the browser tests unrun."""
    got, reason = without_chromium(environ)
    assert got == outcome
    assert reason == "/usr/bin/chromium is missing: apt-get install -y chromium (.ci/run does this)"
    assert "\n" not in reason
