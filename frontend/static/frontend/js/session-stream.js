// The session page's transcript and the feed behind it: the live stream, its catch-up after a drop or a
// resume, and older history paged in on scroll; also whether the page counts as ready.
//
// The transcript is the server's (sessions/live/transcript.py): the stream's default mode sends a
// `transcript_snapshot` of the newest entries, then `transcript_delta` frames carrying each entry that
// changed, whole; older entries come from `GET …/transcript` pages. The page only renders them
// (entries.js). The stream URL carries the transcript fences (epoch, generation), so when EventSource
// reconnects by itself with Last-Event-ID the daemon continues with deltas after that cursor, and answers
// a reset snapshot when the fences no longer hold (the page then replaces what it shows).
//
// The stream is where the page first hears of news, so it tells the others: the record, the queue and
// the permission requests and the agent's questions are refetched from here.
import { api, errorText, mayUse } from "./common.js";
import { EntryView } from "./entries.js";
import { applyQueueMarker, refreshQueueSoon, renderQueue } from "./session-composer.js";
import { refreshElicitationsSoon } from "./session-elicitations.js";
import { decidePermission, refreshPermissionsSoon } from "./session-permissions.js";
import { $, applyStopped, data, refreshSessionSoon, scoped, session } from "./session-record.js";
import { sawOutput } from "./session-working.js";

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
// After EventSource gives up (an HTTP error, not a dropped connection), retry with this backoff.
const STREAM_RETRY_MS = [1_000, 2_000, 5_000, 10_000];

const scroller = $("transcript");
const entriesRoot = $("entries");
const indicator = $("stream-indicator");

// ---- transcript ----------------------------------------------------------------------------------

export const view = new EntryView(entriesRoot, {
  canDecide: () => session.state === "active" && mayUse("approve"),
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
    refreshQueueSoon();
    refreshPermissionsSoon();
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
  // Rows past every entry's last change are rows the transcript does not show: among them the `system` rows
  // that open and close the agent's questions (elicitations), which are not entries.
  const shown = Math.max(before, ...(frame.entries || []).map((e) => e.sequence || 0));
  if ((frame.cursor || 0) > shown) refreshElicitationsSoon();
}

// What new rows mean for the rest of the page (queue, permissions, the session record). Entries come
// whole, so only parts recorded after the previous cursor count as news.
function afterDelta(entries, before) {
  let refresh = false;
  let queueChanged = false;
  let permissionsChanged = false;
  for (const entry of entries) {
    const m = entry.message;
    if (m.role === "assistant" && entry.sequence > before) sawOutput(runningTool(m.parts || []));
    if (entry.start_sequence > before && m.role === "user") refresh = true;
    if (m.role === "assistant" && (m.metadata || {}).stop_reason && entry.sequence > before) refresh = true;
    for (const part of m.parts || []) {
      const d = part.data || {};
      if (!(d.sequence > before)) continue;
      if (part.type === "data-compozy-permission" || d.event_type === "permission") permissionsChanged = true;
      else if (d.event_type === "error" || d.event_type === "session_stopped") refresh = true;
      else if (d.event_type === "transcript_marker.created" && d.title === "mode_changed") refresh = true; // header
      else if (d.event_type === "transcript_marker.created" && applyQueueMarker(d)) queueChanged = true;
    }
  }
  if (refresh) refreshSessionSoon();
  if (queueChanged) {
    renderQueue();
    refreshQueueSoon();
  }
  if (permissionsChanged) refreshPermissionsSoon();
}

// The tool call an assistant message runs now: its last tool part's title while it has no result, null once it
// has one; undefined when the message has no tool call (the header keeps what it showed).
function runningTool(parts) {
  const tools = parts.filter((p) => p.type === "dynamic-tool");
  if (!tools.length) return undefined;
  const last = tools[tools.length - 1];
  // Cut: a title can be a pasted megabyte, and this line is rewritten every second.
  return ["output-available", "output-error"].includes(last.state) ? null
    : String(last.title || last.toolName || "a tool").slice(0, 200);
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

export function openStream(resume = false) {
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
  source.addEventListener("session_stopped", (message) => {
    applyStopped(parse(message));
    endStream("ended");
  });
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

export function resumeIfReactivated(previousState) {
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
    document.dispatchEvent(new Event("compozy:catalog")); // the header's attention count
    const change = parse(message);
    if (!change || !change.session_id || change.session_id === session.id) refreshSessionSoon();
  });
  catalog.addEventListener("error", () => {
    if (!catalog || catalog.readyState !== EventSource.CLOSED) return; // EventSource reconnects by itself
    catalog = null;
    setTimeout(() => { if (streamEnded) watchCatalog(true); }, STREAM_RETRY_MS[STREAM_RETRY_MS.length - 1]);
  });
}

// The session is gone (its record answers 404): nothing more will come, so no stream nor catalog watch stays open.
export function streamRemoved() {
  setIndicator("error", "session removed");
  streamEnded = true;
  if (source) source.close();
  watchCatalog(false);
}

// Rows appended while no stream is open (a repair of a stopped session) arrive by reopening it after the cursor.
export async function catchUp() {
  resumeStream();
}

// ---- older history ---------------------------------------------------------------------------------

let loadingOlder = false;
let pinned = true; // the reader is at the bottom (updated on scroll)
let autoOlder = 0;

export function updateOlder() {
  const button = $("load-older");
  const status = $("older-status");
  const more = hasOlder && nextBefore !== null;
  button.hidden = !more;
  status.textContent = more ? `before #${nextBefore}` : (view.empty ? "" : "Beginning of the session");
}

async function loadOlder() {
  if (loadingOlder || !hasOlder || nextBefore === null) return;
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

export function watchOlder() {
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

// ---- ready -----------------------------------------------------------------------------------------

// Interactive: the first snapshot is on screen and the composer takes input.
let isReady = false;
function ready() {
  if (isReady) return;
  isReady = true;
  document.documentElement.dataset.ready = "true";
  window.compozyReadyAt = performance.now();
}
