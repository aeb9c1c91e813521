// The svit console: one ES module, no dependencies, no build step (docs/console.md).
//
// Rules it keeps:
// - The bearer token lives in this tab only (sessionStorage, and memory) and is
//   sent only as an Authorization header; it is never put in a URL, a log or
//   localStorage. Event streams use short-lived observe tokens minted for one
//   process (EventSource cannot send headers).
// - Every URL is relative to the page (../v1/...), so the console works when a
//   proxy serves the gateway under a sub-path.
// - Idle cost: one cheap summary and one page of processes every POLL_MS while
//   the tab is visible, nothing while it is hidden; one event stream, for the
//   open process only.

const API = new URL("../", document.baseURI);
const TOKEN_KEY = "svit.console.token";
const POLL_MS = 5000;
const PAGE = 100;
const FILL_STEPS = 4;
const OBSERVE_TTL_S = 600;
const MAX_SIGNALS = 200;
const MAX_VALUE_CHARS = 20000;
const TREE_EVERY_MS = 2000;

const $ = (id) => document.getElementById(id);

const CAUSES = {
  lease_ended: "failover (host lease ended)",
  released: "released (passivation, delete)",
  replaced: "replaced",
};

const state = {
  token: null,
  admin: false,
  poll: null,
  cursors: [null], // cursor of each page shown so far (null: the first page)
  next: null,
  rows: [],
  prevCounters: null,
  selected: null, // {pid, es, lastId, version, token, stateTimer, epoch}
};

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, { method = "GET", params, body } = {}) {
  const url = new URL(path, API);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, String(v));
  }
  const headers = { Authorization: "Bearer " + state.token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let r;
  try {
    r = await fetch(url, {
      method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, "unreachable", "the gateway did not answer");
  }
  let doc = null;
  try { doc = await r.json(); } catch { doc = null; }
  if (!r.ok) {
    const err = (doc && doc.error) || {};
    throw new ApiError(r.status, err.code || "http_" + r.status, err.message || r.statusText);
  }
  return doc;
}

function describe(e) {
  if (e instanceof ApiError) {
    if (e.status === 401) {
      return "Token refused: the gateway does not know this token (401 unauthenticated).";
    }
    if (e.status === 0) return "The gateway did not answer; retrying.";
    return `${e.message} (${e.status} ${e.code})`;
  }
  return String(e);
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c ?? "–";
    tr.appendChild(td);
  }
  return tr;
}

function fmtS(s) {
  if (s === null || s === undefined) return "–";
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`;
}

function fmtTime(ms) {
  return new Date(ms).toLocaleTimeString();
}

function showError(e) {
  $("error").textContent = e ? describe(e) : "";
  if (e instanceof ApiError && e.status === 401) logout(describe(e));
}

// ---------------------------------------------------------------- login

async function login(token) {
  state.token = token;
  try {
    await api("v1/processes", { params: { limit: 1 } });
  } catch (e) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("login-error").textContent = describe(e);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    await api("v1/admin/summary");
    state.admin = true;
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 403) { showError(e); }
    state.admin = false;
  }
  $("login-error").textContent = "";
  $("token").value = "";
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("whoami").textContent = state.admin ? "admin token" : "tenant token";
  $("cluster-admin-only").hidden = state.admin;
  $("hosts").hidden = !state.admin;
  $("moves-view").hidden = !state.admin;
  $("f-tenant").hidden = !state.admin;
  $("f-tenant-label").hidden = !state.admin;
  $("deadletters-view").hidden = !state.admin;
  state.cursors = [null];
  await refresh();
  schedule();
}

function logout(message) {
  closeProcess();
  clearTimeout(state.poll);
  state.poll = null;
  state.token = null;
  state.admin = false;
  sessionStorage.removeItem(TOKEN_KEY);
  $("app").hidden = true;
  $("login").hidden = false;
  $("logout").hidden = true;
  $("whoami").textContent = "";
  $("login-error").textContent = message || "";
}

// ---------------------------------------------------------------- polling

function schedule() {
  clearTimeout(state.poll);
  state.poll = setTimeout(async () => {
    if (!document.hidden && state.token) await refresh();
    if (state.token) schedule();
  }, POLL_MS);
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && state.token) { refresh(); schedule(); }
});

async function refresh() {
  try {
    const jobs = [loadProcesses()];
    if (state.admin) jobs.push(loadSummary());
    await Promise.all(jobs);
    showError(null);
  } catch (e) {
    showError(e);
  }
}

async function loadSummary() {
  const s = await api("v1/admin/summary");
  const now = performance.now();
  const c = s.counters;
  let rates = "";
  if (state.prevCounters) {
    const dt = (now - state.prevCounters.at) / 1000;
    const rate = (k) => ((c[k] - state.prevCounters.c[k]) / dt).toFixed(2);
    rates = ` · commits ${rate("committed")}/s · conflicts ${rate("conflict")}/s` +
      ` · fenced ${rate("fenced")}/s`;
  }
  state.prevCounters = { c, at: now };
  const g = s.gateway;
  const live = g.hosts_live === null ? "" : ` · ${g.hosts_live} hosts live`;
  const routes = g.routes === null ? "" : ` · ${g.routes} active routes`;
  $("gateway-line").textContent =
    `gateway ${g.version} · ${g.ok ? "ready" : "NOT READY"}${live}${routes}` +
    ` · totals: ${c.committed} commits, ${c.conflict} conflicts,` +
    ` ${c.fenced} fenced, ${c.failovers} failovers${rates}`;
  $("dispatcher-line").textContent = describeDispatcher(s.dispatcher);
  const changes = s.owner_changes || [];
  $("moves-none").hidden = changes.length > 0;
  $("moves").tBodies[0].replaceChildren(...changes.map((m) => row([
    fmtTime(m.acquired_at * 1000), m.process_id, `${m.old_host} / ${m.old_token}`,
    `${m.new_host} / ${m.new_token}`, CAUSES[m.cause] || m.cause,
    m.gap_s === null ? "–" : fmtS(m.gap_s),
  ])));
  const body = $("hosts").tBodies[0];
  body.replaceChildren(...s.hosts.map((h) => {
    if (!h.answered) return row([h.host, "no answer", "", "", "", "", ""]);
    return row([
      h.host, h.lease_state, fmtS(h.keepalive_lag_s),
      `${h.actors} / ${h.max_active ?? "–"}`, h.spares ?? "–",
      h.pss_mib === undefined || h.pss_mib === null ? "–" : `${Math.round(h.pss_mib)} MiB`,
      fmtS(h.lru_idle_s),
    ]);
  }));
}

function describeDispatcher(d) {
  if (d === null || d === undefined) return "dispatcher: not watched (the gateway has no Redis URL)";
  if (d.error) return `dispatcher: UNKNOWN (${d.error})`;
  const expired = d.expired ? ` · ${d.expired} expired heartbeat(s)` : "";
  const next = d.workers.filter((w) => w.live)
    .map((w) => `${w.worker} (${fmtS(w.expires_in_s)} left)`).join(", ");
  return `dispatcher: ${d.live ? "ok" : "NO LIVE WORKER"} · ${d.live} worker(s) live` +
    expired + (next ? ` · ${next}` : "");
}

async function loadProcesses() {
  // A listing page does bounded work on the gateway and may hold fewer than
  // asked for (even none) before the last one: read on, at most FILL_STEPS
  // requests, until the page is full or the listing ends.
  const rows = [];
  let cursor = state.cursors[state.cursors.length - 1];
  for (let step = 0; step < FILL_STEPS; step++) {
    const params = { limit: PAGE - rows.length, after: cursor };
    if (state.admin) params.tenant = $("f-tenant").value.trim();
    const page = await api("v1/processes", { params });
    rows.push(...page.processes);
    cursor = page.next;
    if (!cursor || rows.length >= PAGE) break;
  }
  state.rows = rows;
  state.next = cursor;
  renderProcesses();
}

function renderProcesses() {
  const want = $("f-state").value;
  const host = $("f-host").value.trim();
  const text = $("f-text").value.trim();
  const shown = state.rows
    .filter((p) => want === "all" || (want === "active") === Boolean(p.active))
    .filter((p) => !host || p.host === host)
    .filter((p) => !text || p.process_id.includes(text))
    .sort((a, b) => (a.process_id < b.process_id ? -1 : 1));
  const body = $("processes").tBodies[0];
  body.replaceChildren(...shown.map((p) => {
    const open = el("button", p.process_id, "link");
    open.type = "button";
    open.addEventListener("click", () => openProcess(p.process_id));
    return row([open, p.version, p.active ? "active" : "passivated", p.host, p.token,
      p.last_commit_at === null || p.last_commit_at === undefined ? "–"
        : fmtTime(p.last_commit_at * 1000)]);
  }));
  const sel = state.selected;
  if (sel) {
    const listed = state.rows.find((p) => p.process_id === sel.pid);
    if (listed) {
      $("p-host").textContent = listed.host ?? "none (passivated)";
      if (listed.token !== null && listed.token !== undefined) setToken(listed.token);
      setVersion(listed.version);
    }
  }
  $("page-info").textContent = `page ${state.cursors.length}: ${shown.length} shown of ` +
    `${state.rows.length} listed` + (state.next ? "" : " (last page)");
  $("next-page").disabled = !state.next;
  $("first-page").disabled = state.cursors.length === 1;
}

// ---------------------------------------------------------------- one process

function closeProcess() {
  const sel = state.selected;
  if (!sel) return;
  if (sel.es) sel.es.close();
  clearTimeout(sel.stateTimer);
  clearTimeout(sel.retry);
  state.selected = null;
  $("process-view").hidden = true;
}

function setVersion(v) {
  const sel = state.selected;
  if (!sel || v === null || v === undefined) return;
  if (sel.version === null || v > sel.version) {
    sel.version = v;
    $("p-version").textContent = `version ${v}`;
  }
}

function setToken(t) {
  const sel = state.selected;
  if (!sel || t === null || t === undefined) return;
  sel.token = t;
  $("p-token").textContent = String(t);
}

async function openProcess(pid) {
  closeProcess();
  const sel = { pid, es: null, lastId: null, version: null, token: null, signalToken: null,
                lastTokenAt: null, stateTimer: null, retry: null, treeAt: 0, inboxHead: null };
  state.selected = sel;
  $("process-view").hidden = false;
  $("p-id").textContent = pid;
  for (const id of ["p-signals", "p-moves", "p-messages", "p-tree", "p-timers", "p-log",
                    "p-outbox"]) {
    $(id).replaceChildren();
  }
  $("p-version").textContent = "version …";
  $("p-token").textContent = "…";
  $("p-last").textContent = "–";
  $("p-outbox-facts").textContent = "";
  $("p-action").textContent = "";
  const listed = state.rows.find((p) => p.process_id === pid);
  $("p-host").textContent = listed ? (listed.host ?? "none (passivated)") : "…";
  if (listed && listed.token !== null && listed.token !== undefined) setToken(listed.token);
  if (listed && typeof listed.last_commit_at === "number") {
    $("p-last").textContent = fmtTime(listed.last_commit_at * 1000);
  }
  await openStream(sel);
  loadMessages(sel);
}

async function openStream(sel) {
  if (state.selected !== sel) return;
  setStream("connecting");
  let minted;
  try {
    minted = await api("v1/processes/observe-token", {
      method: "POST", body: { process_id: sel.pid, ttl_s: OBSERVE_TTL_S },
    });
  } catch (e) {
    setStream("closed: " + describe(e));
    if (!(e instanceof ApiError) || e.status === 0 || e.status >= 500) retryStream(sel);
    return;
  }
  if (state.selected !== sel) return;
  const url = new URL("v1/processes/events", API);
  url.searchParams.set("process_id", sel.pid);
  url.searchParams.set("after", sel.lastId ?? "$");
  url.searchParams.set("observe_token", minted.token);
  const es = new EventSource(url);
  sel.es = es;
  es.addEventListener("ready", () => { setStream("live"); loadTree(sel); });
  for (const kind of ["committed", "canonical_event", "message", "completion", "failed"]) {
    es.addEventListener(kind, (e) => onSignal(sel, kind, e));
  }
  es.addEventListener("lagged", (e) => { sel.lastId = e.lastEventId || sel.lastId; loadTree(sel); });
  es.addEventListener("expired", () => { es.close(); openStream(sel); });
  es.addEventListener("error", (e) => {
    if (e.data) { setStream("error: " + e.data); return; } // the server's typed error event
    if (es.readyState === EventSource.CLOSED) { setStream("closed"); retryStream(sel); }
    else setStream("reconnecting");
  });
}

function retryStream(sel) {
  clearTimeout(sel.retry);
  sel.retry = setTimeout(() => openStream(sel), 3000);
}

function setStream(text) {
  $("p-stream").textContent = text;
}

function onSignal(sel, kind, e) {
  if (state.selected !== sel) return;
  if (e.lastEventId) sel.lastId = e.lastEventId;
  const signal = JSON.parse(e.data);
  const data = signal.data || {};
  let text = `${kind}`;
  if (kind === "committed") {
    const now = Date.now();
    // compared with the previous committed signal's token only (the listing's
    // token is a cached view and may lag the stream)
    if (sel.signalToken !== null && signal.token !== null && signal.token !== sel.signalToken) {
      const gap = sel.lastTokenAt ? ` after ${((now - sel.lastTokenAt) / 1000).toFixed(1)} s` : "";
      $("p-moves").appendChild(el("li", `${fmtTime(now)}: token ${sel.signalToken} → ` +
        `${signal.token}${gap} (version ${data.version})`));
    }
    sel.signalToken = signal.token;
    sel.lastTokenAt = now;
    setToken(signal.token);
    setVersion(data.version);
    $("p-last").textContent = fmtTime(now);
    const paths = (data.paths || []).map((p) => {
      const h = data.hashes && data.hashes[p];
      return h ? `${p} #${String(h).slice(0, 12)}` : p;
    });
    text = `v${data.version} committed under token ${signal.token}: ${paths.join(", ")}`;
    scheduleTree(sel);
  } else if (kind === "message") {
    $("p-messages").appendChild(el("li", summarizeMessage(data.message)));
    text = `message #${data.seq}`;
  } else if (kind === "canonical_event") {
    text = `event #${data.seq}: ${(data.event && (data.event.type || data.event.kind)) || ""}`;
  } else if (kind === "failed") {
    text = `failed: ${data.code || ""} ${data.message || ""}`;
  }
  const list = $("p-signals");
  list.appendChild(el("li", `${e.lastEventId} ${text}`, "signal-" + kind));
  while (list.children.length > MAX_SIGNALS) list.removeChild(list.firstChild);
}

function summarizeMessage(m) {
  if (!m || typeof m !== "object") return JSON.stringify(m);
  const who = m.role || m.kind || "message";
  const body = m.content ?? m.text ?? m;
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return `${who}: ${text.length > 500 ? text.slice(0, 500) + "…" : text}`;
}

function scheduleTree(sel) {
  // at most one state read per TREE_EVERY_MS however fast the process commits:
  // at once after a quiet spell, else when the spell since the last read ends
  if (sel.stateTimer) return;
  const wait = Math.max(0, (sel.treeAt || 0) + TREE_EVERY_MS - performance.now());
  sel.stateTimer = setTimeout(() => { sel.stateTimer = null; loadTree(sel); }, wait);
}

function plain(v) {
  if (v === null || typeof v !== "object") return v;
  switch (v.type) {
    case "null": return null;
    case "map": return Object.fromEntries(Object.entries(v.value).map(([k, x]) => [k, plain(x)]));
    case "array": return v.value.map(plain);
    default: return v.value;
  }
}

async function loadTree(sel) {
  sel.treeAt = performance.now();
  loadTimers(sel);
  loadLog(sel);
  loadOutbox(sel);
  let doc;
  try {
    doc = await api("v1/processes/state", { params: { process_id: sel.pid, path: "/" } });
  } catch (e) {
    if (state.selected === sel) $("p-tree").replaceChildren(el("p", describe(e), "error"));
    return;
  }
  if (state.selected !== sel) return;
  setVersion(doc.version);
  const root = plain(doc.value) || {};
  sel.inboxHead = Array.isArray(root.inbox) && root.inbox.length ? root.inbox[0] : null;
  $("p-drop").disabled = sel.inboxHead === null;
  const parts = Object.keys(root).sort().map((name) => {
    const d = document.createElement("details");
    if (name === "memory") d.open = true;
    d.appendChild(el("summary", `/${name}`));
    let text = JSON.stringify(root[name], null, 2);
    if (text.length > MAX_VALUE_CHARS) text = text.slice(0, MAX_VALUE_CHARS) + "\n… (cut)";
    d.appendChild(el("pre", text));
    return d;
  });
  $("p-tree").replaceChildren(el("p", `read at v${doc.version}`, "hint"), ...parts);
}

async function loadTimers(sel) {
  let doc;
  try {
    doc = await api("v1/processes/timers", { params: { process_id: sel.pid, limit: 50 } });
  } catch (e) {
    if (state.selected === sel) $("p-timers").replaceChildren(el("li", describe(e)));
    return;
  }
  if (state.selected !== sel) return;
  $("p-timers").replaceChildren(...doc.timers.map((t) =>
    el("li", `${t.state} ${t.id} → ${t.to} due ${new Date(t.due_ms).toLocaleString()}`)));
  if (!doc.timers.length) $("p-timers").appendChild(el("li", "none pending", "hint"));
}

async function loadOutbox(sel) {
  let doc;
  try {
    doc = await api("v1/processes/outbox", { params: { process_id: sel.pid, limit: 20 } });
  } catch (e) {
    if (state.selected === sel) $("p-outbox").replaceChildren(el("li", describe(e)));
    return;
  }
  if (state.selected !== sel) return;
  $("p-outbox-facts").textContent = `${doc.committed} committed in all, ` +
    `${doc.retained} retained` + (doc.group ? "" : " · no dispatcher worker has read it yet");
  $("p-outbox").replaceChildren(...doc.intents.map((i) => {
    const tries = i.state === "delivering" ? ` (read ${i.deliveries}×)` : "";
    return el("li", `${i.state}${tries} v${i.version ?? "?"} ${i.id} → ${i.to ?? "?"}`);
  }));
  if (!doc.intents.length) $("p-outbox").appendChild(el("li", "none pending", "hint"));
  if (doc.more) $("p-outbox").appendChild(el("li", "… more not shown", "hint"));
}

async function loadLog(sel) {
  let doc;
  try {
    doc = await api("v1/processes/log", { params: { process_id: sel.pid, limit: 20 } });
  } catch (e) {
    if (state.selected === sel) $("p-log").replaceChildren(el("li", describe(e)));
    return;
  }
  if (state.selected !== sel) return;
  $("p-log").replaceChildren(...doc.entries.map((e) => {
    const by = e.request_id ? ` · request ${e.client_id}/${e.request_id}` : "";
    return el("li", `v${e.version} token ${e.token} ${e.source}: ${e.paths.join(", ")}${by}`);
  }));
}

async function loadMessages(sel) {
  try {
    const doc = await api("v1/processes/messages/recent",
      { params: { process_id: sel.pid, limit: 20 } });
    if (state.selected !== sel) return;
    $("p-messages").prepend(...doc.messages.map((m) => el("li", summarizeMessage(m.message))));
  } catch {
    // a process without a reasoning session has no messages; nothing to show
  }
}

async function sendInbox(ev) {
  ev.preventDefault();
  const sel = state.selected;
  const text = $("p-inbox").value;
  if (!sel || !text) return;
  if (!confirm(`Send this message to the inbox of ${sel.pid}?\n\n${text}`)) return;
  try {
    const r = await api("v1/processes/inbox", {
      method: "POST", body: { process_id: sel.pid, message: text },
    });
    $("p-action").textContent = `inbox: appended=${r.appended}, version ${r.version}`;
    $("p-inbox").value = "";
  } catch (e) {
    $("p-action").textContent = describe(e);
  }
}

async function act(what, call) {
  try {
    $("p-action").textContent = `${what}: ${await call()}`;
  } catch (e) {
    $("p-action").textContent = `${what}: ${describe(e)}`;
  }
}

function dropHead() {
  const sel = state.selected;
  if (!sel || !sel.inboxHead) return;
  const head = sel.inboxHead;
  const id = head && typeof head === "object" && typeof head.id === "string" ? head.id : null;
  if (id === null) { $("p-action").textContent = "drop: the inbox head has no message id"; return; }
  const reason = prompt(`Dead-letter the inbox head ${id} of ${sel.pid}? Give a reason:`);
  if (!reason) return;
  act("drop inbox head", async () => {
    const r = await api("v1/processes/inbox/drop", {
      method: "POST", body: { process_id: sel.pid, message_id: id, reason },
    });
    return `moved to /thread/dead_letters at version ${r.version}`;
  });
}

function snapshot() {
  const sel = state.selected;
  if (!sel || !confirm(`Take a snapshot of ${sel.pid}?`)) return;
  act("snapshot", async () => {
    const r = await api("v1/processes/snapshot", { method: "POST", body: { process_id: sel.pid } });
    return `version ${r.version}, ${JSON.stringify(r.snapshot).length} bytes`;
  });
}

function fork() {
  const sel = state.selected;
  if (!sel) return;
  const child = prompt(`Fork ${sel.pid} into a new process id:`, sel.pid + "-fork");
  if (!child || !confirm(`Create ${child} as a fork of ${sel.pid}?`)) return;
  act("fork", async () => {
    const r = await api("v1/processes/fork", {
      method: "POST", body: { process_id: sel.pid, new_process_id: child },
    });
    return `created ${r.process_id} at version ${r.version}`;
  });
}

// ---------------------------------------------------------------- dead letters

async function loadDeadLetters() {
  try {
    const doc = await api("v1/admin/dead-letters", { params: { limit: 50 } });
    $("dl-count").textContent = `${doc.count} in the queue` +
      (doc.count > doc.dead_letters.length ? ` (oldest ${doc.dead_letters.length} shown)` : "");
    $("deadletters").tBodies[0].replaceChildren(...doc.dead_letters.map((d) => {
      const again = el("button", "Re-drive");
      again.type = "button";
      again.addEventListener("click", () => redrive(d.id));
      return row([d.id, d.intent_id, d.to, `${d.reason}: ${d.error}`, again]);
    }));
  } catch (e) {
    $("dl-count").textContent = describe(e);
  }
}

async function redrive(id) {
  if (!confirm(`Send dead letter ${id} back to delivery (same idempotency key)?`)) return;
  try {
    await api("v1/admin/dead-letters/redrive", { method: "POST", body: { ids: [id] } });
  } catch (e) {
    $("dl-count").textContent = describe(e);
    return;
  }
  await loadDeadLetters();
}

// ---------------------------------------------------------------- wiring

$("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = $("token").value.trim();
  if (token) login(token);
});
$("logout").addEventListener("click", () => logout(""));
$("filters").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.cursors = [null];
  refresh();
});
for (const id of ["f-state", "f-host", "f-text"]) {
  $(id).addEventListener("input", renderProcesses);
}
$("next-page").addEventListener("click", () => {
  if (!state.next) return;
  state.cursors.push(state.next);
  refresh();
});
$("first-page").addEventListener("click", () => { state.cursors = [null]; refresh(); });
$("p-close").addEventListener("click", closeProcess);
$("open-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const pid = $("open-id").value.trim();
  if (pid) openProcess(pid);
});
$("p-inbox-form").addEventListener("submit", sendInbox);
$("p-drop").addEventListener("click", dropHead);
$("p-snapshot").addEventListener("click", snapshot);
$("p-fork").addEventListener("click", fork);
$("dl-load").addEventListener("click", loadDeadLetters);

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) login(saved);
