// The dashboard: sessions across workspaces, filters, live updates from the catalog stream,
// the overview from /api/status, and the new-session form.
import {
  absTime, api, badge, cleanlyStopped, clear, debounce, el, errorText, formatCost, formatTokens, healthClass, pageData,
  relTime, shortPath, startDaemonStatus,
} from "./common.js";

const data = pageData();
const status = startDaemonStatus();

const body = document.getElementById("sessions-body");
const table = document.getElementById("sessions-table");
const empty = document.getElementById("sessions-empty");
const count = document.getElementById("sessions-count");
const loadMore = document.getElementById("load-more");
const filtersForm = document.getElementById("filters");
const live = document.getElementById("live-indicator");

const PAGE_LIMIT = 100;
// The list API's largest `limit` (ListSessionsQuery); a reload of more rows than that reads several pages.
const MAX_LIMIT = 100;
// Catalog changes arrive in bursts (start, active, stop); one refetch covers a burst.
const REFETCH_DEBOUNCE_MS = 250;
// Relative times ("2m ago") drift; repaint them now and then without refetching.
const RELATIVE_REPAINT_MS = 15_000;
// After the catalog stream drops, wait this long before opening a new one (EventSource retries too).
const CATALOG_RETRY_MS = 3_000;
// Health ages on the daemon's sweep (a stale session rings the catalog too); a slow poll is the fallback.
const HEALTH_REFRESH_MS = 30_000;

let sessions = [];
let nextCursor = null;
let lastPage = null; // the newest page's totals

// ---- filters (mirrored in the URL so a reload keeps them) ---------------------------------------

const filterInputs = {
  workspace: document.getElementById("f-workspace"),
  state: document.getElementById("f-state"),
  resumable: document.getElementById("f-resumable"),
  unhealthy: document.getElementById("f-unhealthy"),
  q: document.getElementById("f-q"),
};

function readFiltersFromUrl() {
  const params = new URLSearchParams(location.search);
  filterInputs.workspace.value = params.get("workspace") || "";
  filterInputs.state.value = params.get("state") || "";
  filterInputs.resumable.checked = params.get("resumable") === "true";
  filterInputs.unhealthy.checked = params.get("unhealthy") === "true";
  filterInputs.q.value = params.get("q") || "";
}

function currentFilters() {
  return {
    workspace: filterInputs.workspace.value,
    state: filterInputs.state.value,
    resumable: filterInputs.resumable.checked,
    unhealthy: filterInputs.unhealthy.checked,
    q: filterInputs.q.value.trim(),
  };
}

function filtersActive(f) {
  return Boolean(f.workspace || f.state || f.resumable || f.unhealthy || f.q);
}

function listUrl(cursor, limit = PAGE_LIMIT) {
  const f = currentFilters();
  const params = new URLSearchParams({ all: "true", limit: String(limit), include_health: "true" });
  if (f.workspace) params.set("workspace", f.workspace);
  if (f.state) params.set("state", f.state);
  if (f.resumable) params.set("resumable", "true");
  if (f.q) params.set("q", f.q);
  if (cursor) params.set("cursor", cursor);
  return `/api/sessions?${params}`;
}

function syncUrl() {
  const f = currentFilters();
  const params = new URLSearchParams();
  if (f.workspace) params.set("workspace", f.workspace);
  if (f.state) params.set("state", f.state);
  if (f.resumable) params.set("resumable", "true");
  if (f.unhealthy) params.set("unhealthy", "true");
  if (f.q) params.set("q", f.q);
  const query = params.toString();
  history.replaceState(null, "", query ? `?${query}` : location.pathname);
}

// ---- rendering ----------------------------------------------------------------------------------

// A worktree session's branch and how many files it changed (as of its last checkpoint).
function worktreeNote(s) {
  const wt = s.worktree;
  if (!wt) return null;
  const files = typeof wt.changed_files === "number"
    ? ` · ${wt.changed_files} file${wt.changed_files === 1 ? "" : "s"} changed` : "";
  return el("span", { class: "muted small branch", title: wt.path || "" }, `⎇ ${wt.branch}${files}`);
}

function row(s) {
  const lastActivity = s.last_activity_at || s.updated_at;
  const failure = s.failure || null;
  const href = `/sessions/${encodeURIComponent(s.id)}`;
  const waiting = s.pending_permissions || 0;
  const tr = el("tr", { dataset: { sessionId: s.id, state: s.state, badge: s.badge, pendingPermissions: waiting } });
  tr.append(
    el("td", { class: "col-status" }, badge(s.badge),
      // A running badge alone hides that the agent is blocked on a person.
      waiting ? el("span", { class: "chip chip-approval", title: `${waiting} permission request${waiting > 1 ? "s" : ""} waiting for a decision` },
        waiting > 1 ? `needs approval · ${waiting}` : "needs approval") : null,
      el("span", { class: `state-text state-${s.state}` }, s.state),
      // How a stopped session ended, and a running turn that has gone quiet (sessions/core/display.py).
      s.state === "stopped" && s.outcome
        ? el("span", { class: `outcome outcome-${s.outcome.tone}`, title: s.stop_detail || "" }, s.outcome.label) : null,
      s.quiet ? el("span", { class: "quiet-notice", title: "The agent has said nothing for this long" }, s.quiet.text)
        : null),
    el("td", { class: "col-session" },
      el("a", { href, class: "session-link" }, s.name || "Unnamed session"),
      el("code", { class: "session-id" }, s.id),
      previewLine(s.preview)),
    el("td", { class: "col-agent" }, el("span", {}, s.agent_name),
      el("span", { class: "muted small" }, [s.provider, s.model].filter(Boolean).join(" · "))),
    el("td", { class: "col-workspace", title: s.workspace_path || s.workspace_id },
      el("span", {}, shortPath(s.workspace_path) || s.workspace_id),
      el("span", { class: "muted small path" }, s.workspace_path || ""),
      worktreeNote(s)),
    el("td", { class: "col-activity", title: absTime(lastActivity), dataset: { time: lastActivity || "" } },
      relTime(lastActivity)),
    costCell(s.usage),
    el("td", { class: "col-stop" }, s.stop_reason
      ? el("span", { class: `reason reason-${s.stop_reason}`, title: s.stop_detail || "" }, s.stop_reason)
      : el("span", { class: "muted" }, "–")),
    el("td", { class: "col-failure" }, failure
      ? el("span", { class: "failure-cell" },
        el("span", { class: "failure-kind" }, failure.kind || "failure"),
        failure.summary ? el("span", { class: "failure-summary", title: failure.summary }, failure.summary) : null)
      : el("span", { class: "muted" }, "–")),
    healthCell(s),
  );
  tr.addEventListener("click", (event) => {
    if (event.target.closest("a, button")) return;
    location.href = href;
  });
  return tr;
}

// The session's last message, or the tool its turn runs now: one line, as text (agent output never runs here).
function previewLine(preview) {
  if (!preview || !preview.text) return null;
  return el("span", { class: `preview preview-${preview.kind}`, title: preview.text },
    preview.kind === "tool" ? `running: ${preview.text}` : preview.text);
}

// What the agent reports the session has cost; the context it has used in the tooltip.
function costCell(usage) {
  const cost = formatCost(usage && usage.cost);
  const context = usage && typeof usage.context_used === "number" && usage.context_size
    ? `context ${formatTokens(usage.context_used)} / ${formatTokens(usage.context_size)}` : "";
  return el("td", { class: "col-cost", title: context }, cost || el("span", { class: "muted" }, "–"));
}

// Health and wake eligibility (docs/reference/health.md §1): the pill is the health value, the line under it says whether
// the wake service may target the session, or the closed reason it may not.
function healthCell(s) {
  const h = s.health;
  if (!h) return el("td", { class: "col-health" }, el("span", { class: "muted" }, "–"));
  // A stopped session has no agent process: `dead` is the wake service's word for it, no alarm. Its outcome is in
  // the status cell; only a failure is shown as one (there).
  if (s.state === "stopped") {
    return el("td", { class: "col-health", dataset: { health: h.health, clean: cleanlyStopped(s) ? "true" : "" } },
      el("span", { class: "muted small", title: `health ${h.health}: no agent process runs; wake: ${h.ineligibility_reason || "–"}` },
        "not running"));
  }
  const wake = h.eligible_for_wake ? "wake ok" : h.ineligibility_reason || "no wake";
  const clean = h.health === "dead" && cleanlyStopped(s);
  return el("td", { class: "col-health", dataset: { health: h.health, clean: clean ? "true" : "" } },
    el("span", { class: `health-pill ${healthClass(h.health, s)}`,
      title: clean ? "stopped without a failure: no agent process runs"
        : `state ${h.state}${h.attachable ? ", attachable" : ""}` },
    h.health),
    el("span", { class: "muted small wake-state", title: "wake eligibility" }, wake));
}

// Unhealthy is a client-side filter of the loaded rows; a clean stop is not a health problem.
function visible() {
  if (!currentFilters().unhealthy) return sessions;
  return sessions.filter((s) => s.health && s.health.health !== "healthy" && !cleanlyStopped(s));
}

function render(page) {
  clear(body);
  const fragment = document.createDocumentFragment();
  const shown = visible();
  for (const s of shown) fragment.append(row(s));
  body.append(fragment);
  const none = shown.length === 0;
  table.hidden = none;
  empty.hidden = !none;
  if (none) {
    const filtered = filtersActive(currentFilters());
    empty.querySelector(".empty-title").textContent = filtered ? "No sessions match these filters" : "No sessions yet";
    empty.querySelector(".empty-text").hidden = filtered;
  }
  const total = page ? page.total : sessions.length;
  if (none) count.textContent = "";
  else if (currentFilters().unhealthy) {
    // Counted against what is loaded: the daemon does not filter by health.
    count.textContent = `${shown.length} shown of ${sessions.length} loaded${total > sessions.length ? ` (${total} in all)` : ""}`;
  } else count.textContent = `Showing ${shown.length} of ${total}`;
  loadMore.hidden = !nextCursor;
  renderListStats();
}

function repaintTimes() {
  for (const cell of body.querySelectorAll("td.col-activity")) cell.textContent = relTime(cell.dataset.time);
}

let loadSeq = 0;
// How many rows the person asked to see: "Load more" raises it before its fetch, so a refresh that overtakes
// that fetch still loads them (a refresh started before the click used to land after it and cut the list back).
let asked = PAGE_LIMIT;

// A refresh keeps as many rows as are loaded or asked for (what "Load more" added stays; a list loaded to its
// end stays whole); a filter change starts over with one page. The latest load wins; older ones are dropped.
async function reload({ keep = true } = {}) {
  const mine = ++loadSeq;
  if (!keep) asked = PAGE_LIMIT;
  let want = PAGE_LIMIT;
  if (keep) want = nextCursor ? Math.max(asked, sessions.length) : Infinity;
  try {
    let rows = [];
    let cursor = null;
    let page = null;
    do {
      ({ data: page } = await api("GET", listUrl(cursor, Math.min(MAX_LIMIT, want - rows.length))));
      if (mine !== loadSeq) return; // a newer filter change won the race
      const seen = new Set(rows.map((s) => s.id));
      rows = rows.concat((page.sessions || []).filter((s) => !seen.has(s.id)));
      cursor = page.page && page.page.has_more ? page.page.next_cursor : null;
    } while (cursor && rows.length < want);
    sessions = rows;
    nextCursor = cursor;
    lastPage = page.page;
    render(page.page);
    syncWorkspaces();
  } catch (err) {
    if (mine !== loadSeq) return;
    count.textContent = `Could not load sessions: ${errorText(err)}`;
  }
}

// The workspace filter and the New session suggestions are rendered with the page: a session in a workspace
// registered since (`compozy session new --cwd /new/dir`) brings its workspace into both.
async function syncWorkspaces() {
  const known = new Set([...filterInputs.workspace.options].map((o) => o.value));
  if (sessions.every((s) => known.has(s.workspace_id))) return;
  try {
    const { data } = await api("GET", "/api/workspaces");
    const suggestions = document.getElementById("ns-workspaces");
    for (const ws of data.workspaces || []) {
      if (known.has(ws.id)) continue;
      filterInputs.workspace.append(el("option", { value: ws.id }, ws.name || ws.root_dir));
      if (suggestions) suggestions.append(el("option", { value: ws.root_dir }, ws.name));
      known.add(ws.id);
    }
  } catch {
    // The next refresh tries again; the list itself is already shown.
  }
}

async function more() {
  if (!nextCursor) return;
  const mine = ++loadSeq;
  asked = sessions.length + PAGE_LIMIT;
  loadMore.disabled = true;
  try {
    const { data: page } = await api("GET", listUrl(nextCursor));
    if (mine !== loadSeq) return; // a refresh started since: it loads what was asked for
    const seen = new Set(sessions.map((s) => s.id));
    sessions = sessions.concat((page.sessions || []).filter((s) => !seen.has(s.id)));
    nextCursor = page.page && page.page.has_more ? page.page.next_cursor : null;
    lastPage = page.page;
    render(page.page);
  } catch (err) {
    if (mine !== loadSeq) return;
    count.textContent = `Could not load more: ${errorText(err)}`;
  } finally {
    loadMore.disabled = false;
  }
}

// ---- overview (from /api/status, and the loaded rows) -------------------------------------------

// Counted from the loaded rows: /api/status has no per-badge or permission totals.
function renderListStats() {
  document.getElementById("stat-running").textContent = sessions.filter((s) => s.badge === "running").length;
  const approval = sessions.filter((s) => s.pending_permissions > 0).length;
  const stat = document.getElementById("stat-approval");
  stat.textContent = approval;
  stat.closest(".stat").classList.toggle("stat-warn", approval > 0);
}

function renderOverview(st) {
  const byStatus = (st.sessions && st.sessions.by_status) || {};
  const failures = (st.health && st.health.failures) || {};
  document.getElementById("stat-active").textContent = byStatus.active || 0;
  document.getElementById("stat-stopped").textContent = byStatus.stopped || 0;
  const failed = document.getElementById("stat-failed");
  failed.textContent = failures.total || 0;
  failed.closest(".stat").classList.toggle("stat-bad", Boolean(failures.total));
  renderListStats();
  const list = clear(document.getElementById("recent-failures"));
  const recent = (failures.recent || []).slice(0, 4);
  if (!recent.length) list.append(el("li", { class: "muted" }, "none"));
  for (const f of recent) {
    list.append(el("li", {},
      el("a", { href: `/sessions/${encodeURIComponent(f.session_id)}` }, el("span", { class: "failure-kind" }, f.failure_kind)),
      " ", el("span", { class: "muted small", title: f.summary || "" }, `${f.agent_name} · ${f.summary || ""}`)));
  }
}

document.addEventListener("compozy:status", (event) => renderOverview(event.detail));

// ---- live updates: the catalog stream is a wake signal; we refetch the list -------------------------

const refetch = debounce(() => {
  reload().then(() => status.last && renderOverview(status.last));
  status.refresh();
}, REFETCH_DEBOUNCE_MS);

function openCatalogStream() {
  const source = new EventSource("/api/sessions/catalog-stream");
  source.addEventListener("open", () => {
    live.dataset.state = "live";
    live.textContent = "live";
    refetch(); // whatever changed between the page render (or a drop) and this connection
  });
  source.addEventListener("session_catalog_changed", () => {
    refetch();
    document.dispatchEvent(new Event("compozy:catalog")); // the header's attention count
  });
  source.addEventListener("error", () => {
    live.dataset.state = "reconnecting";
    live.textContent = "reconnecting";
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(openCatalogStream, CATALOG_RETRY_MS);
    }
  });
}

// ---- new session ---------------------------------------------------------------------------------

const form = document.getElementById("new-session-form");
const formError = document.getElementById("ns-error");
const submit = document.getElementById("ns-submit");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  formError.hidden = true;
  const workspacePath = form.workspace_path.value.trim();
  if (!workspacePath.startsWith("/")) {
    formError.textContent = "Enter the workspace as an absolute path, e.g. /home/you/project.";
    formError.hidden = false;
    form.workspace_path.focus();
    return;
  }
  const payload = { agent_name: form.agent_name.value, workspace_path: workspacePath };
  if (form.name.value.trim()) payload.name = form.name.value.trim();
  if (form.prompt.value.trim()) payload.prompt = form.prompt.value.trim();
  if (form.isolation.checked) payload.isolation = "worktree";
  submit.disabled = true;
  submit.textContent = "Starting…";
  try {
    const { data: created } = await api("POST", "/api/sessions", payload);
    location.href = `/sessions/${encodeURIComponent(created.session.id)}`;
  } catch (err) {
    formError.textContent = errorText(err);
    formError.hidden = false;
    submit.disabled = false;
    submit.textContent = "Start session";
  }
});

// ---- wiring --------------------------------------------------------------------------------------

readFiltersFromUrl();
for (const input of [filterInputs.workspace, filterInputs.state, filterInputs.resumable]) {
  input.addEventListener("change", () => {
    syncUrl();
    reload({ keep: false });
  });
}
// Health is filtered here, over the loaded rows (the daemon does not filter by health). Turned on with more
// pages unloaded, it loads them all first, as opening `/?unhealthy=true` does: it said "No sessions match"
// while the failed ones sat beyond the first page.
filterInputs.unhealthy.addEventListener("change", () => {
  syncUrl();
  if (filterInputs.unhealthy.checked && nextCursor) {
    asked = Infinity;
    reload();
  } else render(lastPage);
});
filterInputs.q.addEventListener("input", debounce(() => {
  syncUrl();
  reload({ keep: false });
}, 200));
filtersForm.addEventListener("submit", (event) => event.preventDefault());
loadMore.addEventListener("click", more);

if (!filtersActive(currentFilters()) && data.initial) {
  // First paint from the data embedded in the page; the catalog stream keeps it fresh.
  sessions = data.initial.sessions || [];
  nextCursor = data.initial.page && data.initial.page.has_more ? data.initial.page.next_cursor : null;
  lastPage = data.initial.page;
  render(data.initial.page);
} else {
  reload();
}
openCatalogStream();
setInterval(repaintTimes, RELATIVE_REPAINT_MS);
setInterval(() => reload(), HEALTH_REFRESH_MS);
document.documentElement.dataset.ready = "true";
