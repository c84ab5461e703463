// The session page: the live transcript over SSE, the composer and its queue, stop, permissions,
// diagnostics, recap and repair.
//
// The transcript is the server's (sessions/transcript.py): the stream's default mode sends a
// `transcript_snapshot` of the newest entries, then `transcript_delta` frames carrying each entry that
// changed, whole; older entries come from `GET …/transcript` pages. The page only renders them
// (entries.js). The stream URL carries the transcript fences (epoch, generation), so when EventSource
// reconnects by itself with Last-Event-ID the daemon continues with deltas after that cursor, and answers
// a reset snapshot when the fences no longer hold (the page then replaces what it shows).
import {
  absTime, api, badge, clear, debounce, duration, el, errorText, pageData, parseTime, pretty, relTime,
  startDaemonStatus,
} from "./common.js";
import { EntryView } from "./entries.js";

const data = pageData();
const features = data.features || {};
let session = data.session;
const scoped = `/api/workspaces/${encodeURIComponent(session.workspace_id)}/sessions/${encodeURIComponent(session.id)}`;

// The first snapshot holds this many entries; older ones load a page of OLDER_PAGE at a time.
const SNAPSHOT_ENTRIES = (data.transcript && data.transcript.limit) || 100;
const OLDER_PAGE = 50;
// Auto-loading older pages stops after this many in a row without the user scrolling (a short tail
// of one long message would otherwise walk the whole store).
const MAX_AUTO_OLDER = 3;
// Within this many pixels of the bottom, new entries keep the view pinned to the bottom.
const STICK_PX = 80;
// Frames arriving faster than the display are applied once per animation frame; a hidden tab gets no
// frames, so a timer flushes too.
const FLUSH_FALLBACK_MS = 100;
// The session record is refetched on turn boundaries; between them it is polled, faster while the
// state is changing.
const POLL_CHANGING_MS = 1_000;
const POLL_ACTIVE_MS = 5_000;
const POLL_STOPPED_MS = 30_000;
// After EventSource gives up (an HTTP error, not a dropped connection), retry with this backoff.
const STREAM_RETRY_MS = [1_000, 2_000, 5_000, 10_000];

const $ = (id) => document.getElementById(id);
const scroller = $("transcript");
const entriesRoot = $("entries");
const composer = $("composer");
const input = $("prompt-input");
const modeSelect = $("prompt-mode");
const sendButton = $("prompt-send");
const composerStatus = $("composer-status");
const indicator = $("stream-indicator");

startDaemonStatus(features);

// ---- transcript ----------------------------------------------------------------------------------

const view = new EntryView(entriesRoot, {
  canDecide: () => Boolean(features.permissions) && session.state === "active",
  onDecide: decidePermission,
});

// Where the page stands in the server's transcript: the cursor of the last frame applied and its fences.
const fences = {
  epoch: (data.transcript && data.transcript.epoch) || null,
  generation: (data.transcript && data.transcript.generation) || null,
};
let cursor = 0;
let hasOlder = false;
let nextBefore = null;
let snapshots = 0;

function nearBottom() {
  return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < STICK_PX;
}

function scrollToBottom() {
  scroller.scrollTop = scroller.scrollHeight;
  $("jump-latest").hidden = true;
}

function updateEmpty() {
  $("transcript-empty").hidden = !view.empty;
}

function setCursor(value) {
  cursor = value;
  const root = document.documentElement.dataset;
  root.cursor = String(cursor);
  root.epoch = String(fences.epoch ?? "");
  root.generation = String(fences.generation ?? "");
}

// ---- frames, batched per animation frame ------------------------------------------------------------

let pending = new Map(); // message id → newest entry from deltas not yet rendered
let flushScheduled = false;

function schedule() {
  if (flushScheduled) return;
  flushScheduled = true;
  requestAnimationFrame(flush);
  setTimeout(flush, FLUSH_FALLBACK_MS);
}

function flush() {
  if (!flushScheduled) return;
  flushScheduled = false;
  const batch = [...pending.values()].sort((a, b) => a.start_sequence - b.start_sequence);
  pending = new Map();
  if (!batch.length) return;
  const stick = nearBottom();
  const added = view.upsert(batch);
  updateEmpty();
  if (stick) scrollToBottom();
  else if (added) $("jump-latest").hidden = false;
}

function onSnapshot(frame) {
  fences.epoch = frame.epoch;
  fences.generation = frame.generation;
  pending = new Map();
  const firstPaint = snapshots === 0;
  snapshots += 1;
  document.documentElement.dataset.snapshots = String(snapshots);
  view.replace(frame.entries || []);
  hasOlder = Boolean(frame.has_older);
  nextBefore = frame.next_before_sequence ?? null;
  setCursor(frame.max_sequence || 0);
  updateEmpty();
  updateOlder();
  scrollToBottom();
  if (firstPaint) ready();
  else {
    // A reset: what the page derived from earlier frames may be stale too.
    refreshSessionSoon();
    if (features.queue) refreshQueueSoon();
    if (features.permissions) refreshPermissionsSoon();
  }
}

function onDelta(frame) {
  if (frame.epoch !== fences.epoch || frame.generation !== fences.generation) return; // never mixed
  const before = cursor;
  for (const entry of frame.entries || []) {
    const queued = pending.get(entry.message.id);
    if (!queued || queued.sequence < entry.sequence) pending.set(entry.message.id, entry);
  }
  setCursor(Math.max(cursor, frame.cursor || 0));
  schedule();
  afterDelta(frame.entries || [], before);
}

// What new rows mean for the rest of the page (queue, permissions, the session record). Entries come
// whole, so only parts recorded after the previous cursor count as news.
function afterDelta(entries, before) {
  let refresh = false;
  let queueChanged = false;
  let permissionsChanged = false;
  for (const entry of entries) {
    const m = entry.message;
    if (entry.start_sequence > before && m.role === "user") refresh = true;
    if (m.role === "assistant" && (m.metadata || {}).stop_reason && entry.sequence > before) refresh = true;
    for (const part of m.parts || []) {
      const d = part.data || {};
      if (!(d.sequence > before)) continue;
      if (part.type === "data-compozy-permission" || d.event_type === "permission") permissionsChanged = true;
      else if (d.event_type === "error" || d.event_type === "session_stopped") refresh = true;
      else if (d.event_type === "transcript_marker.created" && applyQueueMarker(d)) queueChanged = true;
    }
  }
  if (refresh) refreshSessionSoon();
  if (queueChanged) {
    renderQueue();
    if (features.queue) refreshQueueSoon();
  }
  if (permissionsChanged) refreshPermissionsSoon();
}

// ---- the stream ------------------------------------------------------------------------------------

let source = null;
let streamEnded = false;
let retries = 0;

function setIndicator(state, text) {
  indicator.dataset.state = state;
  indicator.textContent = text || state;
}

function streamUrl(resume) {
  // The fences ride in the URL for EventSource's own reconnects, which add only Last-Event-ID; without a
  // cursor the daemon ignores them and starts with a snapshot.
  const params = new URLSearchParams({ limit: String(SNAPSHOT_ENTRIES) });
  if (fences.epoch !== null) params.set("epoch", String(fences.epoch));
  if (fences.generation !== null) params.set("generation", String(fences.generation));
  if (resume && snapshots > 0) params.set("after_sequence", String(cursor));
  return `${scoped}/stream?${params}`;
}

function openStream(resume = false) {
  if (streamEnded) return;
  if (source) source.close();
  source = new EventSource(streamUrl(resume));
  setIndicator("connecting");
  source.addEventListener("open", () => {
    retries = 0;
    setIndicator("live");
    view.setLive(true);
  });
  source.addEventListener("transcript_snapshot", (message) => {
    const frame = parse(message);
    if (frame) onSnapshot(frame);
  });
  source.addEventListener("transcript_delta", (message) => {
    const frame = parse(message);
    if (frame) onDelta(frame);
  });
  source.addEventListener("session_stopped", () => endStream("ended"));
  source.addEventListener("error", onStreamError);
}

function parse(message) {
  try {
    return JSON.parse(message.data);
  } catch {
    return null;
  }
}

function onStreamError(message) {
  if (message.data) {
    // `event: error` from the daemon ends the stream.
    const payload = parse(message) || { error: message.data };
    endStream("error", payload.error || "stream error");
    return;
  }
  if (streamEnded) return;
  view.setLive(false);
  if (source && source.readyState === EventSource.CLOSED) {
    // The browser gave up (an HTTP error status): reopen ourselves, after the cursor, with the fences.
    const delay = STREAM_RETRY_MS[Math.min(retries, STREAM_RETRY_MS.length - 1)];
    retries += 1;
    setIndicator("reconnecting", `reconnecting in ${Math.round(delay / 1000)}s`);
    setTimeout(() => openStream(true), delay);
    refreshSessionSoon(); // a removed session (404) ends the retries
    if (snapshots === 0) ready();
  } else {
    setIndicator("reconnecting");
  }
}

function endStream(state, text) {
  flush();
  streamEnded = true;
  endedActivation = session.activated_at;
  if (source) source.close();
  view.setLive(false);
  setIndicator(state === "error" ? "error" : "ended", text || "stream ended");
  if (snapshots === 0) ready();
  refreshSessionSoon();
  watchCatalog(true);
}

// A stream that ended (a stopped session) is reopened after the cursor: to show what a repair appended, or
// the turns of a session continued here or elsewhere (`compozy session prompt ID`).
function resumeStream() {
  if (!streamEnded) return;
  streamEnded = false;
  watchCatalog(false);
  indicator.hidden = false;
  openStream(true);
}

// The activation the ended stream belonged to: a newer one means the session was continued since.
let endedActivation = null;

function resumeIfReactivated(previousState) {
  const live = session.state === "starting" || session.state === "active";
  if (streamEnded && live && (previousState === "stopped" || session.activated_at !== endedActivation)) resumeStream();
}

// While no stream is open, the catalog stream (a wake signal per catalog change) tells the page at once when
// the session is continued elsewhere; the slow poll of a stopped session is the fallback.
let catalog = null;

function watchCatalog(on) {
  if (!on) {
    if (catalog) catalog.close();
    catalog = null;
    return;
  }
  if (catalog) return;
  catalog = new EventSource("/api/sessions/catalog-stream");
  catalog.addEventListener("open", () => refreshSessionSoon()); // what changed while it was closed
  catalog.addEventListener("session_catalog_changed", (message) => {
    const change = parse(message);
    if (!change || !change.session_id || change.session_id === session.id) refreshSessionSoon();
  });
  catalog.addEventListener("error", () => {
    if (!catalog || catalog.readyState !== EventSource.CLOSED) return; // EventSource reconnects by itself
    catalog = null;
    setTimeout(() => { if (streamEnded) watchCatalog(true); }, STREAM_RETRY_MS[STREAM_RETRY_MS.length - 1]);
  });
}

// ---- older history ---------------------------------------------------------------------------------

let loadingOlder = false;
let pinned = true; // the reader is at the bottom (updated on scroll)
let autoOlder = 0;

function updateOlder() {
  const button = $("load-older");
  const status = $("older-status");
  const more = hasOlder && nextBefore !== null && Boolean(features.transcript);
  button.hidden = !more;
  status.textContent = more ? `before #${nextBefore}` : (view.empty ? "" : "Beginning of the session");
}

async function loadOlder() {
  if (loadingOlder || !hasOlder || nextBefore === null || !features.transcript) return;
  loadingOlder = true;
  $("load-older").disabled = true;
  $("older-status").textContent = "loading…";
  try {
    const { data: page } = await api("GET", `${scoped}/transcript?limit=${OLDER_PAGE}&before_sequence=${nextBefore}`);
    if (page.epoch !== fences.epoch || page.generation !== fences.generation) {
      // The transcript was reset or reassembled since the snapshot: start over from a fresh one.
      if (!streamEnded) openStream(false);
      return;
    }
    const fromBottom = scroller.scrollHeight - scroller.scrollTop;
    view.prepend(page.entries || []);
    scroller.scrollTop = scroller.scrollHeight - fromBottom; // keep what the reader was looking at
    hasOlder = Boolean(page.has_older);
    nextBefore = page.next_before_sequence ?? null;
  } catch (err) {
    $("older-status").textContent = `could not load older entries: ${errorText(err)}`;
    return;
  } finally {
    loadingOlder = false;
    $("load-older").disabled = false;
  }
  updateOlder();
  if (olderVisible() && autoOlder < MAX_AUTO_OLDER) {
    autoOlder += 1;
    loadOlder();
  }
}

function olderVisible() {
  const box = $("older").getBoundingClientRect();
  const area = scroller.getBoundingClientRect();
  return box.bottom >= area.top && box.top <= area.bottom;
}

function watchOlder() {
  const observer = new IntersectionObserver((records) => {
    if (records.some((r) => r.isIntersecting) && autoOlder < MAX_AUTO_OLDER) {
      autoOlder += 1;
      loadOlder();
    }
  }, { root: scroller, rootMargin: "300px 0px 0px 0px" });
  observer.observe($("older"));
  scroller.addEventListener("wheel", () => { autoOlder = 0; }, { passive: true });
  scroller.addEventListener("touchmove", () => { autoOlder = 0; }, { passive: true });
  scroller.addEventListener("keydown", () => { autoOlder = 0; });
  scroller.addEventListener("scroll", () => {
    pinned = nearBottom();
    if (pinned) $("jump-latest").hidden = true;
  }, { passive: true });
  // The permission bar, the composer and opened details change heights; a reader at the bottom stays there.
  const keepPinned = new ResizeObserver(() => {
    if (pinned) scroller.scrollTop = scroller.scrollHeight;
  });
  keepPinned.observe(scroller);
  keepPinned.observe(entriesRoot);
  $("load-older").addEventListener("click", () => {
    autoOlder = 0;
    loadOlder();
  });
  $("jump-latest").addEventListener("click", scrollToBottom);
}

// ---- the session record and header -------------------------------------------------------------------

async function refreshSession() {
  try {
    const { data: body } = await api("GET", `/api/sessions/${encodeURIComponent(session.id)}`);
    session = body.session;
    renderHead();
  } catch (err) {
    if (err.status === 404) {
      setIndicator("error", "session removed");
      streamEnded = true;
      if (source) source.close();
      watchCatalog(false);
    }
  }
}

const refreshSessionSoon = debounce(refreshSession, 150);

let pollTimer = null;

// Rescheduled on every state change, so a stopped page that sees its session resume polls fast again.
function pollSession() {
  clearTimeout(pollTimer);
  const changing = session.state === "starting" || session.state === "stopping";
  const delay = changing ? POLL_CHANGING_MS : session.state === "active" ? POLL_ACTIVE_MS : POLL_STOPPED_MS;
  pollTimer = setTimeout(async () => {
    if (!document.hidden || changing) await refreshSession();
    pollSession();
  }, delay);
}

let lastState = session.state;

// Prompts go to an active session, and to a stopped one, which the daemon reactivates under the same id first.
function canSend(s) {
  return s.state === "active" || s.state === "stopped";
}

function renderHead() {
  const s = session;
  const previousState = lastState;
  $("session-head").dataset.state = s.state;
  $("s-name").textContent = s.name || "Unnamed session";
  $("s-badge").replaceWith(Object.assign(badge(s.badge), { id: "s-badge" }));
  const state = $("s-state");
  state.className = `state state-${s.state}`;
  state.textContent = s.state;
  $("s-agent").textContent = s.agent_name;
  // The model the agent reports it runs; the configured one when it reports none.
  const running = (s.agent_model && s.agent_model.id) || s.model;
  const resolution = s.model_resolution || {};
  $("s-provider").textContent = [s.provider, running].filter(Boolean).join(" · ");
  $("s-provider").title = resolution.status && resolution.status !== "applied"
    ? `configured model ${resolution.requested}: ${resolution.status} (${resolution.reason || ""})` : "";
  const lastActivity = s.last_activity_at || s.updated_at;
  $("s-activity").textContent = relTime(lastActivity);
  $("s-activity").title = absTime(lastActivity);
  const stop = $("s-stop");
  stop.textContent = s.stop_reason || "–";
  stop.title = s.stop_detail || "";
  stop.className = s.stop_reason ? `reason reason-${s.stop_reason}` : "";
  const failure = $("s-failure");
  clear(failure);
  if (s.failure) {
    failure.append(el("span", { class: "failure-kind" }, s.failure.kind || "failure"),
      s.failure.summary ? el("span", { class: "failure-summary" }, ` ${s.failure.summary}`) : "");
  } else {
    failure.textContent = "–";
  }

  const live = s.state === "starting" || s.state === "active";
  const prompting = s.prompt_state === "prompting";
  $("btn-stop").hidden = !live;
  $("btn-cancel-turn").hidden = !(s.state === "active" && prompting);
  $("btn-interrupt").hidden = !(features.interrupt && s.state === "active" && prompting);

  if (!sending) sendButton.disabled = !canSend(s);
  sendButton.textContent = s.state === "stopped" ? "Resume & send" : "Send";
  sendButton.title = s.state === "stopped" ? "Continue this session (same id, context recovered) with this prompt" : "";
  // While a prompt is in flight its own status line wins (a resume passes through starting).
  if (!sending && (s.state !== lastState || !composerStatus.dataset.sticky)) {
    if (s.state === "starting") setComposerStatus("The agent is starting; prompts can be sent once it is active.");
    else if (s.state === "stopping") setComposerStatus("The session is stopping.");
    else if (s.state === "stopped") setComposerStatus("This session is stopped; sending a prompt resumes it (same id, context recovered).");
    else if (lastState !== "active" && !composerStatus.dataset.sticky) setComposerStatus("");
  }
  if (s.state === "stopped" && lastState !== "stopped") {
    view.refreshPermissions(new Set());
    renderPermissions([]);
  }
  lastState = s.state;
  renderDiagnostics();
  resumeIfReactivated(previousState);
  if (s.state !== previousState) {
    pollSession();
    // The health pill and panel would otherwise contradict the new state until their next poll.
    if (features.health) loadHealth();
    document.dispatchEvent(new CustomEvent("compozy:session", { detail: s }));
  }
}

// ---- composer --------------------------------------------------------------------------------------

function setComposerStatus(text, tone = "", sticky = false) {
  composerStatus.textContent = text;
  composerStatus.dataset.tone = tone;
  composerStatus.dataset.sticky = sticky ? "1" : "";
}

function setupModes() {
  const available = { queue: true, interrupt: Boolean(features.interrupt), steer: Boolean(features.steer) };
  for (const option of modeSelect.options) {
    option.disabled = !available[option.value];
    if (option.disabled) option.textContent = `${option.value} (not available)`;
  }
  const preferred = (data.busy_input && data.busy_input.default_mode) || "queue";
  modeSelect.value = available[preferred] ? preferred : "queue";
}

let sending = false;

async function sendPrompt(event) {
  event.preventDefault();
  const message = input.value.trim();
  if (!message) {
    input.focus();
    return;
  }
  const mode = modeSelect.value;
  const resuming = session.state === "stopped";
  sending = true;
  sendButton.disabled = true;
  setComposerStatus(resuming ? "Resuming the session…" : "Sending…");
  try {
    const { status, data: body } = await api("POST", `${scoped}/prompt`, { message, mode });
    const result = body.prompt || {};
    input.value = "";
    if (result.status === "queued") {
      addQueued({ ...result, text: message });
      renderQueue();
      setComposerStatus(`Queued at position ${result.queue_position ?? "?"}.`, "ok", true);
    } else if (result.status === "staged") {
      setComposerStatus("Steer staged for the next tool result (falls back to the queue).", "ok", true);
    } else if (result.mode === "interrupt" || result.status === "interrupted") {
      setComposerStatus(result.new_turn_id ? "Interrupted the running turn; your prompt replaces it."
        : "Interrupted the running turn.", "ok", true);
    } else if (result.mode === "steer") {
      setComposerStatus("Steer sent as a new turn with the interrupted prompt.", "ok", true);
    } else {
      const sent = status === 200 ? "Sent." : `Prompt ${result.status || "sent"}.`;
      setComposerStatus(resuming ? `Session resumed. ${sent}` : sent, "ok", true);
    }
    // A resumed session is active again by now: the refresh reopens the stream after the page's cursor.
    refreshSessionSoon();
    if (features.queue) refreshQueueSoon();
  } catch (err) {
    setComposerStatus(errorText(err), "error", true);
  } finally {
    sending = false;
    sendButton.disabled = !canSend(session);
  }
}

// ---- queue -----------------------------------------------------------------------------------------

const queue = new Map(); // queue_entry_id → entry

function addQueued(entry) {
  const id = entry.queue_entry_id;
  if (!id) return;
  const known = queue.get(id) || {};
  queue.set(id, { ...known, ...Object.fromEntries(Object.entries(entry).filter(([, v]) => v !== undefined && v !== null)) });
}

// Markers are how entries come and go when no queue route lists them; true when the queue changed.
function applyQueueMarker(d) {
  const kind = String(d.title || "");
  const evidence = (d.marker && d.marker.evidence) || {};
  const id = evidence.queue_entry_id;
  if (kind === "prompt_queued" && id) {
    if (!queue.has(id)) addQueued({ queue_entry_id: id, queue_position: evidence.queue_position,
      queue_generation: evidence.queue_generation, text: null });
    return true;
  }
  if ((kind === "prompt_accepted" || kind === "prompt_dropped") && id) {
    return queue.delete(id);
  }
  return kind === "prompt_dropped" || kind === "prompt_interrupted";
}

function renderQueue() {
  const list = clear($("queue-list"));
  const entries = [...queue.values()];
  for (const [index, entry] of entries.entries()) {
    const cancel = el("button", { type: "button", class: "button small", dataset: { entryId: entry.queue_entry_id },
      title: "Remove this prompt from the queue" }, "Cancel");
    cancel.addEventListener("click", () => cancelQueued(entry.queue_entry_id, cancel));
    list.append(el("li", { class: "queue-item", dataset: { entryId: entry.queue_entry_id } },
      el("span", { class: "queue-pos" }, String(index + 1)),
      el("span", { class: "queue-text", title: entry.text || "" },
        entry.text || el("span", { class: "muted" }, "(queued from another client)")),
      el("code", { class: "queue-id", title: `generation ${entry.queue_generation ?? "?"}` }, entry.queue_entry_id),
      cancel));
  }
  $("queue-count").textContent = String(entries.length);
  $("queue-empty").hidden = entries.length > 0;
}

async function cancelQueued(id, button) {
  button.disabled = true;
  try {
    await api("DELETE", `${scoped}/prompt/queue/${encodeURIComponent(id)}`);
    queue.delete(id);
    setComposerStatus("Queued prompt canceled.", "ok", true);
  } catch (err) {
    if (err.status === 404) queue.delete(id); // already sent or canceled elsewhere
    else setComposerStatus(errorText(err), "error", true);
  }
  renderQueue();
}

async function refreshQueue() {
  if (!features.queue) return;
  try {
    const { data: body } = await api("GET", `${scoped}/prompt/queue`);
    queue.clear();
    for (const entry of body.queue || []) {
      if (entry.status === "queued") addQueued(entry);
    }
    renderQueue();
  } catch {
    // The derived queue stays on screen.
  }
}

const refreshQueueSoon = debounce(refreshQueue, 150);

// ---- actions ---------------------------------------------------------------------------------------

async function action(button, busyText, fn) {
  const label = button.textContent;
  button.disabled = true;
  button.textContent = busyText;
  try {
    await fn();
  } catch (err) {
    setComposerStatus(errorText(err), "error", true);
  } finally {
    button.disabled = false;
    button.textContent = label;
    refreshSessionSoon();
  }
}

function setupActions() {
  $("btn-stop").addEventListener("click", (event) => {
    // Queued prompts are the user's own unsent work: make them say so before a stop strands it.
    const queued = queue.size;
    if (queued && !window.confirm(`${queued} queued prompt${queued > 1 ? "s" : ""} will not run while the session is stopped. Stop the session?`)) return;
    stopSession(event.currentTarget);
  });
  $("btn-cancel-turn").addEventListener("click", (event) => action(event.currentTarget, "Canceling…", async () => {
    const { data: body } = await api("POST", `${scoped}/prompt/cancel`);
    const canceled = (body && body.prompt && body.prompt.status) === "canceled";
    setComposerStatus(canceled ? `Turn canceled.${queue.size ? " The next queued prompt runs now." : ""}`
      : "No turn was running.", "ok", true);
  }));
  $("btn-interrupt").addEventListener("click", (event) => action(event.currentTarget, "Interrupting…", async () => {
    await api("POST", `${scoped}/interrupt`, {});
    setComposerStatus("Interrupted. A steer now resends the interrupted prompt with your correction.", "ok", true);
  }));
}

function stopSession(button) {
  action(button, "Stopping…", async () => {
    await api("POST", `${scoped}/stop`);
    setComposerStatus("Session stopped.", "ok", true);
  });
}

// ---- permissions ---------------------------------------------------------------------------------

async function decidePermission(requestId, decision) {
  try {
    await api("POST", `${scoped}/permissions/${encodeURIComponent(requestId)}`, { decision });
    setComposerStatus(`Permission ${decision === "approve" ? "approved" : "denied"}.`, "ok", true);
  } catch (err) {
    setComposerStatus(errorText(err), "error", true);
  }
  refreshPermissions();
}

function renderPermissions(items) {
  const panel = $("permissions-panel");
  const list = clear($("permissions-list"));
  const bar = clear($("permission-bar"));
  panel.hidden = items.length === 0;
  bar.hidden = items.length === 0;
  $("permissions-count").textContent = String(items.length);
  for (const item of items) {
    const what = [item.kind, item.title].filter(Boolean).join(" · ") || item.request_id;
    const buttons = () => [
      el("button", { type: "button", class: "button small approve", onclick: () => decidePermission(item.request_id, "approve") }, "Approve"),
      el("button", { type: "button", class: "button small deny", onclick: () => decidePermission(item.request_id, "deny") }, "Deny"),
    ];
    list.append(el("li", { dataset: { requestId: item.request_id } }, el("span", { class: "perm-what" }, what),
      item.tool_input !== undefined && item.tool_input !== null ? el("pre", { class: "small" }, pretty(item.tool_input)) : null,
      el("span", { class: "button-row" }, ...buttons())));
    bar.append(el("div", { class: "permission-request", dataset: { requestId: item.request_id } },
      el("span", {}, "The agent asks: ", el("strong", {}, what)), el("span", { class: "button-row" }, ...buttons())));
  }
}

async function refreshPermissions() {
  if (!features.permissions || session.state !== "active") {
    renderPermissions([]);
    return;
  }
  try {
    const { data: body } = await api("GET", `${scoped}/permissions`);
    const items = body.permissions || [];
    renderPermissions(items);
    view.refreshPermissions(new Set(items.map((p) => p.request_id)));
  } catch {
    // Cards in the transcript still carry their own buttons.
  }
}

const refreshPermissionsSoon = debounce(refreshPermissions, 100);

// ---- diagnostics ---------------------------------------------------------------------------------

function kv(root, rows) {
  clear(root);
  for (const [label, value, attrs] of rows) {
    if (value === undefined) continue;
    root.append(el("dt", {}, label), el("dd", attrs || {}, value === null || value === "" ? "–" : value));
  }
}

function secondsSince(iso) {
  const ms = parseTime(iso);
  return ms === null ? null : (Date.now() - ms) / 1000;
}

function renderDiagnostics() {
  const a = session.activity || {};
  const prompting = session.prompt_state === "prompting";
  const idle = prompting ? secondsSince(a.last_activity_at) : null;
  const elapsed = prompting ? secondsSince(a.turn_started_at) : null;
  kv($("d-activity"), [
    ["Prompt state", session.prompt_state || "none"],
    ["Turn", a.turn_id ? el("code", {}, a.turn_id) : null],
    ["Turn source", a.turn_source || null],
    ["Turn started", a.turn_started_at ? relTime(a.turn_started_at) : null, { title: absTime(a.turn_started_at) }],
    ["Last activity", a.last_activity_at
      ? `${relTime(a.last_activity_at)}${a.last_activity_kind ? ` · ${a.last_activity_kind}` : ""}` : null,
    { title: [absTime(a.last_activity_at), a.last_activity_detail].filter(Boolean).join("\n") }],
    ["Current tool", a.current_tool || null],
    ["Idle", prompting ? duration(idle) : "–", { id: "d-idle" }],
    ["Elapsed", prompting ? duration(elapsed) : "–", { id: "d-elapsed" }],
  ]);
  const sup = data.supervision || {};
  const timeoutIn = prompting && idle !== null && sup.inactivity_timeout ? sup.inactivity_timeout - idle : null;
  kv($("d-supervision"), [
    ["Warn after idle", duration(sup.inactivity_warning_after)],
    ["Cancel after idle", duration(sup.inactivity_timeout)],
    ["Cancel grace", duration(sup.timeout_cancel_grace)],
    ["Progress note every", duration(sup.progress_notify_interval)],
    ["Heartbeat every", duration(sup.activity_heartbeat_interval)],
    ["Timeout in", timeoutIn === null ? "–" : duration(timeoutIn), { id: "d-timeout-in",
      class: timeoutIn !== null && timeoutIn < (sup.inactivity_timeout - sup.inactivity_warning_after) ? "warn" : "" }],
  ]);
  renderFailure();
}

function renderFailure() {
  const root = clear($("d-failure"));
  const f = session.failure;
  const rows = [];
  if (session.stop_reason) rows.push(["Stop reason", session.stop_reason]);
  if (session.stop_detail) rows.push(["Stop detail", session.stop_detail]);
  if (f) {
    rows.push(["Kind", el("span", { class: "failure-kind" }, f.kind || "failure")]);
    if (f.summary) rows.push(["Summary", f.summary]);
    if (f.crash_bundle_path) {
      const copy = el("button", { type: "button", class: "button small", title: "Copy the path" }, "Copy");
      copy.addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText(f.crash_bundle_path));
      rows.push(["Crash bundle", el("span", { class: "bundle" }, el("code", {}, f.crash_bundle_path), " ", copy)]);
    }
    const extra = Object.fromEntries(Object.entries(f).filter(([k]) => !["kind", "summary", "crash_bundle_path"].includes(k)));
    if (Object.keys(extra).length) rows.push(["More", el("pre", { class: "small" }, pretty(extra))]);
  }
  if (!rows.length) {
    root.append(el("p", { class: "muted small" }, "No failure recorded."));
    return;
  }
  const dl = el("dl", { class: "kv" });
  kv(dl, rows);
  root.append(dl);
}

function tickTimers() {
  if (session.prompt_state !== "prompting") return;
  const a = session.activity || {};
  const idle = secondsSince(a.last_activity_at);
  const idleCell = $("d-idle");
  if (idleCell) idleCell.textContent = duration(idle);
  const elapsedCell = $("d-elapsed");
  if (elapsedCell) elapsedCell.textContent = duration(secondsSince(a.turn_started_at));
  const sup = data.supervision || {};
  const timeoutCell = $("d-timeout-in");
  if (timeoutCell && idle !== null && sup.inactivity_timeout) timeoutCell.textContent = duration(sup.inactivity_timeout - idle);
}

// ---- optional panels: health, recap, repair (shown only when the daemon has the route) -----------------

async function loadHealth() {
  const box = $("d-health-box");
  box.hidden = false;
  try {
    const { data: body } = await api("GET", `${scoped}/health`);
    const health = body.health || body;
    const rows = Object.entries(health).filter(([, v]) => v === null || typeof v !== "object")
      .map(([k, v]) => [k.replaceAll("_", " "), v === null ? null : String(v)]);
    const dl = el("dl", { class: "kv" });
    kv(dl, rows);
    clear($("d-health")).append(dl);
    const pill = $("s-health");
    if (health.status) {
      pill.textContent = `health: ${health.status}`;
      pill.className = `badge health-${health.status}`;
      pill.hidden = false;
    }
  } catch (err) {
    clear($("d-health")).append(el("p", { class: "muted small" }, errorText(err)));
  }
}

async function loadRecap() {
  const box = $("d-recap-box");
  box.hidden = false;
  const root = $("d-recap");
  try {
    const { data: body } = await api("GET", `${scoped}/recap`);
    const recap = body.recap || body;
    clear(root);
    const markerList = (items) => el("ul", { class: "marker-list" }, ...items.map((m) => el("li", {},
      el("span", { class: "note-kind" }, String(m.kind || "").replace(/^transcript_marker\./, "")), " ",
      m.summary || "", el("span", { class: "muted" }, ` · ${relTime(m.occurred_at)}`))));
    const pendingMarkers = recap.pending_markers || [];
    const recent = recap.recent_markers || [];
    const snapshot = recap.snapshot || {};
    const dl = el("dl", { class: "kv" });
    kv(dl, [
      ["Active run", recap.active_run ? el("pre", { class: "small" }, pretty(recap.active_run)) : "none"],
      ["Pending inputs", Array.isArray(recap.pending_inputs) ? String(recap.pending_inputs.length) : pretty(recap.pending_inputs ?? 0)],
      ["Recent messages", String((recap.recent_messages || []).length)],
      ["Snapshot", snapshot.generated_at ? `${relTime(snapshot.generated_at)} · cursor ${snapshot.event_cursor ?? "?"}` : null],
    ]);
    root.append(dl);
    root.append(el("h4", {}, "Needs attention"), pendingMarkers.length ? markerList(pendingMarkers) : el("p", { class: "muted" }, "nothing open"));
    root.append(el("h4", {}, "Recent markers"), recent.length ? markerList(recent) : el("p", { class: "muted" }, "none"));
  } catch (err) {
    clear(root).append(el("p", { class: "muted" }, errorText(err)));
  }
}

function renderRepair(report) {
  const root = clear($("d-repair"));
  const issues = report.issues || [];
  const actions = report.actions || [];
  root.append(el("p", { class: "small" }, report.persisted ? "Applied: the actions below were appended." : "Preview: nothing was written."));
  root.append(el("h4", {}, `Issues (${issues.length})`));
  root.append(issues.length ? el("ul", { class: "repair-list" }, ...issues.map((i) => el("li", { class: `sev-${i.severity || "info"}` },
    el("code", {}, i.code), ` ${i.severity || ""}`, i.detail ? ` · ${i.detail}` : "", i.turn_id ? el("span", { class: "muted" }, ` · ${i.turn_id}`) : null)))
    : el("p", { class: "muted small" }, "none"));
  root.append(el("h4", {}, `Actions (${actions.length})`));
  root.append(actions.length ? el("ul", { class: "repair-list" }, ...actions.map((a) => el("li", {},
    el("code", {}, a.code), a.tool_name ? ` · ${a.tool_name}` : "", a.tool_call_id ? el("span", { class: "muted" }, ` · ${a.tool_call_id}`) : null,
    a.persisted ? el("span", { class: "ok" }, " · written") : null)))
    : el("p", { class: "muted small" }, "none"));
  return actions.length > 0;
}

function setupRepair() {
  $("d-repair-box").hidden = false;
  const preview = $("repair-preview");
  const apply = $("repair-apply");
  const query = (dry) => {
    const params = new URLSearchParams();
    if (dry) params.set("dry_run", "true");
    if ($("repair-force").checked) params.set("force", "true");
    return `${scoped}/repair?${params}`;
  };
  preview.addEventListener("click", async () => {
    preview.disabled = true;
    try {
      const { data: body } = await api("POST", query(true));
      apply.disabled = !renderRepair(body.repair || body);
    } catch (err) {
      clear($("d-repair")).append(el("p", { class: "form-error" }, errorText(err)));
      apply.disabled = true;
    } finally {
      preview.disabled = false;
    }
  });
  apply.addEventListener("click", async () => {
    apply.disabled = true;
    try {
      const { data: body } = await api("POST", query(false));
      renderRepair(body.repair || body);
      await catchUp();
    } catch (err) {
      clear($("d-repair")).append(el("p", { class: "form-error" }, errorText(err)));
    }
  });
}

// Rows appended while no stream is open (a repair of a stopped session) arrive by reopening it after the cursor.
async function catchUp() {
  resumeStream();
}

// ---- start -----------------------------------------------------------------------------------------

// Interactive: the first snapshot is on screen and the composer takes input.
let isReady = false;
function ready() {
  if (isReady) return;
  isReady = true;
  document.documentElement.dataset.ready = "true";
  window.compozyReadyAt = performance.now();
}

function start() {
  updateOlder();
  for (const entry of data.queue || []) addQueued(entry);
  renderQueue();
  setupModes();
  renderHead();
  setupActions();
  composer.addEventListener("submit", sendPrompt);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) composer.requestSubmit();
  });

  // Stopped sessions too: the snapshot is their transcript, then the stream ends at once.
  if (session.state === "stopped") indicator.hidden = true; // nothing live to show
  openStream();
  watchOlder();
  pollSession();
  setInterval(tickTimers, 1_000);
  if (features.permissions) refreshPermissions();
  if (features.queue) refreshQueue();
  if (features.health) loadHealth();
  if (features.recap) {
    loadRecap();
    $("recap-refresh").addEventListener("click", loadRecap);
  }
  if (features.repair) setupRepair();
}

start();
