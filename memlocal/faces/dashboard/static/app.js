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

/** What a memory is named by where there is room for more (fitName): its whole content when its
 * summary is the default one (the content's first 50 characters), else its own summary. */
function fullName(m) {
  const folded = String(m.processedContent || "").split(/\s+/).filter(Boolean).join(" ");
  const summary = typeof m.summary === "string" ? m.summary : "";
  if (summary && folded.length > summary.length && folded.startsWith(summary) && !summary.endsWith("…")) return folded;
  return memoryName(m);
}

/** A relative time in the CLI's words (memlocal.humanize.ago, tested to agree): "just now",
 * "5 min ago", "3 h ago", "yesterday", "12 days ago"; older than 60 days, or in the future
 * (another host's clock), the date. "never" for no time. */
function ago(iso, now = Date.now()) {
  if (isNever(iso)) return "never";
  const when = Date.parse(iso);
  const seconds = (now - when) / 1000;
  if (seconds < -60 || seconds >= 60 * 86400) return new Date(when).toISOString().slice(0, 10);
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  const days = Math.floor(seconds / 86400);
  return days === 1 ? "yesterday" : `${days} days ago`;
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

/** An RFC 3339 time as "2026-01-31 14:05:09 UTC". */
function absolute(iso) {
  return iso.replace("T", " ").replace(/(\.\d+)?Z$/, " UTC");
}

/** A time as the CLI words it ("2 h ago"), the exact time on hover; "never" for none (or Go's
 * zero time). The words are kept current while the page is open (every minute). */
function time(iso) {
  if (isNever(iso)) return h("span", { class: "muted" }, "never");
  return h("time", { datetime: iso, title: absolute(iso) }, ago(iso));
}

/** A memory's name in a place whose width the layout sets (a table cell): as much of fullName as
 * ``lines`` lines hold, cut after a whole word with "…" (fit, again on every resize). */
function fitName(m, lines = 2) {
  return h("span", { class: "fit", "data-full": fullName(m), "data-lines": lines }, memoryName(m));
}

/** Cut the text of a .fit element to its lines at the width it has now, after a whole word;
 * the whole text goes in the enclosing link's title when cut. */
function fit(el) {
  const full = el.dataset.full;
  const lines = Number(el.dataset.lines) || 2;
  const holder = el.closest("a") || el.parentElement;
  const fits = () => el.getClientRects().length <= lines;
  el.textContent = full;
  if (!el.getClientRects().length) return; // not laid out (hidden): nothing to measure
  if (fits()) {
    holder.removeAttribute("title");
    return;
  }
  const ends = []; // where a word ends (a space follows it)
  for (let i = 1; i < full.length; i++) if (full[i] === " " && full[i - 1] !== " ") ends.push(i);
  const cutAt = (i) => full.slice(0, i).replace(/[ ,;:.\-]+$/, "") + "…";
  let lo = 0, hi = ends.length - 1, best = 0;
  while (lo <= hi) { // the longest cut that fits: a binary search over the word ends
    const mid = (lo + hi) >> 1;
    el.textContent = cutAt(ends[mid]);
    if (fits()) { best = mid; lo = mid + 1; } else hi = mid - 1;
  }
  el.textContent = ends.length ? cutAt(ends[best]) : full;
  holder.title = full;
}

function fitAll(root) {
  for (const el of root.querySelectorAll(".fit[data-full]")) fit(el);
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
  document.getElementById("confirm-text").replaceChildren(...[text].flat()); // text, or text and elements
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
  fitAll(view);
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
    if (sub === "memories" && id && parts[4] === "edit") return editView(name, id);
    if (sub === "memories" && id && !parts[4]) return memoryView(name, id);
    if (sub === "search") return searchView(name, params);
    if (sub === "inject") return injectView(name, params);
    if (sub === "runs") return runsView(name);
  } else if (section === "new") {
    return newView(params);
  } else if (section === "search") {
    return findView(params);
  } else if (section === "runs") {
    return allRunsView();
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
  // Active memories, as `memlocal list` and `memlocal stats` count them: what recall and
  // injection draw from. The superseded ones are counted apart.
  const active = stats.activeMemories;
  const root = h("div", {}, h("h1", {}, "Profiles"),
    h("div", { class: "toolbar" },
      h("p", { class: "lead", id: "totals" },
        `${active} active ${active === 1 ? "memory" : "memories"} in ${stats.profilesWithMemory} ${stats.profilesWithMemory === 1 ? "profile" : "profiles"}`,
        stats.supersededMemories ? ` (and ${stats.supersededMemories} superseded)` : "", ", newest activity first."),
      h("a", { class: "button", href: "#/new" }, "New memory")));
  if (!list.profiles.length) {
    root.append(panel("info", "No memories yet",
      h("p", {}, "Profiles appear here once an agent (or you) saves a memory, for example:"),
      h("pre", {}, 'memlocal save --profile researcher "Prefers JSON output"')));
    return root;
  }
  root.append(table("Profiles", ["Profile", "Active", "Superseded", "Last activity"], list.profiles.map((p) => ({
    attrs: { "data-profile": p.name },
    cells: [
      h("a", { href: hashFor(["profiles", p.name]) }, p.name),
      h("span", { class: "num" }, String(stats.perProfileActive[p.name] ?? p.memoryCount)),
      h("span", { class: "num muted" }, String((stats.perProfile[p.name] ?? 0) - (stats.perProfileActive[p.name] ?? 0))),
      time(p.lastActivityAt),
    ],
  })), { className: "profiles" }));
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
  const all = params.get("superseded") === "1";
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const query = { limit: PAGE_SIZE, offset, category, activeOnly: all ? undefined : "true" };
  const [page, stats] = await Promise.all([
    api("GET", profilePath(name) + "/memories", { query }), api("GET", "/api/memory-bank/stats")]);
  const superseded = all ? "1" : undefined;
  if (!page.memories.length && offset > 0 && page.total > 0) {
    // Past the end (say, after deleting the last row of the last page): show the last page.
    const last = Math.floor((page.total - 1) / PAGE_SIZE) * PAGE_SIZE;
    return memoriesView(name, new URLSearchParams({ category, offset: String(last), superseded: all ? "1" : "" }));
  }
  // The successors the superseded rows name, when they are not on this page.
  const here = new Map(page.memories.map((m) => [m.id, m]));
  const wanted = [...new Set(page.memories.map((m) => m.supersededBy).filter((i) => i && !here.has(i)))];
  for (const found of await Promise.all(wanted.map((i) => api("GET", profilePath(name) + "/memories/" + encodeURIComponent(i)).catch(() => null)))) {
    if (found) here.set(found.memory.id, found.memory);
  }
  const select = h("select", { id: "category-filter", name: "category" },
    h("option", { value: "" }, "All categories"),
    CATEGORIES.map((c) => h("option", { value: c, selected: c === category }, c)));
  const include = h("input", { type: "checkbox", id: "include-superseded", name: "superseded", checked: all });
  const filter = h("form", {
    class: "filters",
    onsubmit: (event) => {
      event.preventDefault();
      go(hashFor(["profiles", name], { category: select.value, superseded: include.checked ? "1" : undefined }));
    },
  }, h("label", { for: "category-filter" }, "Category"), select,
  h("span", { class: "check" }, include, h("label", { for: "include-superseded" }, "Include superseded")),
  h("button", { type: "submit" }, "Filter"));

  const what = category ? category + " " : "";
  const noun = page.total === 1 ? "memory" : "memories";
  const hidden = (stats.perProfile[name] ?? 0) - (stats.perProfileActive[name] ?? 0);
  const count = h("p", { class: "lead" }, h("strong", { id: "memory-count" }, String(page.total)),
    all ? ` ${what}${noun}, superseded ones included, newest first.`
      : ` active ${what}${noun}, newest first` + (hidden && !category ? ` (${hidden} superseded: “Include superseded” lists them).` : "."));
  const root = h("div", {}, profileHeader(name, "Memories"),
    h("div", { class: "toolbar" }, count, h("a", { class: "button", href: hashFor(["new"], { profile: name }) }, "New memory")),
    filter);
  if (!page.memories.length) {
    root.append(panel("info", null, h("p", {}, category ? `No ${all ? "" : "active "}${category} memories in this profile.`
      : hidden && !all ? `No active memories: the profile's ${hidden} ${hidden === 1 ? "memory is" : "memories are"} superseded (“Include superseded” lists them).`
        : "This profile has no memories.")));
    return root;
  }
  const reload = () => render({ focusHeading: true });
  root.append(table("Memories of " + name,
    ["Summary", "Category", "Confidence", "Accesses", "Last accessed", "Staleness", "Actions"],
    page.memories.map((m) => ({
      attrs: { "data-id": m.id, class: m.isActive === false ? "superseded" : null },
      cells: [
        h("div", {}, h("a", { href: hashFor(["profiles", name, "memories", m.id]) }, fitName(m)),
          m.isActive === false ? supersededLine(name, m, here.get(m.supersededBy)) : null),
        badge(m.category),
        h("span", { class: "num" }, fixed(m.confidence)),
        h("span", { class: "num" }, String(m.accessCount)),
        time(m.lastAccessedAt),
        h("span", { class: "num" }, fixed(m.stalenessScore)),
        h("div", { class: "row-actions" },
          m.isActive === false ? h("button", {
            type: "button", class: "small", "aria-label": "Restore " + memoryName(m),
            onclick: () => restoreMemory(m, reload),
          }, "Restore") : null,
          h("button", {
            type: "button", class: "danger small", "aria-label": "Delete " + memoryName(m),
            onclick: () => deleteMemory(m, reload),
          }, "Delete")),
      ],
    })), { className: "memories" }));
  const first = page.offset + 1;
  const lastShown = page.offset + page.memories.length;
  const prev = page.offset > 0 ? hashFor(["profiles", name], { category, superseded, offset: Math.max(0, page.offset - PAGE_SIZE) }) : null;
  const next = lastShown < page.total ? hashFor(["profiles", name], { category, superseded, offset: page.offset + PAGE_SIZE }) : null;
  root.append(h("nav", { class: "pager", "aria-label": "Pages" },
    prev ? h("a", { href: prev, rel: "prev" }, "← Newer") : h("span", { class: "muted" }, "← Newer"),
    h("span", {}, `${first}–${lastShown} of ${page.total}`),
    next ? h("a", { href: next, rel: "next" }, "Older →") : h("span", { class: "muted" }, "Older →")));
  return root;
}

/** "superseded by <its successor>" under a superseded memory's name. */
function supersededLine(name, m, successor) {
  return h("p", { class: "superseded-by" }, h("span", { class: "flag" }, "superseded"),
    m.supersededBy ? [" by ", h("a", { href: hashFor(["profiles", name, "memories", m.supersededBy]) },
      successor ? memoryName(successor) : m.supersededBy)] : null);
}

async function deleteMemory(memory, after) {
  const ok = await confirmAction("Delete this memory?",
    [`“${memoryName(memory)}” (`, h("span", { class: "id" }, memory.id),
      `) is removed from profile ${memory.profileName}, and from the bucket when one is configured. This cannot be undone.`],
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

/** Undo a supersession (POST .../restore): the memory is active again, its successor stays
 * active without the link. */
async function restoreMemory(memory, after) {
  try {
    await api("POST", profilePath(memory.profileName) + "/memories/" + encodeURIComponent(memory.id) + "/restore");
  } catch (err) {
    if (err instanceof ApiError && err.status === 400) {
      say("Not restored: " + err.message);
      return;
    }
    document.getElementById("view").replaceChildren(errorView(err));
    return;
  }
  say(`Restored ${memory.id} (“${memoryName(memory)}”): it is active again` +
    (memory.supersededBy ? `, and ${memory.supersededBy} stays active without the link.` : "."));
  after();
}

const FIELDS = [
  ["id", "Id"], ["profileName", "Profile"], ["summary", "Summary"], ["category", "Category"],
  ["source", "Source"], ["confidence", "Confidence"], ["createdAt", "Created"],
  ["lastAccessedAt", "Last accessed"], ["accessCount", "Accesses"], ["stalenessScore", "Staleness"],
  ["isActive", "Active"], ["version", "Schema version"],
];

async function memoryView(name, id) {
  const path = profilePath(name) + "/memories/" + encodeURIComponent(id);
  const [{ memory: m }, seen, { memories: chain }] = await Promise.all([
    api("GET", path),
    api("GET", "/api/memory-bank/" + encodeURIComponent(name) + "/injections", { query: { memoryId: id, limit: RUNS_SHOWN } }),
    api("GET", path + "/history"),
  ]);
  const known = new Set([...FIELDS.map(([key]) => key), "processedContent", "rawInput"]);
  const rows = FIELDS.map(([key, label]) => {
    let value = m[key];
    if (key === "createdAt" || key === "lastAccessedAt") value = time(value);
    else if (key === "category") value = badge(value);
    else if (key === "confidence" || key === "stalenessScore") value = fixed(value); // as in the table
    else if (key === "isActive") value = value === false ? "no: superseded" : "yes";
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
  const byId = new Map(chain.map((c) => [c.id, c]));
  const reload = () => render({ focusHeading: true });
  const banner = m.isActive === false ? h("section", { class: "panel warn", id: "superseded" },
    h("p", {}, h("strong", {}, "This version is superseded"),
      m.supersededBy ? [" by ", h("a", { href: hashFor(["profiles", name, "memories", m.supersededBy]) },
        byId.has(m.supersededBy) ? memoryName(byId.get(m.supersededBy)) : m.supersededBy)] : null,
      ". Recall and injection leave it out; restoring it makes it active again (its successor stays, without the link)."),
    h("button", { type: "button", onclick: () => restoreMemory(m, reload) }, "Restore this version")) : null;
  return h("div", {},
    h("nav", { "aria-label": "Breadcrumb", class: "crumbs" }, h("a", { href: "#/" }, "Profiles"), " / ",
      h("a", { href: hashFor(["profiles", name]) }, name), " / ", m.id),
    h("h1", {}, memoryName(m)),
    banner,
    h("div", { class: "actions top-actions" },
      m.isActive === false ? null : h("a", { class: "button", href: hashFor(["profiles", name, "memories", m.id, "edit"]) }, "Edit"),
      h("button", { type: "button", class: "danger", onclick: () => deleteMemory(m, () => go(hashFor(["profiles", name]))) }, "Delete this memory")),
    h("dl", { class: "fields" }, rows),
    h("h2", {}, "History"),
    historyList(name, chain, m.id),
    h("h2", {}, "processedContent"),
    h("pre", { class: "text", "data-field": "processedContent" }, m.processedContent),
    h("h2", {}, "rawInput"),
    h("pre", { class: "text", "data-field": "rawInput" }, m.rawInput),
    h("h2", {}, "Runs that saw this memory"),
    runsList(seen.injections, seen.summaries, "No recorded run's context block carried this memory.", m.id),
    h("p", {}, h("a", { href: hashFor(["profiles", name]) }, "Back to " + name)));
}

/** The supersession chain, oldest first (GET .../history, what `memlocal history` shows). */
function historyList(name, chain, current) {
  if (chain.length < 2) return h("p", { class: "muted", "data-empty": "history" }, "One version: this memory has not replaced another, nor been replaced.");
  return h("ol", { class: "history" }, chain.map((c, i) => h("li", { "data-id": c.id, class: c.id === current ? "this" : null },
    h("span", { class: "version" }, "v" + (i + 1)),
    c.id === current ? h("strong", {}, memoryName(c), " (this version)")
      : h("a", { href: hashFor(["profiles", name, "memories", c.id]) }, memoryName(c)),
    " ", h("span", { class: "badge " + (c.isActive === false ? "state-superseded" : "state-active") }, c.isActive === false ? "superseded" : "active"),
    " ", h("span", { class: "muted" }, "saved "), time(c.createdAt), " ", h("code", { class: "muted id" }, c.id))));
}

/** The form of a new memory (``base``: the memory an edit starts from). */
function memoryForm({ profile, base, submitLabel, onSave }) {
  const field = (id, label, control, hint) => h("div", { class: "field" }, h("label", { for: id }, label), control,
    hint ? h("p", { class: "hint" }, hint) : null);
  const profileInput = h("input", { id: "new-profile", name: "profile", required: true, autocomplete: "off", value: profile || "" });
  const content = h("textarea", { id: "new-content", name: "content", rows: 5, required: true });
  content.value = base ? base.processedContent : "";
  const ownSummary = base && fullName(base) !== base.processedContent.split(/\s+/).filter(Boolean).join(" ") ? memoryName(base) : "";
  const summary = h("input", { id: "new-summary", name: "summary", maxlength: 50, autocomplete: "off", value: ownSummary });
  const category = h("select", { id: "new-category", name: "category" },
    CATEGORIES.map((c) => h("option", { value: c, selected: c === (base ? base.category : "general") }, c)));
  const confidence = h("input", { id: "new-confidence", name: "confidence", type: "number", min: 0, max: 1, step: 0.05,
    value: base ? String(base.confidence) : "1" });
  const problem = h("div", { class: "form-problem" });
  const form = h("form", {
    class: "memory-form",
    onsubmit: async (event) => {
      event.preventDefault();
      problem.replaceChildren();
      const body = { content: content.value, category: category.value, confidence: Number(confidence.value) };
      if (summary.value.trim()) body.summary = summary.value.trim();
      try {
        await onSave(base ? base.profileName : profileInput.value.trim(), body);
      } catch (err) {
        if (err instanceof ApiError && [400, 404, 413, 422].includes(err.status)) {
          problem.replaceChildren(panel("error", "Not saved", h("p", { class: "reason" }, err.message)));
        } else {
          document.getElementById("view").replaceChildren(errorView(err));
        }
      }
    },
  },
  base ? null : field("new-profile", "Profile", profileInput, "A new name starts a new profile (A-Z a-z 0-9 . _ -)."),
  field("new-content", "Content", content),
  field("new-summary", "Summary (optional)", summary, "At most 50 characters; without one, the content's first 50 are used."),
  h("div", { class: "field-row" }, field("new-category", "Category", category), field("new-confidence", "Confidence", confidence)),
  problem,
  h("div", { class: "actions" }, h("button", { type: "submit" }, submitLabel),
    h("a", { href: base ? hashFor(["profiles", base.profileName, "memories", base.id]) : (profile ? hashFor(["profiles", profile]) : "#/") }, "Cancel")));
  return form;
}

/** What a save answered, in words (the status line). */
function savedWords(result, extra) {
  const m = result.memory;
  let words = result.deduplicated ? `Already stored as ${m.id} (“${memoryName(m)}”): nothing new was saved` : `Saved ${m.id} (“${memoryName(m)}”)`;
  if (extra) words += extra;
  if (result.superseded) words += `; it restates ${result.superseded} with a new value, which is now superseded (Restore on its page undoes it)`;
  if (result.redacted && result.redacted.length) words += `; credentials replaced: ${result.redacted.join(", ")}`;
  return words + ".";
}

async function newView(params) {
  const profile = params.get("profile") || "";
  return h("div", {},
    h("nav", { "aria-label": "Breadcrumb", class: "crumbs" }, h("a", { href: "#/" }, "Profiles"), " / ",
      profile ? [h("a", { href: hashFor(["profiles", profile]) }, profile), " / "] : null, "New memory"),
    h("h1", {}, "New memory"),
    h("p", { class: "lead" }, "Saved as ", h("code", {}, "memlocal save"), " saves: an active memory that says the same thing is returned instead of a copy."),
    memoryForm({
      profile, submitLabel: "Save memory", onSave: async (name, body) => {
        const result = await api("POST", profilePath(name) + "/memories", { json: body });
        say(savedWords(result, ` in ${name}`));
        go(hashFor(["profiles", name, "memories", result.memory.id]));
      },
    }));
}

async function editView(name, id) {
  const { memory: m } = await api("GET", profilePath(name) + "/memories/" + encodeURIComponent(id));
  const root = h("div", {},
    h("nav", { "aria-label": "Breadcrumb", class: "crumbs" }, h("a", { href: "#/" }, "Profiles"), " / ",
      h("a", { href: hashFor(["profiles", name]) }, name), " / ",
      h("a", { href: hashFor(["profiles", name, "memories", id]) }, id), " / edit"),
    h("h1", {}, "Edit: " + memoryName(m)));
  if (m.isActive === false) {
    root.append(panel("info", null, h("p", {}, "This version is superseded: edit its active version, or restore this one first.")));
    return root;
  }
  root.append(h("p", { class: "lead" }, "Saving stores a new version that supersedes this one (" + id + "). The old version stays in the history, inactive, and Restore brings it back."),
    memoryForm({
      base: m, submitLabel: "Save as a new version", onSave: async (_profile, body) => {
        const result = await api("POST", profilePath(name) + "/memories", { json: { ...body, supersedes: id } });
        say(savedWords(result, `, superseding ${id}`));
        go(hashFor(["profiles", name, "memories", result.memory.id]));
      },
    }));
  return root;
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
  // The evidence gate orders the results (memlocal recall's note, in the same words).
  root.append(h("p", { class: "order-note", id: "order-note" }, results.some((r) => r.evidence)
    ? "Results are ordered by evidence, not by score: a query word shared before a [topic cluster] alone, then the most evidence; the score breaks ties (docs/relevance.md)."
    : "Results are ordered by score (ranking.mode = spec: no evidence gate)."));
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
      evidenceLine(r.evidence),
      h("div", { class: "bars" },
        bar("recency", b.recency, { text: part("recency") }),
        bar("usage", b.usage, { text: part("usage") }),
        bar("topic", b.topic, { text: part("topic") }),
        bar("confidence", b.confidenceMul, { signal: "confidenceMul", text: "× " + fixed(b.confidenceMul), min: 0.5, max: 1 })));
  })));
  return root;
}

/** What a result shares with the query: its words, then its [clusters] (as `memlocal recall`
 * shows them), and its topic against the best candidate's (the gate's ratio). */
function evidenceLine(ev) {
  if (!ev) return h("p", { class: "evidence muted" }, "Evidence: none recorded (no gate).");
  const words = ev.terms.map((t) => h("span", { class: "term" }, t));
  const clusters = ev.clusters.map((c) => h("span", { class: "cluster" }, "[" + c + "]"));
  return h("p", { class: "evidence" }, h("span", { class: "evidence-label" }, "Evidence"),
    words.length || clusters.length ? [...words, ...clusters] : h("span", { class: "muted" }, "-"),
    h("span", { class: "strength" }, `topic ${fixed(ev.strength)} of the best ${fixed(ev.best)}`),
    typeof ev.semantic === "number" ? h("span", { class: "semantic" }, `similarity ${fixed(ev.semantic)}`) : null);
}

// --- search across profiles ----------------------------------------------------------------------

const FOUND_SHOWN = 50;

async function findView(params) {
  const q = params.get("q") || "";
  const root = h("div", {}, h("h1", {}, "Search every profile"),
    queryForm("find-q", "Text to find in every profile", q, "Find", (value) => go(hashFor(["search"], { q: value })),
      "A plain text match in the content, raw input and summary of every memory (superseded ones too, flagged), newest first. A profile's Search tab ranks by relevance."));
  if (!q) return root;
  const page = await api("GET", "/api/memory-bank", { query: { q, limit: FOUND_SHOWN } });
  root.append(h("h2", { tabindex: "-1", "data-focus": true, id: "found-count" },
    `${page.total} ${page.total === 1 ? "memory contains" : "memories contain"} “${q}”` + (page.total > page.memories.length ? ` (the ${page.memories.length} newest shown)` : "")));
  if (!page.memories.length) return root;
  root.append(table("Memories found", ["Profile", "Summary", "Category", "Saved"], page.memories.map((m) => ({
    attrs: { "data-id": m.id, class: m.isActive === false ? "superseded" : null },
    cells: [
      h("a", { href: hashFor(["profiles", m.profileName]) }, m.profileName),
      h("div", {}, h("a", { href: hashFor(["profiles", m.profileName, "memories", m.id]) }, fitName(m)),
        m.isActive === false ? supersededLine(m.profileName, m, null) : null),
      badge(m.category),
      time(m.createdAt),
    ],
  })), { className: "found" }));
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
      h("a", { href: hashFor(["profiles", name, "memories", e.memory.id]) }, fitName(e.memory)),
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

/** Rendered blocks, one row per run: when, which profile, how large, how many memories of each
 * tier; opening a row shows the query's hash and the memories of each tier, each a link named by
 * its summary (``summaries``: id -> summary; a memory deleted since shows its id, unlinked). */
function runsList(runs, summaries, empty, highlight) {
  if (!runs.length) return h("p", { class: "muted", "data-empty": "runs" }, empty);
  const ids = (profile, list) => list.length
    ? h("ul", { class: "memlinks" }, list.map((id) => h("li", { "data-id": id }, id in summaries
      ? h("a", { href: hashFor(["profiles", profile, "memories", id]), title: id,
        class: id === highlight ? "this" : null }, summaries[id])
      : h("span", { class: "muted", title: "deleted since" }, id + " (deleted)"))))
    : h("p", { class: "muted" }, "none");
  return h("div", { class: "runs" },
    h("div", { class: "runs-head", "aria-hidden": "true" }, h("span", {}), h("span", {}, "When"), h("span", {}, "Profile"),
      h("span", {}, "Block size"), h("span", {}, "Memories by tier")),
    runs.map((r) => h("details", { class: "run", "data-run": String(r.id) },
      h("summary", {},
        h("span", { class: "run-when" }, time(r.at)),
        h("span", { class: "run-profile" }, r.profile),
        h("span", { class: "run-size num" }, `${r.chars.toLocaleString("en")} characters`),
        h("span", { class: "run-tiers" }, `${r.core.length} core · ${r.relevant.length} relevant`)),
      h("div", { class: "run-body" },
        h("p", { class: "run-hash" }, "Profile ", h("a", { href: hashFor(["profiles", r.profile, "runs"]) }, r.profile),
          " · query hash ", h("code", {}, r.queryHash || "none"), " · ", h("span", { class: "muted" }, absolute(r.at))),
        h("div", { class: "tiers" },
          h("div", {}, h("h3", {}, `Core (${r.core.length})`), ids(r.profile, r.core)),
          h("div", {}, h("h3", {}, `Relevant (${r.relevant.length})`), ids(r.profile, r.relevant)))))));
}

async function runsView(name) {
  const { injections, summaries } = await api("GET", "/api/memory-bank/" + encodeURIComponent(name) + "/injections", { query: { limit: RUNS_SHOWN } });
  const root = h("div", {}, profileHeader(name, "Runs"),
    h("p", { class: "lead" }, "The memory block each run of this profile received, newest first: which memories, in which tier, how large, and a hash of the query (the query itself is not kept). Recorded on this host only. Open a run to see its memories."));
  if (injections.length) {
    const last = injections[0];
    root.append(h("h2", {}, "What the last run saw"),
      h("p", { id: "last-run" }, time(last.at), `: ${last.core.length} core and ${last.relevant.length} relevant ${last.core.length + last.relevant.length === 1 ? "memory" : "memories"}, ${last.chars.toLocaleString("en")} characters.`));
  }
  root.append(h("h2", {}, "Recent runs"),
    runsList(injections, summaries, "No run has been injected with this profile's memories yet (or the audit trail is off: audit.enabled)."));
  return root;
}

/** Every profile's recent runs, newest first (each profile's audit trail, merged here). */
async function allRunsView() {
  const { profiles } = await api("GET", "/api/profiles");
  const answers = await Promise.all(profiles.map((p) =>
    api("GET", "/api/memory-bank/" + encodeURIComponent(p.name) + "/injections", { query: { limit: RUNS_SHOWN } })));
  const runs = answers.flatMap((a) => a.injections)
    .sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : b.id - a.id)).slice(0, RUNS_SHOWN);
  const summaries = Object.assign({}, ...answers.map((a) => a.summaries));
  return h("div", {}, h("h1", {}, "Runs"),
    h("p", { class: "lead" }, `The ${RUNS_SHOWN} latest memory blocks given to runs of any profile, newest first (recorded on this host only). Open a run to see its memories; a profile's Runs tab lists only its own.`),
    runsList(runs, summaries, "No run has been injected with memories yet (or the audit trail is off: audit.enabled)."));
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
// Cut names fit the new width; relative times stay current.
let fitting = 0;
window.addEventListener("resize", () => {
  cancelAnimationFrame(fitting);
  fitting = requestAnimationFrame(() => fitAll(document.getElementById("view")));
});
setInterval(() => {
  for (const el of document.querySelectorAll("#view time[datetime]")) el.textContent = ago(el.getAttribute("datetime"));
}, 60_000);
window.addEventListener("hashchange", () => {
  // A message belongs to the action that just happened (which may itself have navigated).
  if (Date.now() - saidAt > 1000) document.getElementById("status").textContent = "";
  render();
});
render();
