// The dashboard's claims and tasks panels: the live path claims per repo (holder, pattern, reason, since) from
// GET /mesh/claims (with If-None-Match), and the tasks (state, owner, attempts) from GET /mesh/tasks.
//
// Kept apart from dashboard.js: it shares only the page's API key (session storage). Every string an agent supplied
// reaches the page through textContent, after escapes and bidirectional controls are neutralised for display.
"use strict";

(() => {
  const query = new URLSearchParams(window.location.search);
  const asked = Number(query.get("poll"));
  const POLL_MS = (Number.isFinite(asked) && asked > 0 ? asked : 2) * 1000;
  const KEY_STORAGE = "muster.apiKey";

  const ESCAPES = /\u001b(?:\[[0-?]*[ -/]*[@-~]|\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|[@-Z\\-_])/g;
  const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  const inert = (value) =>
    value === null || value === undefined ? "" : String(value).replace(ESCAPES, "").replace(CONTROLS, "\ufffd");

  const cell = (text, className) => {
    const td = document.createElement("td");
    td.textContent = inert(text);
    td.title = td.textContent;
    if (className) td.className = className;
    return td;
  };

  // The server's time of a row, shown as it is (UTC, to the second): the browser's clock is never compared with it.
  const stamp = (iso) => (iso ? String(iso).replace("T", " ").replace(/\.\d+/, "").replace(/(\+00:00|Z)$/, " UTC") : "");

  const etags = new Map();

  async function fetchJson(path) {
    const headers = { Accept: "application/json" };
    const key = sessionStorage.getItem(KEY_STORAGE);
    if (key) headers["X-API-Key"] = key;
    const etag = etags.get(path);
    if (etag) headers["If-None-Match"] = etag;
    const response = await fetch(path, { headers, cache: "no-store", credentials: "same-origin" });
    if (response.status === 304) return null;
    if (!response.ok) throw new Error(`${path} answered ${response.status}`);
    const tag = response.headers.get("ETag");
    if (tag) etags.set(path, tag);
    return response.json();
  }

  function renderClaims(claims) {
    const body = document.querySelector("#claim-list tbody");
    const rows = [...claims].sort((a, b) => a.repo.localeCompare(b.repo) || a.holder.localeCompare(b.holder));
    body.replaceChildren(
      ...rows.map((c) => {
        const tr = document.createElement("tr");
        tr.dataset.claimId = c.id;
        tr.append(
          cell(c.repo, "repo"),
          cell(c.holder, "holder"),
          cell(c.pattern, "pattern mono"),
          cell(c.exclusive ? "exclusive" : "shared", "kind"),
          cell(c.reason, "reason"),
          cell(stamp(c.since), "since"),
        );
        return tr;
      }),
    );
    document.getElementById("claim-count").textContent = `(${rows.length})`;
    document.getElementById("claims-empty").hidden = rows.length > 0;
  }

  function renderTasks(tasks) {
    const body = document.querySelector("#task-list tbody");
    body.replaceChildren(
      ...tasks.map((t) => {
        const tr = document.createElement("tr");
        tr.dataset.taskId = t.id;
        tr.dataset.state = t.state;
        const to = t.to ? `agent ${t.to}` : t.role ? `role ${t.role}` : t.repo ? `repo ${t.repo}` : `cap ${t.cap}`;
        tr.append(
          cell(t.title, "title"),
          cell(t.state, "state"),
          cell(t.holder, "owner"),
          cell(String(t.attempts), "attempts"),
          cell(to, "to"),
          cell(String(t.priority), "priority"),
          cell(t.reason || t.result, "outcome"),
        );
        return tr;
      }),
    );
    document.getElementById("task-count").textContent = `(${tasks.length})`;
    document.getElementById("tasks-empty").hidden = tasks.length > 0;
  }

  async function poll() {
    try {
      const claims = await fetchJson("/mesh/claims");
      if (claims) renderClaims(claims.claims);
      const tasks = await fetchJson("/mesh/tasks");
      if (tasks) renderTasks(tasks.tasks);
    } catch (error) {
      // The main panel says when the service is unreachable or asks for a key; these panels try again.
    }
    window.setTimeout(poll, POLL_MS);
  }

  poll();
})();
