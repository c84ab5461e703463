// The session page's data and the session record it shows: the first record comes with the page, later
// ones from `GET /api/sessions/ID`, refetched on turn boundaries (debounced) and polled between them.
//
// This is the session page's ground floor: every other session module reads the record and the page data
// from here. The modules that show a new record (the header, and the stream's end when the session is
// gone) sit above it, so session.js registers them at start-up (onRecord) and no import runs back up.
import { api, debounce, pageData } from "./common.js";

export const data = pageData();
export let session = data.session;
export const scoped = `/api/workspaces/${encodeURIComponent(session.workspace_id)}/sessions/${encodeURIComponent(session.id)}`;

export const $ = (id) => document.getElementById(id);

// The session record is refetched on turn boundaries; between them it is polled, faster while the
// state is changing.
const POLL_CHANGING_MS = 1_000;
const POLL_ACTIVE_MS = 5_000;
const POLL_STOPPED_MS = 30_000;

let render = () => {};
let removed = () => {};

// `show()` runs after each refetched record; `gone()` when the session no longer exists (404).
export function onRecord(show, gone) {
  render = show;
  removed = gone;
}

async function refreshSession() {
  try {
    const { data: body } = await api("GET", `/api/sessions/${encodeURIComponent(session.id)}`);
    session = body.session;
    render();
  } catch (err) {
    if (err.status === 404) removed();
  }
}

export const refreshSessionSoon = debounce(refreshSession, 150);

// The stream's closing `session_stopped` frame, shown until the daemon's own record arrives: after a daemon
// shutdown that refetch fails, and the header read `active` with a Stop button beneath "Session stopped".
// It is marked `provisional`: the daemon has not derived the stopped session's health yet, so the health pill
// waits for the record (session-head.js).
export function applyStopped(frame) {
  if (!frame || session.state === "stopped") return;
  session = { ...session, state: "stopped", prompt_state: "idle", badge: frame.failure ? "failed" : "stopped",
    stop_reason: frame.stop_reason || session.stop_reason, stop_detail: frame.stop_detail || "",
    failure: frame.failure || null, pending_permissions: 0, provisional: true };
  render();
}

let pollTimer = null;

// Rescheduled on every state change, so a stopped page that sees its session resume polls fast again.
export function pollSession() {
  clearTimeout(pollTimer);
  const changing = session.state === "starting" || session.state === "stopping";
  const delay = changing ? POLL_CHANGING_MS : session.state === "active" ? POLL_ACTIVE_MS : POLL_STOPPED_MS;
  pollTimer = setTimeout(async () => {
    if (!document.hidden || changing) await refreshSession();
    pollSession();
  }, delay);
}
