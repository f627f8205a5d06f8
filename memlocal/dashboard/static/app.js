// The memlocal dashboard: one page, plain JavaScript, no build step and no dependencies.
// Every view is drawn from the REST API (docs/rest.md); data is written into the page with
// textContent only, never as HTML, so a memory's text cannot inject markup.
"use strict";

const CATEGORIES = ["preference", "fact", "behavior", "context", "general"];
const TOKEN_KEY = "memlocal.apiToken";
const PAGE_SIZE = 20;
const NOTE_MAX_BYTES = 4096;
const ZERO_TIME = "0001-01-01";

// --- words ----------------------------------------------------------------------------------------

/** A memory's summary as every face shows it (memlocal.humanize.shown_summary, tested to agree):
 * the default summary (the content's first 50 characters) ends after its last whole word with
 * "…" when the content goes on, never mid-word; a summary of its own is shown as it is. */
function shownSummary(summary, content) {
  const folded = String(content || "").split(/\s+/).filter(Boolean).join(" ");
  summary = String(summary || "");
  if (folded.length > summary.length && folded.startsWith(summary) && !summary.endsWith("…")) {
    let cut = summary;
    if (!/\s/.test(folded[summary.length]) && !/\s$/.test(summary)) {
      const space = cut.lastIndexOf(" "); // the summary ends inside a word: end at the word before it
      if (space >= Math.floor(cut.length / 2)) cut = cut.slice(0, space);
    }
    return cut.replace(/[ ,;:.\-]+$/, "") + "…";
  }
  return summary;
}

/** How a memory is named in links and headings: its shown summary, else its id. */
function memoryName(m) {
  return shownSummary(m.summary, m.processedContent) || m.id;
}

// --- the REST API ------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/** Call the API; resolves to the JSON answer (null for 204), rejects with an ApiError. */
async function api(method, path, { query, json, text } = {}) {
  const url = new URL(path, location.origin);
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (text !== undefined) {
    headers["Content-Type"] = "text/plain; charset=utf-8";
    body = text;
  }
  let response;
  try {
    response = await fetch(url, { method, headers, body, cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, "unreachable", "Cannot reach the memlocal server (" + err.message + "). Is `memlocal serve` still running?");
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || "http_error", error.message || "HTTP " + response.status);
  }
  return data;
}

const profilePath = (name) => "/api/profiles/" + encodeURIComponent(name);

// --- building the page ----------------------------------------------------------------------------

/** h("a", {href: "#/"}, "text", child...): an element; strings become text nodes. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "value") el.value = value;
    else if (key === "style") Object.assign(el.style, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const fixed = (x, digits = 2) => (typeof x === "number" ? x.toFixed(digits) : "—");

function isNever(iso) {
  return !iso || iso.startsWith(ZERO_TIME);
}

/** An RFC 3339 time as "2026-01-31 14:05 UTC" (the full value in the title); "never" for Go's zero time. */
function time(iso) {
  if (isNever(iso)) return h("span", { class: "muted" }, "never");
  const short = iso.replace("T", " ").replace(/:\d\d(\.\d+)?Z$/, " UTC");
  return h("time", { datetime: iso, title: iso }, short);
}

function badge(category) {
  return h("span", { class: "badge cat-" + category }, category);
}

/** A horizontal bar for a value in [0, 1]: an ARIA meter, its fill, and the number. */
function bar(label, value, { text, min = 0, max = 1, signal } = {}) {
  const clamped = Math.max(min, Math.min(max, value));
  const percent = ((clamped - min) / (max - min)) * 100;
  return h("div", { class: "bar-row", "data-signal": signal || label },
    h("span", { class: "bar-label" }, label),
    h("div", {
      class: "bar", role: "meter", "aria-label": label, "aria-valuemin": min, "aria-valuemax": max,
      "aria-valuenow": value, "aria-valuetext": text || fixed(value),
    }, h("div", { class: "bar-fill", "data-value": value, style: { width: percent.toFixed(2) + "%" } })),
    h("span", { class: "bar-value" }, text || fixed(value)));
}

function panel(kind, title, ...body) {
  return h("section", { class: "panel " + kind, role: kind === "error" ? "alert" : null },
    title ? h("h2", {}, title) : null, ...body);
}

let saidAt = 0;

/** Announce the outcome of an action (kept until the user navigates elsewhere). */
function say(message) {
  saidAt = Date.now();
  const status = document.getElementById("status");
  status.textContent = "";
  // A fresh text node so that screen readers announce a repeated message too.
  setTimeout(() => { status.textContent = message; }, 30);
}

/** Ask for confirmation in the page's <dialog>; resolves to true when the user confirms. */
function confirmAction(title, text, okLabel) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

/** A table that becomes one card per row on narrow screens (each cell labelled by its header). */
function table(caption, headers, rows, { className = "" } = {}) {
  return h("table", { class: "data " + className },
    caption ? h("caption", { class: "visually-hidden" }, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.map(({ cells, attrs }) =>
      h("tr", attrs || {}, cells.map((cell, i) => h("td", { "data-label": headers[i] }, cell))))));
}

// --- routing ----------------------------------------------------------------------------------

/** "#/profiles/p1/search?q=diet" -> {parts: ["profiles", "p1", "search"], params} */
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, search] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { path, parts, params: new URLSearchParams(search || "") };
}

function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function hashFor(parts, params) {
  const path = "#/" + parts.map(encodeURIComponent).join("/");
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "" && value !== 0) query.set(key, String(value));
  }
  const qs = query.toString();
  return qs ? path + "?" + qs : path;
}

let renderSeq = 0;
let lastPath = null;

/** Draw the view the location's hash names. ``focusHeading``: move the focus to its heading
 * (after an action removed the focused control, such as a deleted row's button). */
async function render({ focusHeading = false } = {}) {
  const seq = ++renderSeq;
  const route = parseHash();
  const view = document.getElementById("view");
  const section = route.parts[0] || "profiles";
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.getElementById("forget-token").hidden = !token();
  view.setAttribute("aria-busy", "true");
  let content;
  try {
    content = await routeTo(route);
  } catch (err) {
    content = errorView(err);
  }
  if (seq !== renderSeq) return; // a newer navigation won
  view.replaceChildren(content);
  view.removeAttribute("aria-busy");
  const heading = view.querySelector("h1");
  if (heading) document.title = heading.textContent + " · memlocal";
  // Keyboard users land on the new view's heading, or on what a form asked to be focused.
  const moved = focusHeading || (lastPath !== null && route.path !== lastPath);
  const target = view.querySelector("[data-focus]") || (moved ? heading : null);
  if (target) {
    if (!target.hasAttribute("tabindex") && target.tagName.startsWith("H")) target.setAttribute("tabindex", "-1");
    target.focus();
  }
  lastPath = route.path;
}

function routeTo({ parts, params }) {
  const [section, name, sub, id] = parts;
  if (!section || section === "profiles") {
    if (!name) return profilesView();
    if (!sub) return memoriesView(name, params);
    if (sub === "memories" && id) return memoryView(name, id);
    if (sub === "search") return searchView(name, params);
    if (sub === "inject") return injectView(name, params);
    if (sub === "runs") return runsView(name);
  } else if (section === "automations") {
    return name ? noteView(name) : automationsView();
  } else if (section === "sync") {
    return syncView();
  }
  return Promise.resolve(h("div", {}, h("h1", {}, "Not found"),
    h("p", {}, "There is no such page. ", h("a", { href: "#/" }, "Back to the profiles"))));
}

// --- errors and the token -----------------------------------------------------------------------

function errorView(err) {
  if (!(err instanceof ApiError)) {
    return panel("error", "Something went wrong", h("p", {}, String(err && err.message ? err.message : err)),
      h("button", { type: "button", onclick: () => render() }, "Try again"));
  }
  if (err.status === 401) return tokenView(err);
  if (err.status === 503) {
    return panel("error", "The memory bank is not wired",
      h("p", {}, "The server is up, but it could not open its memory store, so it answers every memory request with 503."),
      h("p", { class: "reason" }, err.message),
      h("p", {}, "Fix the cause (the database path, its permissions, or the file itself) and restart ", h("code", {}, "memlocal serve"), "."),
      h("button", { type: "button", onclick: () => render() }, "Try again"));
  }
  if (err.status === 0) {
    return panel("error", "The server cannot be reached", h("p", {}, err.message),
      h("button", { type: "button", onclick: () => render() }, "Try again"));
  }
  const title = err.status === 404 ? "Not found" : "The request failed (HTTP " + err.status + ")";
  return panel("error", title, h("p", { class: "reason" }, err.message),
    h("p", {}, h("a", { href: "#/" }, "Back to the profiles")));
}

function tokenView(err) {
  const had = Boolean(token());
  const input = h("input", { id: "token-input", type: "password", name: "token", autocomplete: "off",
    required: true, spellcheck: "false", "data-focus": true });
  const form = h("form", {
    class: "token-form",
    onsubmit: (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      say("Token set for this browser tab.");
      render();
    },
  },
  h("label", { for: "token-input" }, "API token"),
  h("div", { class: "inline" }, input, h("button", { type: "submit" }, "Use token")));
  return panel("error", had ? "The server refused that token" : "This server needs an API token",
    h("p", {}, had
      ? "The token you gave was not accepted (" + err.message + "). Enter it again."
      : "memlocal serve was started with MEMLOCAL_API_TOKEN. Enter the token to continue; it is kept for this browser tab only and sent as a bearer header."),
    form);
}

// --- profiles --------------------------------------------------------------------------------------

async function profilesView() {
  const [stats, list] = await Promise.all([api("GET", "/api/memory-bank/stats"), api("GET", "/api/profiles")]);
  const root = h("div", {}, h("h1", {}, "Profiles"),
    h("p", { class: "lead", id: "totals" },
      `${stats.totalMemories} ${stats.totalMemories === 1 ? "memory" : "memories"} in ${stats.profilesWithMemory} ${stats.profilesWithMemory === 1 ? "profile" : "profiles"}, newest activity first.`));
  if (!list.profiles.length) {
    root.append(panel("info", "No memories yet",
      h("p", {}, "Profiles appear here once an agent (or you) saves a memory, for example:"),
      h("pre", {}, 'memlocal save --profile researcher "Prefers JSON output"')));
    return root;
  }
  root.append(table("Profiles", ["Profile", "Memories", "Last activity"], list.profiles.map((p) => ({
    attrs: { "data-profile": p.name },
    cells: [
      h("a", { href: hashFor(["profiles", p.name]) }, p.name),
      h("span", { class: "num" }, String(stats.perProfile[p.name] ?? p.memoryCount)),
      time(p.lastActivityAt),
    ],
  }))));
  return root;
}

function profileHeader(name, active) {
  const tabs = [["Memories", []], ["Search", ["search"]], ["Injection preview", ["inject"]], ["Runs", ["runs"]]];
  return h("div", { class: "profile-head" },
    h("nav", { "aria-label": "Breadcrumb", class: "crumbs" }, h("a", { href: "#/" }, "Profiles"), " / ", name),
    h("h1", {}, name),
    h("nav", { "aria-label": "Profile views", class: "tabs" }, h("ul", {}, tabs.map(([label, sub]) =>
      h("li", {}, h("a", { href: hashFor(["profiles", name, ...sub]), "aria-current": label === active ? "page" : null }, label))))));
}

async function memoriesView(name, params) {
  const category = CATEGORIES.includes(params.get("category")) ? params.get("category") : "";
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const page = await api("GET", profilePath(name) + "/memories", { query: { limit: PAGE_SIZE, offset, category } });
  if (!page.memories.length && offset > 0 && page.total > 0) {
    // Past the end (say, after deleting the last row of the last page): show the last page.
    const last = Math.floor((page.total - 1) / PAGE_SIZE) * PAGE_SIZE;
    return memoriesView(name, new URLSearchParams({ category, offset: String(last) }));
  }
  const select = h("select", { id: "category-filter", name: "category" },
    h("option", { value: "" }, "All categories"),
    CATEGORIES.map((c) => h("option", { value: c, selected: c === category }, c)));
  const filter = h("form", {
    class: "filters",
    onsubmit: (event) => {
      event.preventDefault();
      go(hashFor(["profiles", name], { category: select.value }));
    },
  }, h("label", { for: "category-filter" }, "Category"), select, h("button", { type: "submit" }, "Filter"));

  const what = category ? category + " " : "";
  const count = h("p", { class: "lead" }, h("strong", { id: "memory-count" }, String(page.total)),
    ` ${what}${page.total === 1 ? "memory" : "memories"}, newest first.`);
  const root = h("div", {}, profileHeader(name, "Memories"), h("div", { class: "toolbar" }, count, filter));
  if (!page.memories.length) {
    root.append(panel("info", null, h("p", {}, category ? "No " + category + " memories in this profile." : "This profile has no memories.")));
    return root;
  }
  root.append(table("Memories of " + name,
    ["Summary", "Category", "Confidence", "Accesses", "Last accessed", "Staleness", "Actions"],
    page.memories.map((m) => ({
      attrs: { "data-id": m.id },
      cells: [
        h("a", { href: hashFor(["profiles", name, "memories", m.id]) }, memoryName(m)),
        badge(m.category),
        h("span", { class: "num" }, fixed(m.confidence)),
        h("span", { class: "num" }, String(m.accessCount)),
        time(m.lastAccessedAt),
        h("span", { class: "num" }, fixed(m.stalenessScore)),
        h("button", {
          type: "button", class: "danger small", "aria-label": "Delete " + memoryName(m),
          onclick: () => deleteMemory(m, () => render({ focusHeading: true })),
        }, "Delete"),
      ],
    })), { className: "memories" }));
  const first = page.offset + 1;
  const lastShown = page.offset + page.memories.length;
  const prev = page.offset > 0 ? hashFor(["profiles", name], { category, offset: Math.max(0, page.offset - PAGE_SIZE) }) : null;
  const next = lastShown < page.total ? hashFor(["profiles", name], { category, offset: page.offset + PAGE_SIZE }) : null;
  root.append(h("nav", { class: "pager", "aria-label": "Pages" },
    prev ? h("a", { href: prev, rel: "prev" }, "← Newer") : h("span", { class: "muted" }, "← Newer"),
    h("span", {}, `${first}–${lastShown} of ${page.total}`),
    next ? h("a", { href: next, rel: "next" }, "Older →") : h("span", { class: "muted" }, "Older →")));
  return root;
}

async function deleteMemory(memory, after) {
  const ok = await confirmAction("Delete this memory?",
    `“${memoryName(memory)}” (${memory.id}) is removed from profile ${memory.profileName}, and from the bucket when one is configured. This cannot be undone.`,
    "Delete");
  if (!ok) return;
  try {
    await api("DELETE", profilePath(memory.profileName) + "/memories/" + encodeURIComponent(memory.id));
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) {
      document.getElementById("view").replaceChildren(errorView(err));
      return;
    }
  }
  say(`Deleted ${memory.id} (“${memoryName(memory)}”).`);
  after();
}

const FIELDS = [
  ["id", "Id"], ["profileName", "Profile"], ["summary", "Summary"], ["category", "Category"],
  ["source", "Source"], ["confidence", "Confidence"], ["createdAt", "Created"],
  ["lastAccessedAt", "Last accessed"], ["accessCount", "Accesses"], ["stalenessScore", "Staleness"],
  ["isActive", "Active"], ["version", "Schema version"],
];

async function memoryView(name, id) {
  const [{ memory: m }, seen] = await Promise.all([
    api("GET", profilePath(name) + "/memories/" + encodeURIComponent(id)),
    api("GET", "/api/memory-bank/" + encodeURIComponent(name) + "/injections", { query: { memoryId: id, limit: RUNS_SHOWN } }),
  ]);
  const known = new Set([...FIELDS.map(([key]) => key), "processedContent", "rawInput"]);
  const rows = FIELDS.map(([key, label]) => {
    let value = m[key];
    if (key === "createdAt" || key === "lastAccessedAt") value = time(value);
    else if (key === "category") value = badge(value);
    else if (typeof value === "number" && !Number.isInteger(value)) value = fixed(value, 3);
    else value = String(value);
    return [h("dt", {}, label), h("dd", { "data-field": key }, value)];
  });
  // Fields written by other implementations of the spec are kept and shown as they are; the
  // supersession links lead to the memory they name (in this profile).
  for (const key of Object.keys(m).filter((k) => !known.has(k))) {
    const value = (key === "supersedes" || key === "supersededBy") && typeof m[key] === "string"
      ? h("a", { href: hashFor(["profiles", name, "memories", m[key]]) }, m[key])
      : JSON.stringify(m[key]);
    rows.push([h("dt", {}, key), h("dd", { "data-field": key }, value)]);
  }
  return h("div", {},
    h("nav", { "aria-label": "Breadcrumb", class: "crumbs" }, h("a", { href: "#/" }, "Profiles"), " / ",
      h("a", { href: hashFor(["profiles", name]) }, name), " / ", m.id),
    h("h1", {}, memoryName(m)),
    h("dl", { class: "fields" }, rows),
    h("h2", {}, "processedContent"),
    h("pre", { class: "text", "data-field": "processedContent" }, m.processedContent),
    h("h2", {}, "rawInput"),
    h("pre", { class: "text", "data-field": "rawInput" }, m.rawInput),
    h("h2", {}, "Runs that saw this memory"),
    runsTable(name, seen.injections, seen.summaries, "No recorded run's context block carried this memory.", m.id),
    h("div", { class: "actions" },
      h("button", { type: "button", class: "danger", onclick: () => deleteMemory(m, () => go(hashFor(["profiles", name]))) }, "Delete this memory"),
      h("a", { href: hashFor(["profiles", name]) }, "Back to " + name)));
}

// --- search and its breakdown -----------------------------------------------------------------------

function queryForm(id, label, value, button, onQuery, hint) {
  const input = h("input", { id, type: "search", name: "q", value, required: true, autocomplete: "off" });
  return h("form", {
    class: "query",
    role: "search",
    onsubmit: (event) => {
      event.preventDefault();
      onQuery(input.value.trim());
    },
  }, h("label", { for: id }, label),
  h("div", { class: "inline" }, input, h("button", { type: "submit" }, button)),
  hint ? h("p", { class: "hint" }, hint) : null);
}

async function searchView(name, params) {
  const q = params.get("q") || "";
  const root = h("div", {}, profileHeader(name, "Search"),
    queryForm("search-q", "Query", q, "Search", (value) => go(hashFor(["profiles", name, "search"], { q: value })),
      "Ranked as memory_recall ranks, without counting as an access."));
  if (!q) return root;
  const { results } = await api("GET", profilePath(name) + "/memories/search", { query: { q } });
  const heading = h("h2", { tabindex: "-1", "data-focus": true }, `${results.length} ${results.length === 1 ? "result" : "results"} for “${q}”`);
  root.append(heading);
  if (!results.length) {
    root.append(panel("info", null, h("p", {}, "No memory scored 0.05 or more for this query.")));
    return root;
  }
  const w = results[0].breakdown.weights;
  const maturity = results[0].breakdown.maturity;
  root.append(h("section", { class: "weights", "aria-label": "Weights in force" },
    h("h3", {}, "Weights in force"),
    h("p", {}, "score = (", h("b", {}, fixed(w.recency)), " × recency + ", h("b", {}, fixed(w.usage)),
      " × usage + ", h("b", {}, fixed(w.topic)), " × topic) × confidence multiplier"),
    bar("maturity", maturity),
    h("p", { class: "hint" }, maturity < 1
      ? "Maturity = the profile's accesses so far / 50. Until it reaches 1, part of the usage weight (0.30 at full maturity) goes to recency and topic."
      : "The profile is mature: usage carries its full weight.")));
  root.append(h("ol", { class: "results" }, results.map((r, i) => {
    const b = r.breakdown;
    const part = (signal) => `${fixed(b[signal])} × ${fixed(b.weights[signal])} = ${fixed(b[signal] * b.weights[signal], 3)}`;
    return h("li", { class: "result", "data-id": r.memory.id },
      h("div", { class: "result-head" },
        h("span", { class: "rank" }, "#" + (i + 1)),
        h("a", { href: hashFor(["profiles", name, "memories", r.memory.id]) }, memoryName(r.memory)),
        badge(r.memory.category),
        h("span", { class: "score" }, "score ", h("strong", { "data-score": r.score }, fixed(r.score, 3)))),
      h("p", { class: "content" }, r.memory.processedContent),
      h("div", { class: "bars" },
        bar("recency", b.recency, { text: part("recency") }),
        bar("usage", b.usage, { text: part("usage") }),
        bar("topic", b.topic, { text: part("topic") }),
        bar("confidence", b.confidenceMul, { signal: "confidenceMul", text: "× " + fixed(b.confidenceMul), min: 0.5, max: 1 })));
  })));
  return root;
}

// --- injection preview -------------------------------------------------------------------------

async function injectView(name, params) {
  const q = params.get("q") || "";
  const root = h("div", {}, profileHeader(name, "Injection preview"),
    queryForm("inject-q", "Prompt or query", q, "Preview",
      (value) => go(hashFor(["profiles", name, "inject"], { q: value })),
      "The block a run of this profile would start with, if its tools include @memory. Previewing marks nothing accessed."));
  if (!q) return root;
  const p = await api("GET", profilePath(name) + "/injection-preview", { query: { q } });
  root.append(h("h2", { tabindex: "-1", "data-focus": true }, "Context block"));
  const over = p.chars > p.budget;
  root.append(h("div", { class: "budget" },
    bar("budget", p.chars / p.budget, { signal: "budget", text: `${p.chars.toLocaleString("en")} of ${p.budget.toLocaleString("en")} characters` + (over ? " (over!)" : "") })));
  if (p.block) {
    // One block-level span per line (its newline kept inside), so that a wrapped entry hangs
    // under its bullet while the text stays exactly the block.
    const lines = p.block.split("\n");
    root.append(h("pre", { class: "block", id: "block", tabindex: "0", "aria-label": "The context block" },
      lines.map((line, i) => h("span", { class: line.startsWith("* ") ? "line entry" : "line" },
        i < lines.length - 1 ? line + "\n" : line))));
  }
  else root.append(panel("info", null, h("p", {}, "Nothing would be injected: no core memory and no memory relevant to this query fits.")));
  const rows = (entries) => entries.map((e) => ({
    attrs: { "data-id": e.memory.id },
    cells: [e.tier, badge(e.memory.category),
      h("a", { href: hashFor(["profiles", name, "memories", e.memory.id]) }, memoryName(e.memory)),
      h("span", { class: "num" }, fixed(e.score, 3))],
  }));
  const headers = ["Tier", "Category", "Summary", "Score"];
  root.append(h("h2", {}, `In the block (${p.included.length})`));
  if (p.included.length) root.append(table("Entries in the block", headers, rows(p.included), { className: "included" }));
  root.append(h("h2", {}, `Trimmed to fit the budget (${p.trimmed.length})`));
  if (p.trimmed.length) {
    root.append(h("p", { class: "hint" }, "Dropped lowest score first: the relevant tier before the core tier."),
      table("Entries trimmed", headers, rows(p.trimmed), { className: "trimmed" }));
  } else {
    root.append(h("p", { class: "muted", id: "nothing-trimmed" }, "None: every candidate fit."));
  }
  return root;
}

// --- runs: the injection audit trail ------------------------------------------------------------------

const RUNS_SHOWN = 20;

/** Rendered blocks as a table: when, size, query hash, the memories of each tier, each a link
 * named by its summary (``summaries``: id -> summary; a memory deleted since shows its id, unlinked). */
function runsTable(name, runs, summaries, empty, highlight) {
  if (!runs.length) return h("p", { class: "muted", "data-empty": "runs" }, empty);
  const ids = (list) => list.length
    ? h("ul", { class: "memlinks" }, list.map((id) => h("li", { "data-id": id }, id in summaries
      ? h("a", { href: hashFor(["profiles", name, "memories", id]), title: id,
        class: id === highlight ? "this" : null }, summaries[id])
      : h("span", { class: "muted", title: "deleted since" }, id + " (deleted)"))))
    : h("span", { class: "muted" }, "none");
  return table("Rendered context blocks, newest first", ["When", "Characters", "Query hash", "Core", "Relevant"],
    runs.map((r) => ({
      attrs: { "data-run": String(r.id) },
      cells: [time(r.at), h("span", { class: "num" }, String(r.chars)), h("code", {}, r.queryHash), ids(r.core), ids(r.relevant)],
    })), { className: "runs" });
}

async function runsView(name) {
  const { injections, summaries } = await api("GET", "/api/memory-bank/" + encodeURIComponent(name) + "/injections", { query: { limit: RUNS_SHOWN } });
  const root = h("div", {}, profileHeader(name, "Runs"),
    h("p", { class: "lead" }, "The memory block each run of this profile received, newest first: which memories, in which tier, how large, and a hash of the query (the query itself is not kept). Recorded on this host only."));
  if (injections.length) {
    const last = injections[0];
    root.append(h("h2", {}, "What the last run saw"),
      h("p", { id: "last-run" }, `${time(last.at).textContent}: ${last.core.length} core and ${last.relevant.length} relevant ${last.core.length + last.relevant.length === 1 ? "memory" : "memories"}, ${last.chars} characters.`));
  }
  root.append(h("h2", {}, "Recent runs"),
    runsTable(name, injections, summaries, "No run has been injected with this profile's memories yet (or the audit trail is off: audit.enabled)."));
  return root;
}

// --- automation notes ------------------------------------------------------------------------------

async function automationsView() {
  const { automations } = await api("GET", "/api/automations");
  const idInput = h("input", { id: "automation-id", name: "id", required: true, autocomplete: "off",
    pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]{0,127}" });
  const root = h("div", {}, h("h1", {}, "Automation notes"),
    h("p", { class: "lead" }, "One short note per automation, rewritten by its agent after every firing. The next run reads it as a scribe's observation, not as operator input."));
  if (automations.length) {
    root.append(table("Automation notes", ["Automation", "Updated", "Note"], automations.map((a) => ({
      attrs: { "data-automation": a.automationId },
      cells: [h("a", { href: hashFor(["automations", a.automationId]) }, a.automationId), time(a.updatedAt),
        h("span", { class: "clip" }, a.note.length > 120 ? a.note.slice(0, 119) + "…" : a.note)],
    }))));
  } else {
    root.append(panel("info", null, h("p", {}, "No automation has a note yet.")));
  }
  root.append(h("form", {
    class: "query",
    onsubmit: (event) => {
      event.preventDefault();
      go(hashFor(["automations", idInput.value.trim()]));
    },
  }, h("label", { for: "automation-id" }, "Open or write the note of an automation (by id)"),
  h("div", { class: "inline" }, idInput, h("button", { type: "submit" }, "Open"))));
  return root;
}

function utf8Bytes(text) {
  return new TextEncoder().encode(text).length;
}

async function noteView(id) {
  const { memory } = await api("GET", "/api/automations/" + encodeURIComponent(id) + "/memory");
  const area = h("textarea", { id: "note-text", name: "note", rows: 8, spellcheck: "true" });
  area.value = memory;
  const counter = h("span", { class: "hint", id: "note-bytes", "aria-live": "polite" });
  const update = () => {
    const n = utf8Bytes(area.value.trim());
    counter.textContent = `${n.toLocaleString("en")} of ${NOTE_MAX_BYTES.toLocaleString("en")} bytes`;
    counter.classList.toggle("over", n > NOTE_MAX_BYTES);
  };
  area.addEventListener("input", update);
  update();
  const put = async (text, message) => {
    try {
      const stored = await api("PUT", "/api/automations/" + encodeURIComponent(id) + "/memory", { json: { memory: text } });
      area.value = stored.memory;
      update();
      say(message);
    } catch (err) {
      if (err instanceof ApiError && (err.status === 413 || err.status === 400)) say("Not saved: " + err.message);
      else document.getElementById("view").replaceChildren(errorView(err));
    }
  };
  const form = h("form", {
    class: "note",
    onsubmit: (event) => {
      event.preventDefault();
      put(area.value, area.value.trim() ? "Note saved." : "Note cleared.");
    },
  },
  h("label", { for: "note-text" }, "Note"), area, counter,
  h("div", { class: "actions" },
    h("button", { type: "submit" }, "Save note"),
    h("button", {
      type: "button", class: "danger", onclick: async () => {
        if (await confirmAction("Clear this note?", `The note of automation ${id} is removed; its next run starts without one.`, "Clear note")) {
          put("", "Note cleared.");
        }
      },
    }, "Clear note")));
  return h("div", {},
    h("nav", { "aria-label": "Breadcrumb", class: "crumbs" }, h("a", { href: "#/automations" }, "Automation notes"), " / ", id),
    h("h1", {}, id),
    memory ? null : h("p", { class: "muted" }, "This automation has no note yet."),
    form);
}

// --- sync -------------------------------------------------------------------------------------

async function syncView() {
  const s = await api("GET", "/api/sync/status");
  const root = h("div", {}, h("h1", {}, "Sync"));
  if (s.localOnly) {
    root.append(panel("info", "No bucket configured (local only)",
      h("p", {}, s.message ? s.message.charAt(0).toUpperCase() + s.message.slice(1) + ": memories stay in this host's database" : "",
        s.database ? h("span", {}, " (", h("code", {}, s.database), ").") : "."),
      h("p", {}, "Set INTERNAL_S3_BUCKET (or S3_BUCKET) and restart to sync with a bucket; see docs/sync.md.")));
    return root;
  }
  const b = s.bucket || {};
  const p = s.pending || {};
  const last = s.lastPass;
  const counts = last && last.counts ? Object.entries(last.counts).filter(([, n]) => n).map(([k, n]) => `${k.replace(/_/g, " ")} ${n}`).join(", ") : "";
  const dl = [
    ["Bucket", h("span", {}, h("strong", {}, b.name || "?"), b.endpoint ? " at " + b.endpoint : "", b.region ? " (" + b.region + ")" : "")],
    ["Chosen from", b.source || "?"],
    ["Database", h("code", {}, s.database || "?")],
    ["Pending", `${p.total ?? 0} (${p.saves ?? 0} saves, ${p.deletes ?? 0} deletions, ${p.accessUpdates ?? 0} access updates, ${p.automationNotes ?? 0} automation notes)`],
    ["Outbox", String(p.outbox ?? 0)],
    ["Last pass", last ? h("span", {}, time(last.finishedAt), " ", h("span", { class: "badge result-" + last.result }, last.result),
      counts ? " " + counts : "", last.reason ? h("span", { class: "reason" }, " " + last.reason) : "") : "never"],
    ["Last error", s.lastError ? h("span", {}, time(s.lastError.at), " " + s.lastError.message) : "none"],
    ["Pass running", s.passRunning ? "yes" : "no"],
  ];
  root.append(h("dl", { class: "fields", id: "sync-status" }, dl.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
  const skipped = s.skipped || [];
  root.append(h("h2", {}, `Skipped objects (${skipped.length})`));
  if (skipped.length) {
    root.append(table("Skipped objects", ["Key", "Reason", "Seen"], skipped.map((o) => ({
      cells: [h("code", {}, o.key), o.reason, time(o.seenAt)],
    }))));
  } else {
    root.append(h("p", { class: "muted" }, "None: every object in the bucket was usable."));
  }
  return root;
}

// --- start ------------------------------------------------------------------------------------------

document.getElementById("forget-token").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  say("Token forgotten.");
  render();
});
// The skip link moves the focus without touching the hash (the hash is the router's).
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  document.getElementById("main").focus();
});
window.addEventListener("hashchange", () => {
  // A message belongs to the action that just happened (which may itself have navigated).
  if (Date.now() - saidAt > 1000) document.getElementById("status").textContent = "";
  render();
});
render();
