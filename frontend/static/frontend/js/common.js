// Shared helpers for the Compozy pages: the JSON API client, small DOM helpers, time formatting,
// badges, and the daemon status in the header. Plain ES modules, no build step; the only packages are the two
// vendored for the agent's Markdown (frontend/static/frontend/vendor/README.md).

export function pageData() {
  const node = document.getElementById("page-data");
  return node ? JSON.parse(node.textContent || "null") || {} : {};
}

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

export class ApiError extends Error {
  constructor(status, body) {
    const message = (body && (body.error || body.detail)) || `HTTP ${status}`;
    super(message);
    this.status = status;
    this.body = body;
    this.code = (body && body.code) || `http_${status}`;
  }
}

// Every browser write goes through here: same origin, JSON body, Django's CSRF token as a header.
export async function api(method, url, body) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, credentials: "same-origin" };
  if (method !== "GET" && method !== "HEAD") headers["X-CSRFToken"] = csrfToken();
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    // Say what to do: this page comes back by itself once the daemon answers again.
    throw new ApiError(0, { error: "the daemon is unreachable: start it with `compozy daemon start` (or `make run`); "
      + "this page reconnects by itself", code: "daemon_unreachable" });
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { error: text.slice(0, 300) };
    }
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return { status: response.status, data };
}

export function errorText(err) {
  if (err instanceof ApiError) return err.code && err.status ? `${err.message} (${err.code})` : err.message;
  return String((err && err.message) || err);
}

// el("div", {class: "x", dataset: {seq: 1}, onclick: fn}, "text", child)
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : value);
    }
  }
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function parseTime(iso) {
  if (!iso) return null;
  // Stored timestamps carry nanoseconds; Date understands milliseconds.
  const ms = Date.parse(String(iso).replace(/(\.\d{3})\d+/, "$1"));
  return Number.isNaN(ms) ? null : ms;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function relTime(iso) {
  const ms = parseTime(iso);
  if (ms === null) return "–";
  const seconds = (Date.now() - ms) / 1000;
  if (seconds < 5) return "just now";
  return `${duration(seconds)} ago`;
}

export function absTime(iso) {
  const ms = parseTime(iso);
  return ms === null ? "" : new Date(ms).toLocaleString();
}

export function badge(value) {
  const v = value || "unknown";
  return el("span", { class: `badge badge-${v}`, title: `badge: ${v}` }, v);
}

// Stopped by a person or a daemon shutdown, not by a failure. Its health is `dead` (no agent process), which the
// pages show neutral: nothing is wrong with it.
export function cleanlyStopped(s) {
  return Boolean(s) && s.state === "stopped" && !s.failure && !["error", "agent_crashed"].includes(s.stop_reason);
}

export function healthClass(health, s) {
  return health === "dead" && cleanlyStopped(s) ? "health-dead health-dead-clean" : `health-${health}`;
}

export function statePill(state) {
  return el("span", { class: `state state-${state}` }, state);
}

export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// What the agent says it spent (`usage.cost`): "$0.42" in dollars, "0.42 EUR" in any other currency; "" for none.
export function formatCost(cost) {
  if (!cost || typeof cost.amount !== "number") return "";
  const amount = cost.amount;
  // A cent's fraction still shows: a cheap session is not a free one.
  const digits = amount !== 0 && Math.abs(amount) < 0.01 ? 4 : 2;
  const text = amount.toFixed(digits);
  return (cost.currency || "USD").toUpperCase() === "USD" ? `$${text}` : `${text} ${cost.currency}`;
}

// A token count as people say it: 950, 95k, 1.5M.
export function formatTokens(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "?";
  const short = (value, unit) => `${Number(value.toFixed(value < 10 ? 1 : 0))}${unit}`;
  if (Math.abs(n) >= 1_000_000) return short(n / 1_000_000, "M");
  if (Math.abs(n) >= 1_000) return short(n / 1_000, "k");
  return String(n);
}

export function pretty(value) {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export function shortPath(path) {
  if (!path) return "";
  const parts = String(path).split("/").filter(Boolean);
  return parts.length ? parts[parts.length - 1] : path;
}

// ---- the daemon status in the header -------------------------------------------------------

const STATUS_POLL_MS = 10_000;
// Doctor runs every check (the disk, the queue, the catalog): a slower pace than the status line's.
const DOCTOR_POLL_MS = 30_000;

// Who this page is signed in as (issue 49): the owner, or a person with their own token and its scopes.
let whoamiPromise = null;
let principalKnown = null;
export function whoami() {
  if (!whoamiPromise) {
    whoamiPromise = api("GET", "/api/auth/whoami")
      .then(({ data }) => { principalKnown = data.principal || null; return principalKnown; })
      .catch(() => null);
  }
  return whoamiPromise;
}

// Whether the signed-in token may use a route that needs `scope` (unknown yet: yes, the daemon decides).
export function mayUse(scope) {
  if (!principalKnown) return true;
  const scopes = principalKnown.scopes || [];
  return scopes.includes("admin") || scopes.includes(scope) || (scope === "read" && scopes.length > 0);
}

export function signedInUser() {
  return principalKnown ? principalKnown.user : "";
}

function showSignedIn() {
  const box = document.getElementById("signed-in");
  if (!box) return;
  whoami().then((principal) => {
    if (!principal) return;
    box.textContent = `signed in as ${principal.user}`;
    box.title = `token ${principal.token_id} · ${(principal.scopes || []).join(", ")}`
      + (principal.workspaces && principal.workspaces.length ? ` · workspaces ${principal.workspaces.join(", ")}` : "");
    box.dataset.user = principal.user;
    box.hidden = false;
  });
}

export function startDaemonStatus({ doctor = true } = {}) {
  showSignedIn();
  const box = document.getElementById("daemon-status");
  if (!box) return { refresh() {}, last: null };
  const text = box.querySelector(".daemon-text");
  const state = { last: null };
  let inflight = false;

  async function refresh() {
    if (inflight) return state.last;
    inflight = true;
    try {
      const { data } = await api("GET", "/api/status");
      state.last = data;
      const d = data.daemon || {};
      const started = parseTime(d.started_at);
      const up = started ? ` · up ${duration((Date.now() - started) / 1000)}` : "";
      box.dataset.state = (data.health && data.health.status) === "ok" ? "ok" : "warn";
      text.textContent = `daemon ${d.status || "running"} · pid ${d.pid ?? "?"}${up} · ${d.active_sessions ?? 0} active`;
      box.title = `version ${d.version || "?"} · home ${d.home || "?"} · port ${d.http_port ?? "?"}`;
      document.dispatchEvent(new CustomEvent("compozy:status", { detail: data }));
    } catch (err) {
      box.dataset.state = "down";
      text.textContent = "daemon unreachable: run compozy daemon start";
      box.title = errorText(err);
    } finally {
      inflight = false;
    }
    return state.last;
  }

  refresh();
  setInterval(refresh, STATUS_POLL_MS);
  // The active count follows the catalog at once on pages that hold its stream (a start, a stop), not a poll later.
  document.addEventListener("compozy:catalog", debounce(refresh, 300));
  if (doctor) {
    // The chip says what doctor finds now: read again now and then, not once per page load.
    startDoctorSummary();
    setInterval(startDoctorSummary, DOCTOR_POLL_MS);
  }
  startAttentionCount();
  state.refresh = refresh;
  return state;
}

// The doctor summary (`GET /api/doctor`) sits in the header of every page but the not-found one. It is a button:
// its findings open below the header, where keyboard and touch users can read them (a tooltip alone hid them).
async function startDoctorSummary() {
  const box = document.getElementById("doctor-summary");
  const details = document.getElementById("doctor-details");
  if (!box) return;
  try {
    const { data } = await api("GET", "/api/doctor?quiet=true");
    const counts = (data.summary && data.summary.counts_by_severity) || {};
    const problems = Object.entries(counts).filter(([sev, n]) => n && sev !== "ok" && sev !== "info");
    box.textContent = problems.length ? `doctor: ${problems.map(([s, n]) => `${n} ${s}`).join(", ")}` : "doctor: ok";
    box.dataset.state = data.status || "ok";
    const items = (data.items || []).filter((i) => i.severity && !["ok", "info"].includes(i.severity));
    box.title = items.length ? "Show the doctor's findings" : "compozy doctor found nothing to fix";
    if (details) {
      clear(details).append(el("h2", {}, "Doctor"), items.length
        ? el("ul", { class: "doctor-items" }, ...items.map((i) => el("li", { dataset: { severity: i.severity } },
          el("span", { class: `doctor-sev sev-${i.severity}` }, i.severity), " ", el("strong", {}, i.title || i.code || ""),
          i.message ? ` — ${i.message}` : "",
          i.suggested_command ? el("div", { class: "small" }, el("code", {}, i.suggested_command)) : null)))
        : el("p", { class: "muted" }, "Nothing to fix."),
      el("p", { class: "muted small" }, "All checks: ", el("code", {}, "compozy doctor")));
      if (!box.dataset.wired) {
        box.dataset.wired = "1";
        box.addEventListener("click", () => {
          details.hidden = !details.hidden;
          box.setAttribute("aria-expanded", String(!details.hidden));
        });
      }
    }
    box.hidden = false;
  } catch {
    box.hidden = true;
  }
}

// ---- the attention count in the header, and opt-in browser notifications -------------------------

// A page that holds a catalog stream rings `compozy:catalog` on each frame and the count refetches then; the poll
// is for pages without one (it also survives a daemon restart without a stream).
const ATTENTION_POLL_MS = 10_000;
const NOTIFY_KEY = "compozy.notifications";
const notified = new Set();
let attentionPrimed = false;

export function notificationsWanted() {
  return "Notification" in window && Notification.permission === "granted" && localStorage.getItem(NOTIFY_KEY) === "on";
}

export async function setNotifications(on) {
  if (!("Notification" in window)) return false;
  if (on && Notification.permission !== "granted" && (await Notification.requestPermission()) !== "granted") {
    localStorage.setItem(NOTIFY_KEY, "off");
    return false;
  }
  localStorage.setItem(NOTIFY_KEY, on ? "on" : "off");
  return on;
}

// A new item is shown once per tab (the tag makes the browser replace the same item from another tab). The first
// read only primes: what was waiting before the page opened is in the inbox, not a burst of notifications.
function notifyNew(items) {
  for (const item of items) {
    if (notified.has(item.id)) continue;
    notified.add(item.id);
    if (attentionPrimed && notificationsWanted()) {
      const note = new Notification(`Compozy: ${item.kind}`, { body: item.summary, tag: item.id });
      note.addEventListener("click", () => { window.focus(); window.location.href = item.url; });
    }
  }
  attentionPrimed = true;
}

export async function refreshAttention() {
  const count = document.getElementById("attention-count");
  try {
    const { data } = await api("GET", "/api/attention");
    const items = data.items || [];
    if (count) {
      count.textContent = String(items.length);
      count.dataset.count = String(items.length);
      count.hidden = items.length === 0;
      count.title = items.length ? `${items.length} waiting on you` : "";
    }
    notifyNew(items);
    document.dispatchEvent(new CustomEvent("compozy:attention", { detail: items }));
    return items;
  } catch {
    return null; // the daemon status line says why
  }
}

function startAttentionCount() {
  const soon = debounce(refreshAttention, 250);
  document.addEventListener("compozy:catalog", soon);
  refreshAttention();
  setInterval(refreshAttention, ATTENTION_POLL_MS);
}
