// People in the loop: a person signs in as a member of the mesh (role "human"), reads their inbox and threads, sends
// to an agent, a role, a repo or a cap, and replies in a thread. And the overseer's views: every thread (or one
// agent's), a thread's messages, and search.
//
// The person's session token lives in this tab's sessionStorage and travels only in the Authorization header, never
// in a URL. Every inbox poll is a mesh call, so it renews the person's lease while the page is open; signing out
// checks out. What agents wrote reaches the page through textContent only (window.muster.inert first).
"use strict";

(() => {
  const { inert, el, cell, authHeaders, askForKey, loop, KeyRequired, state: page } = window.muster;
  const TOKEN_STORAGE = "muster.person.token";
  const NAME_STORAGE = "muster.person.name";
  const query = new URLSearchParams(window.location.search);
  const POLL_MS = (Number(query.get("poll")) > 0 ? Number(query.get("poll")) : 2) * 1000;
  // The person's lease: what a closed tab leaves behind before the mesh lets the name go.
  const TTL_S = 300;
  const KEPT_MESSAGES = 200;

  const me = {
    token: sessionStorage.getItem(TOKEN_STORAGE),
    name: sessionStorage.getItem(NAME_STORAGE),
    after: 0,
    inbox: [],
  };
  const view = { overseer: true, agent: "", thread: null, shown: null };

  // A refusal of the mesh, with its problem (code, detail, errors) to show the person.
  class Refused extends Error {
    constructor(status, problem) {
      super(problem.detail || `answered ${status}`);
      this.status = status;
      this.problem = problem;
    }
  }

  async function call(method, path, { body, asMe = false } = {}) {
    const headers = authHeaders("application/json");
    if (asMe && me.token) headers.Authorization = `Bearer ${me.token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "same-origin",
    });
    const answer = await response.json().catch(() => ({}));
    if (response.ok) return answer;
    // The service's own 401/403 (the API key) names no mesh code: the page asks for the key, as everywhere else.
    if ((response.status === 401 || response.status === 403) && !answer.code) {
      throw new KeyRequired(response.status === 401 ? "This Muster asks for an API key." : "That API key was refused.");
    }
    throw new Refused(response.status, answer);
  }

  function explain(error) {
    if (error instanceof KeyRequired) {
      askForKey(error.message);
      return "an API key is needed first";
    }
    if (error instanceof Refused) {
      const fields = (error.problem.errors || []).map((e) => `${e.field}: ${e.message || e.rule}`).join("; ");
      return fields ? `${error.message} (${fields})` : error.message;
    }
    return error.message;
  }

  const say = (id, text) => {
    document.getElementById(id).textContent = inert(text);
  };

  // ------------------------------------------------------------------ text of messages

  // A body keeps its lines: each is made inert on its own (a line break is not a control character to hide here).
  const bodyText = (body) => String(body).split("\n").map(inert).join("\n");
  const when = (iso) => {
    const at = new Date(iso);
    return Number.isNaN(at.getTime()) ? "" : at.toISOString().slice(0, 19).replace("T", " ");
  };

  function messageItem(message) {
    const li = el("li", undefined, "message");
    li.dataset.messageId = message.message_id;
    li.dataset.from = message.from;
    const head = el("div", undefined, "message-head");
    head.append(el("span", message.from, "agent from"));
    if (message.to) head.append(el("span", `→ ${message.to.join(", ")}`, "to"));
    // A message sent without a thread is a thread of its own, named by its id: replying there joins it.
    const link = el("a", message.thread_id ? `thread ${message.thread_id}` : "reply", "thread-link");
    link.href = threadHref(message.thread_id || message.message_id);
    head.append(link);
    head.append(el("span", when(message.sent_at), "hint"));
    const body = el("div", undefined, "pre body");
    body.textContent = bodyText(message.body);
    li.append(head, body);
    return li;
  }

  const threadHref = (threadId) => `#/threads/${encodeURIComponent(threadId)}`;

  function threadRow(thread) {
    const tr = document.createElement("tr");
    tr.dataset.threadId = thread.thread_id;
    const link = el("a", thread.thread_id);
    link.href = threadHref(thread.thread_id);
    const first = el("td", undefined, "mono");
    first.append(link);
    const last = thread.last_message;
    tr.append(first, cell(thread.participants.join(", ")), cell(String(thread.messages)), cell(last.from, "agent"));
    tr.append(cell(last.preview.replace(/\s+/g, " ") + (last.truncated ? "…" : ""), "preview"));
    return tr;
  }

  // ------------------------------------------------------------------ the person

  function showPerson() {
    const signedIn = Boolean(me.token);
    document.getElementById("signin-form").hidden = signedIn;
    document.getElementById("person-desk").hidden = !signedIn;
    document.getElementById("sign-out").hidden = !signedIn;
    say("person-state", signedIn ? `signed in as ${me.name} (role human)` : "not signed in");
    renderInbox();
    if (view.thread) renderReply();
  }

  async function signIn(event) {
    event.preventDefault();
    const name = document.getElementById("person-name").value.trim();
    const body = { agent_id: name, role: "human", ttl_seconds: TTL_S, status: "on the dashboard", confirm: true };
    try {
      const record = await call("POST", "/mesh/checkin", { body });
      Object.assign(me, { token: record.token, name: record.agent_id, after: 0, inbox: [] });
      sessionStorage.setItem(TOKEN_STORAGE, me.token);
      sessionStorage.setItem(NAME_STORAGE, me.name);
      say("signin-answer", "");
      showPerson();
    } catch (error) {
      say("signin-answer", `not signed in: ${explain(error)}`);
    }
  }

  function forget(reason) {
    sessionStorage.removeItem(TOKEN_STORAGE);
    sessionStorage.removeItem(NAME_STORAGE);
    Object.assign(me, { token: null, name: null, after: 0, inbox: [] });
    document.querySelector("#my-threads tbody").replaceChildren();
    say("signin-answer", reason);
    showPerson();
  }

  async function signOut() {
    try {
      await call("POST", "/mesh/checkout", { body: { confirm: true }, asMe: true });
      forget("signed out: your lease has ended");
    } catch (error) {
      if (error instanceof KeyRequired) return askForKey(error.message);
      // A session that had ended already is as good as checked out.
      forget(`signed out (${explain(error)})`);
    }
  }

  function renderInbox() {
    const list = document.getElementById("person-inbox");
    list.replaceChildren(...me.inbox.slice().reverse().map(messageItem));
    document.getElementById("inbox-empty").hidden = me.inbox.length > 0;
    say("inbox-count", me.inbox.length ? String(me.inbox.length) : "");
  }

  // The person's inbox and threads; each call renews the lease. The messages shown are acknowledged: read.
  async function pollMine() {
    if (!me.token) return;
    try {
      const got = await call("GET", `/mesh/inbox?after=${me.after}&limit=100`, { asMe: true });
      if (got.messages.length) {
        me.inbox = me.inbox.concat(got.messages).slice(-KEPT_MESSAGES);
        me.after = got.next_cursor;
        renderInbox();
        await call("POST", "/mesh/inbox/ack", { body: { cursor: got.next_cursor, confirm: true }, asMe: true });
      }
      const threads = await call("GET", "/mesh/threads?limit=50", { asMe: true });
      document.querySelector("#my-threads tbody").replaceChildren(...threads.threads.map(threadRow));
    } catch (error) {
      if (!(error instanceof Refused) || error.status !== 401) throw error;
      forget(`your session ended (${explain(error)}): sign in again`);
    }
  }

  async function compose(event) {
    event.preventDefault();
    const kind = document.getElementById("compose-kind").value;
    const thread = document.getElementById("compose-thread").value.trim();
    const body = {
      [kind]: document.getElementById("compose-target").value.trim(),
      body: document.getElementById("compose-body").value,
      confirm: true,
    };
    if (thread) body.thread_id = thread;
    try {
      const sent = await call("POST", "/mesh/messages", { body, asMe: true });
      say("compose-answer", sent.stored ? `sent to ${sent.recipients.join(", ")}` : "no live agent matched: not sent");
      if (sent.stored) document.getElementById("compose-body").value = "";
    } catch (error) {
      say("compose-answer", `not sent: ${explain(error)}`);
    }
  }

  // ------------------------------------------------------------------ the overseer's views

  function fillAgents() {
    const select = document.getElementById("thread-agent");
    const ids = [...new Set(page.roster.agents.map((a) => a.agent_id))].sort();
    const have = [...select.options].slice(1).map((o) => o.value);
    if (ids.length === have.length && ids.every((id, i) => id === have[i])) return;
    const chosen = select.value;
    select.replaceChildren(new Option("every agent", ""), ...ids.map((id) => new Option(inert(id), id)));
    select.value = ids.includes(chosen) ? chosen : "";
  }

  function overseerClosed() {
    view.overseer = false;
    document.getElementById("overseer-closed").hidden = false;
    document.getElementById("thread-list").hidden = true;
    document.getElementById("thread-agent").disabled = true;
  }

  async function pollOverseer() {
    fillAgents();
    if (!view.overseer) return;
    const agent = view.agent ? `&agent=${encodeURIComponent(view.agent)}` : "";
    try {
      const got = await call("GET", `/mesh/threads?view=all&limit=50${agent}`);
      document.querySelector("#thread-list tbody").replaceChildren(...got.threads.map(threadRow));
      document.getElementById("threads-empty").hidden = got.threads.length > 0;
      say("thread-count", String(got.threads.length));
    } catch (error) {
      if (error instanceof Refused && error.problem.code === "overseer_only") return overseerClosed();
      throw error;
    }
  }

  // A snippet marks each matched word between « and »: those become <mark> elements, everything else text.
  function snippet(text) {
    const span = el("span", undefined, "snippet");
    String(text)
      .split(/[«»]/)
      .forEach((part, i) => span.append(i % 2 ? el("mark", part) : document.createTextNode(inert(part))));
    return span;
  }

  async function search(event) {
    event.preventDefault();
    const q = document.getElementById("search-q").value;
    const asMe = !view.overseer;
    if (asMe && !me.token) return say("search-answer", "sign in to search your own messages");
    const scope = asMe ? "" : "&view=all";
    try {
      const got = await call("GET", `/mesh/search?q=${encodeURIComponent(q)}&limit=20${scope}`, { asMe });
      const hits = got.hits.map((hit) => {
        const li = el("li", undefined, "hit");
        li.dataset.messageId = hit.message_id;
        const link = el("a", hit.thread_id || hit.message_id, "mono");
        link.href = threadHref(hit.thread_id || hit.message_id);
        li.append(el("span", hit.from, "agent"), link, snippet(hit.snippet));
        return li;
      });
      document.getElementById("search-results").replaceChildren(...hits);
      document.getElementById("search-results").hidden = false;
      say("search-answer", hits.length ? `${hits.length}${got.next_cursor ? "+" : ""} found` : "nothing found");
    } catch (error) {
      say("search-answer", `search refused: ${explain(error)}`);
    }
  }

  // ------------------------------------------------------------------ one thread

  function renderReply() {
    const form = document.getElementById("reply-form");
    document.getElementById("reply-signin").hidden = Boolean(me.token);
    form.hidden = !me.token || !view.shown;
    if (form.hidden) return;
    const messages = view.shown.messages;
    const people = new Set(messages.flatMap((m) => [m.from, ...m.to]));
    people.delete(me.name);
    const select = document.getElementById("reply-to");
    const chosen = select.value;
    const ids = [...people].sort();
    select.replaceChildren(...ids.map((id) => new Option(inert(id), id)));
    const lastOther = [...messages].reverse().find((m) => m.from !== me.name);
    select.value = ids.includes(chosen) ? chosen : lastOther ? lastOther.from : ids[0] || "";
  }

  async function loadThread() {
    const threadId = view.thread;
    if (!threadId) return;
    const asMe = !view.overseer;
    if (asMe && !me.token) return say("thread-answer", "sign in to read the threads you are in");
    const scope = asMe ? "" : "?view=all&limit=100";
    try {
      const got = await call("GET", `/mesh/threads/${encodeURIComponent(threadId)}${asMe ? "?limit=100" : scope}`, {
        asMe,
      });
      if (view.thread !== threadId) return;
      view.shown = got;
      document.getElementById("thread-messages").replaceChildren(...got.messages.map(messageItem));
      const people = new Set(got.messages.flatMap((m) => [m.from, ...m.to]));
      say("thread-participants", [...people].sort().join(", "));
      say("thread-answer", got.next_cursor ? "only the first 100 messages are shown" : "");
      renderReply();
    } catch (error) {
      if (error instanceof Refused && error.problem.code === "overseer_only" && view.overseer) {
        overseerClosed();
        return loadThread();
      }
      say("thread-answer", explain(error));
    }
  }

  async function reply(event) {
    event.preventDefault();
    const body = {
      to: document.getElementById("reply-to").value,
      body: document.getElementById("reply-body").value,
      thread_id: view.thread,
      confirm: true,
    };
    try {
      const sent = await call("POST", "/mesh/messages", { body, asMe: true });
      say("reply-answer", `sent to ${sent.recipients.join(", ")}`);
      document.getElementById("reply-body").value = "";
      await loadThread();
    } catch (error) {
      say("reply-answer", `not sent: ${explain(error)}`);
    }
  }

  function route() {
    const match = window.location.hash.match(/^#\/threads\/(.+)$/);
    view.thread = match ? decodeURIComponent(match[1]) : null;
    view.shown = null;
    document.getElementById("thread-view").hidden = !match;
    if (!match) return;
    document.getElementById("overview").hidden = true;
    document.getElementById("run-view").hidden = true;
    document.getElementById("thread-messages").replaceChildren();
    say("thread-id", view.thread);
    say("thread-participants", "");
    say("reply-answer", "");
    renderReply();
    loadThread();
  }

  function start() {
    document.getElementById("signin-form").addEventListener("submit", signIn);
    document.getElementById("sign-out").addEventListener("click", signOut);
    document.getElementById("compose-form").addEventListener("submit", compose);
    document.getElementById("search-form").addEventListener("submit", search);
    document.getElementById("reply-form").addEventListener("submit", reply);
    document.getElementById("thread-agent").addEventListener("change", (event) => {
      view.agent = event.target.value;
      pollOverseer().catch(() => {});
    });
    window.addEventListener("hashchange", route);
    showPerson();
    route();
    loop(pollMine, POLL_MS);
    loop(pollOverseer, POLL_MS);
    loop(loadThread, POLL_MS);
  }

  start();
})();
