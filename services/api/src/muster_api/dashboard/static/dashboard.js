// The Muster dashboard: polls the directory (GET /mesh/agents, with If-None-Match), the unread backlog and the
// remote A2A agents, and ticks the ages locally between polls.
//
// Every string an agent or a remote card supplies reaches the page through textContent (or an attribute value),
// never as markup, after escapes and bidirectional controls are neutralised for display.
"use strict";

(() => {
  const query = new URLSearchParams(window.location.search);
  const seconds = (name, fallback) => {
    const value = Number(query.get(name));
    return Number.isFinite(value) && value > 0 ? value : fallback;
  };
  // Thresholds, each overridable in the page's query string (?stale_status=600&stale_heartbeat=120…).
  const POLL_MS = seconds("poll", 2) * 1000;
  const REMOTE_POLL_MS = Math.max(POLL_MS, 5000);
  const STALE_STATUS_S = seconds("stale_status", 30 * 60);
  const STALE_HEARTBEAT_S = seconds("stale_heartbeat", 10 * 60);
  const EXPIRED_GRACE_S = seconds("expired_grace", 5 * 60);
  const PAGE = 500;
  const KEY_STORAGE = "muster.apiKey";

  // ------------------------------------------------------------------ inert text

  // ANSI/VT escape sequences (CSI, OSC, and two-byte escapes) are dropped; any other control character, and the
  // bidirectional overrides/isolates that could reorder what a reader sees, become U+FFFD.
  const ESCAPES = /\u001b(?:\[[0-?]*[ -/]*[@-~]|\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|[@-Z\\-_])/g;
  const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  const inert = (value) =>
    value === null || value === undefined ? "" : String(value).replace(ESCAPES, "").replace(CONTROLS, "\ufffd");

  const el = (tag, text, className) => {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = inert(text);
    if (className) node.className = className;
    return node;
  };

  const cell = (text, className) => {
    const td = el("td", text, className);
    td.title = td.textContent;
    return td;
  };

  // ------------------------------------------------------------------ time

  const duration = (total) => {
    const s = Math.max(0, Math.floor(total));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
    return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  };

  // Ages come from the server's clock at the poll that brought them; between polls (and across 304s) they grow by
  // the time this page has seen pass. The browser's own clock is never compared with the server's.
  const since = (fetchedAt) => (performance.now() - fetchedAt) / 1000;

  // ------------------------------------------------------------------ API

  class KeyRequired extends Error {}

  const state = {
    key: sessionStorage.getItem(KEY_STORAGE),
    roster: { agents: [], fetchedAt: 0, serverNow: 0, more: false, etag: null },
    backlog: { unread: new Map(), etag: null },
    members: { byId: new Map(), missing: false },
    filters: { repo: "", role: "", cap: "" },
    waitingForKey: false,
    runsMissing: false,
    openRun: null,
    runStream: null,
  };

  const authHeaders = (accept) => {
    const headers = { Accept: accept };
    if (state.key) headers["X-API-Key"] = state.key;
    return headers;
  };

  function refused(response) {
    if (response.status === 401 || response.status === 403) {
      throw new KeyRequired(response.status === 401 ? "This Muster asks for an API key." : "That API key was refused.");
    }
  }

  async function get(path, etag) {
    const headers = authHeaders("application/json");
    if (etag) headers["If-None-Match"] = etag;
    const response = await fetch(path, { headers, cache: "no-store", credentials: "same-origin" });
    refused(response);
    if (response.status === 304) return { notModified: true, etag };
    if (!response.ok) throw new Error(`${path} answered ${response.status}`);
    return { body: await response.json(), etag: response.headers.get("ETag") };
  }

  // A POST whose answer (a run, or a problem) is shown to the person who asked.
  async function post(path, body) {
    const headers = authHeaders("application/json");
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method: "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "same-origin",
    });
    refused(response);
    const answer = await response.json().catch(() => ({}));
    return { ok: response.ok, status: response.status, answer };
  }

  // ------------------------------------------------------------------ roster

  function timing(agent) {
    const elapsed = since(state.roster.fetchedAt);
    const expiresIn = (Date.parse(agent.expires_at) - state.roster.serverNow) / 1000 - elapsed;
    const statusAge = agent.status_age_seconds + elapsed;
    const heartbeat = agent.heartbeat_age_seconds + elapsed;
    const activity = (state.roster.serverNow - Date.parse(agent.last_activity)) / 1000 + elapsed;
    return {
      statusAge,
      heartbeat,
      activity,
      expiresIn,
      expired: !agent.alive || expiresIn <= 0,
      stale: statusAge > STALE_STATUS_S || heartbeat > STALE_HEARTBEAT_S,
    };
  }

  const matches = (agent) =>
    (!state.filters.repo || agent.repo === state.filters.repo) &&
    (!state.filters.role || agent.role === state.filters.role) &&
    (!state.filters.cap || agent.caps.includes(state.filters.cap));

  function agentRow(agent) {
    const tr = document.createElement("tr");
    tr.dataset.agentId = agent.agent_id;
    tr.append(cell(agent.agent_id, "agent"), cell(agent.role), cell(agent.repo));
    const caps = el("td", undefined, "caps");
    for (const cap of agent.caps) caps.append(el("span", cap, "cap"));
    const status = el("td", undefined, "status");
    const text = el("span", agent.status, "status-text");
    status.title = text.textContent;
    status.append(text, el("span", "stale", "tag stale"), el("span", "expired", "tag expired"));
    tr.append(caps, status, el("td", "", "presence"), el("td", "", "status-age"), el("td", "", "heartbeat"));
    tr.append(el("td", "", "expires"));
    tr.append(el("td", "", "unread"));
    tr.append(el("td", "", "runtime"));
    return tr;
  }

  function tickRow(tr, agent) {
    const t = timing(agent);
    tr.classList.toggle("expired", t.expired);
    tr.classList.toggle("stale", t.stale && !t.expired);
    tr.hidden = t.expired && -t.expiresIn > EXPIRED_GRACE_S;
    // The state as the service derived it when the page was read (a change of state is a new page: the poll sees it).
    const presence = tr.querySelector(".presence");
    presence.textContent = `${agent.state} · ${duration(t.activity)} ago`;
    presence.dataset.state = agent.state;
    tr.querySelector(".status-age").textContent = duration(t.statusAge);
    tr.querySelector(".heartbeat").textContent = `${duration(t.heartbeat)} ago`;
    tr.querySelector(".expires").textContent = t.expired ? `ended ${duration(-t.expiresIn)} ago` : duration(t.expiresIn);
    const unread = state.backlog.unread.get(agent.agent_id) ?? 0;
    const unreadCell = tr.querySelector(".unread");
    unreadCell.textContent = String(unread);
    unreadCell.classList.toggle("some", unread > 0);
    showRuntime(tr.querySelector(".runtime"), state.members.byId.get(agent.agent_id));
  }

  // What the service's dispatch runtime does with the agent (GET /dispatch/members): its active run (linked; queued
  // or running, the same run a message's wake waits for), asleep until a message wakes it, serving a role's tasks
  // (and woken by a message too when it is both); nothing for an agent the runtime does not keep.
  function showRuntime(td, member) {
    const running = member?.running ?? null;
    const kind = !member ? "" : running ? "running" : member.wake ? "asleep" : member.serving ? "serving" : "";
    const runStatus = member?.run_status === "queued" ? "queued" : "running";
    const key = `${kind}:${running ?? ""}:${runStatus}:${member?.serving ?? ""}`;
    if (td.dataset.key === key) return; // rebuilt only on a change: a tick must not replace a link being clicked
    td.dataset.key = key;
    td.dataset.runtime = kind;
    if (kind === "running") {
      const link = el("a", running.slice(0, 12));
      link.href = `#/runs/${encodeURIComponent(running)}`;
      link.title = inert(running);
      td.replaceChildren(el("span", `${runStatus} `), link);
    } else if (kind === "asleep" && member.serving) {
      td.replaceChildren(el("span", `serving ${member.serving} · wakes on a message`));
    } else if (kind === "asleep") {
      td.replaceChildren(el("span", "asleep — wakes on a message"));
    } else if (kind === "serving") {
      td.replaceChildren(el("span", `serving ${member.serving}`));
    } else {
      td.replaceChildren();
    }
  }

  async function pollMembers() {
    if (state.members.missing) return;
    let got;
    try {
      got = await get("/dispatch/members");
    } catch (error) {
      // A service without the dispatch capability: no runtime column to fill, and no request every two seconds.
      if (!/answered 404$/.test(error.message)) throw error;
      state.members.missing = true;
      return;
    }
    state.members.byId = new Map(got.body.members.map((m) => [m.agent_id, m]));
    tick();
  }

  function tick() {
    const tbody = document.querySelector("#roster tbody");
    let shown = 0;
    for (const tr of tbody.rows) {
      tickRow(tr, tr.agent);
      if (!tr.hidden) shown += 1;
    }
    document.getElementById("roster-empty").hidden = shown > 0;
    document.getElementById("agent-count").textContent = String(shown);
  }

  function fillFilter(select, values) {
    const chosen = select.value;
    const wanted = ["", ...[...values].sort()];
    const have = [...select.options].map((o) => o.value);
    if (wanted.length === have.length && wanted.every((v, i) => v === have[i])) return;
    select.replaceChildren(new Option("all", ""));
    for (const value of wanted.slice(1)) select.append(new Option(inert(value), value));
    select.value = wanted.includes(chosen) ? chosen : "";
  }

  function renderRoster() {
    const agents = state.roster.agents;
    const field = (name) => new Set(agents.flatMap((a) => (name === "cap" ? a.caps : a[name] ? [a[name]] : [])));
    for (const select of document.querySelectorAll(".filters select")) fillFilter(select, field(select.dataset.field));
    const rows = agents.filter(matches).map((agent) => {
      const tr = agentRow(agent);
      tr.agent = agent;
      return tr;
    });
    document.querySelector("#roster tbody").replaceChildren(...rows);
    document.getElementById("roster-more").hidden = !state.roster.more;
    tick();
  }

  async function pollRoster() {
    const got = await get(`/mesh/agents?include_expired=true&limit=${PAGE}`, state.roster.etag);
    if (got.notModified) return;
    const agents = got.body.agents;
    // The server's clock at the answer, read off any agent (status_since + its age); needed for the countdowns.
    const first = agents[0];
    state.roster = {
      agents,
      fetchedAt: performance.now(),
      serverNow: first ? Date.parse(first.status_since) + first.status_age_seconds * 1000 : Date.now(),
      more: got.body.next_cursor !== null,
      etag: got.etag,
    };
    renderRoster();
  }

  async function pollBacklog() {
    const got = await get(`/mesh/backlog?include_expired=true&limit=${PAGE}`, state.backlog.etag);
    if (got.notModified) return;
    state.backlog = { unread: new Map(got.body.agents.map((b) => [b.agent_id, b.unread])), etag: got.etag };
    tick();
  }

  // ------------------------------------------------------------------ remote A2A agents

  async function pollRemote() {
    const got = await get("/a2a/agents");
    const rows = got.body.agents.map((agent) => {
      const tr = document.createElement("tr");
      tr.className = agent.status === "ok" ? "ok" : "failing";
      const tools = el("td", undefined, "caps");
      for (const tool of agent.tools) tools.append(el("span", tool.name, "cap"));
      tr.append(cell(agent.name, "agent"), cell(agent.status, "remote-status"), cell(agent.dialect));
      tr.append(tools, cell(agent.error, "error"));
      return tr;
    });
    document.querySelector("#a2a tbody").replaceChildren(...rows);
    document.getElementById("a2a-empty").hidden = rows.length > 0;
    document.getElementById("remote-count").textContent = String(rows.length);
  }


  // ------------------------------------------------------------------ runs

  const runSeconds = (run) => {
    if (!run.started_at) return null;
    const end = run.finished_at ? Date.parse(run.finished_at) : Date.now();
    return (end - Date.parse(run.started_at)) / 1000;
  };
  const usageText = (usage) =>
    usage ? `${usage.input ?? 0} in · ${usage.output ?? 0} out${usage.cost_usd ? ` · $${usage.cost_usd}` : ""}` : "";
  const errorText = (error) => (error ? error.code || "error" : "");

  async function pollRuns() {
    if (state.runsMissing) return;
    let got;
    try {
      got = await get("/dispatch/runs?limit=50");
    } catch (error) {
      // A service without dispatch runs: the section goes away instead of failing every two seconds.
      if (!/answered 404$/.test(error.message)) throw error;
      state.runsMissing = true;
      document.getElementById("runs").hidden = true;
      return;
    }
    const rows = got.body.runs.map((run) => {
      const tr = document.createElement("tr");
      tr.className = run.status;
      tr.dataset.runId = run.id;
      const link = el("a", run.id.slice(0, 12));
      link.href = `#/runs/${encodeURIComponent(run.id)}`;
      const first = document.createElement("td");
      first.className = "mono";
      first.append(link);
      const seconds = runSeconds(run);
      tr.append(first, cell(run.status, "run-status"), cell(run.agent, "agent"));
      tr.append(cell(seconds === null ? "" : duration(seconds)), cell(usageText(run.usage)));
      tr.append(cell(errorText(run.error), "error"), cell(run.prompt));
      return tr;
    });
    document.querySelector("#run-list tbody").replaceChildren(...rows);
    document.getElementById("runs-empty").hidden = rows.length > 0;
    document.getElementById("run-count").textContent = String(rows.length);
  }

  function showRun(run) {
    document.getElementById("run-id").textContent = inert(run.id);
    const status = document.getElementById("run-status");
    status.textContent = inert(run.status);
    status.dataset.status = run.status;
    document.getElementById("run-agent").textContent = inert(run.selected || run.agent);
    document.getElementById("run-workspace").textContent = inert(run.workspace);
    const seconds = runSeconds(run);
    document.getElementById("run-duration").textContent = seconds === null ? "not started" : duration(seconds);
    document.getElementById("run-usage").textContent = usageText(run.usage);
    const error = run.error ? `${inert(run.error.code || "error")}: ${inert(run.error.message || "")}` : "";
    document.getElementById("run-error").textContent = error;
    document.getElementById("run-prompt").textContent = inert(run.prompt);
    document.getElementById("run-text").textContent = run.text ? run.text.split("\n").map(inert).join("\n") : "";
    const finished = ["completed", "failed", "cancelled", "interrupted"].includes(run.status);
    document.getElementById("cancel-run").disabled = finished;
    document.querySelector("#steer-form button").disabled = finished;
  }

  function eventDetail(event) {
    const text = event.text ?? event.message ?? event.name ?? "";
    if (text) return String(text);
    const rest = Object.fromEntries(Object.entries(event).filter(([k]) => k !== "type"));
    return Object.keys(rest).length ? JSON.stringify(rest).slice(0, 500) : "";
  }

  function appendEvent(observation) {
    const tr = document.createElement("tr");
    tr.dataset.seq = String(observation.seq);
    const when = observation.at ? new Date(observation.at) : null;
    const at = when && !Number.isNaN(when.getTime()) ? when.toISOString().slice(11, 23) : "";
    const detail = el("td", undefined, "detail");
    detail.textContent = eventDetail(observation.event || {}).split("\n").map(inert).join("\n");
    tr.append(cell(String(observation.seq)), cell(at), cell(observation.event?.type ?? "raw", "event-type"), detail);
    const tbody = document.querySelector("#events tbody");
    tbody.append(tr);
    document.getElementById("event-count").textContent = String(tbody.rows.length);
  }

  // SSE read with fetch (EventSource cannot send X-API-Key), resumed with Last-Event-ID after a dropped connection.
  async function followRun(runId, signal) {
    const stream = document.getElementById("stream-state");
    let last = 0;
    let over = false;
    const take = (fields) => {
      if (fields.event === "result") {
        showRun(JSON.parse(fields.data));
        over = true;
      } else if (fields.data !== undefined && fields.id !== undefined) {
        last = Number(fields.id);
        appendEvent(JSON.parse(fields.data));
      }
    };
    while (!over && !signal.aborted) {
      try {
        const headers = authHeaders("text/event-stream");
        if (last) headers["Last-Event-ID"] = String(last);
        const response = await fetch(`/dispatch/runs/${encodeURIComponent(runId)}/events`, { headers, signal });
        refused(response);
        if (!response.ok) throw new Error(`the event stream answered ${response.status}`);
        stream.textContent = "· live";
        await readSse(response.body, take);
      } catch (error) {
        if (signal.aborted) return;
        if (error instanceof KeyRequired) return askForKey(error.message);
        stream.textContent = `· reconnecting (${inert(error.message)})`;
        await new Promise((resume) => window.setTimeout(resume, 1000));
      }
    }
    stream.textContent = over ? "· ended" : "";
  }

  async function readSse(body, take) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let fields = {};
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (line === "") {
          take(fields);
          fields = {};
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const key = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          fields[key] = fields[key] === undefined ? text : `${fields[key]}\n${text}`;
        }
      }
    }
  }

  function control(kind) {
    return async (event) => {
      if (event) event.preventDefault();
      const runId = state.openRun;
      const input = document.getElementById("steer-input");
      const body = kind === "steer" ? { text: input.value } : undefined;
      const answer = document.getElementById("control-answer");
      try {
        const got = await post(`/dispatch/runs/${encodeURIComponent(runId)}/${kind}`, body);
        if (got.ok) {
          showRun(got.answer);
          answer.textContent = kind === "steer" ? "steering sent" : "cancel asked";
          input.value = kind === "steer" ? "" : input.value;
        } else {
          answer.textContent = `${kind} refused: ${inert(got.answer.detail || got.status)}`;
        }
      } catch (error) {
        answer.textContent = inert(error.message);
      }
    };
  }

  function route() {
    const match = window.location.hash.match(/^#\/runs\/([^/]+)$/);
    if (state.runStream) state.runStream.abort();
    state.openRun = match ? decodeURIComponent(match[1]) : null;
    document.getElementById("overview").hidden = Boolean(match);
    document.getElementById("run-view").hidden = !match;
    if (!match) return;
    document.querySelector("#events tbody").replaceChildren();
    document.getElementById("control-answer").textContent = "";
    state.runStream = new AbortController();
    get(`/dispatch/runs/${encodeURIComponent(state.openRun)}`)
      .then((got) => showRun(got.body))
      .catch((error) => (error instanceof KeyRequired ? askForKey(error.message) : connection("offline", inert(error.message))));
    followRun(state.openRun, state.runStream.signal);
  }

  async function pollOpenRun() {
    if (!state.openRun) return;
    const status = document.getElementById("run-status").dataset.status;
    if (["completed", "failed", "cancelled", "interrupted"].includes(status)) return;
    showRun((await get(`/dispatch/runs/${encodeURIComponent(state.openRun)}`)).body);
  }

  // ------------------------------------------------------------------ loop, connection, key

  function connection(kind, text) {
    const pill = document.getElementById("connection");
    pill.dataset.state = kind;
    pill.textContent = text;
  }

  function askForKey(reason) {
    state.waitingForKey = true;
    document.getElementById("key-reason").textContent = reason;
    document.getElementById("key-form").hidden = false;
    document.getElementById("key-input").focus();
    connection("locked", "API key needed");
  }

  function loop(poll, every) {
    const run = async () => {
      if (!state.waitingForKey) {
        const sentWith = state.key;
        try {
          await poll();
          if (poll === pollRoster) connection("live", `live · every ${POLL_MS / 1000}s`);
        } catch (error) {
          // A refusal of a request sent before a key was given says nothing of the key given since.
          if (error instanceof KeyRequired) {
            if (state.key === sentWith) askForKey(error.message);
          } else connection("offline", `unreachable: ${inert(error.message)}`);
        }
      }
      window.setTimeout(run, every);
    };
    run();
  }

  function start() {
    document.getElementById("stale-status").textContent = duration(STALE_STATUS_S);
    document.getElementById("stale-heartbeat").textContent = duration(STALE_HEARTBEAT_S);
    document.getElementById("expired-grace").textContent = duration(EXPIRED_GRACE_S);
    const forget = document.getElementById("forget-key");
    forget.hidden = !state.key;
    forget.addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      window.location.reload();
    });
    document.getElementById("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      state.key = document.getElementById("key-input").value.trim();
      sessionStorage.setItem(KEY_STORAGE, state.key);
      state.roster.etag = null;
      state.backlog.etag = null;
      state.waitingForKey = false;
      document.getElementById("key-form").hidden = true;
      forget.hidden = false;
      if (state.openRun) route(); // the run page's stream stopped at the 401: start it again with the key
    });
    for (const select of document.querySelectorAll(".filters select")) {
      select.addEventListener("change", () => {
        state.filters[select.dataset.field] = select.value;
        renderRoster();
      });
    }
    document.getElementById("steer-form").addEventListener("submit", control("steer"));
    document.getElementById("cancel-run").addEventListener("click", control("cancel"));
    window.addEventListener("hashchange", route);
    route();
    loop(pollRoster, POLL_MS);
    loop(pollBacklog, POLL_MS);
    loop(pollMembers, POLL_MS);
    loop(pollRemote, REMOTE_POLL_MS);
    loop(pollRuns, POLL_MS);
    loop(pollOpenRun, POLL_MS);
    window.setInterval(tick, 1000);
  }

  // What the page's other scripts (people.js) share with this one: the inert rendering, the API key and the loop.
  window.muster = Object.freeze({ inert, el, cell, duration, authHeaders, askForKey, loop, KeyRequired, state });

  start();
})();
