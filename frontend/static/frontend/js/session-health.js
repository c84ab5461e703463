// The session page's health pill and wake panel, from `GET …/inspect` (health, wake state, the HEARTBEAT.md
// snapshot it would be woken under). session-diagnostics.js shows the raw health fields; this adds the summary.
import { api, clear, cleanlyStopped, el, healthClass, pageData, relTime } from "./common.js";

// Health is metadata the daemon ages on its own; refreshing twice a minute keeps the pill honest.
const REFRESH_MS = 30_000;

let session = pageData().session || {};
const scoped = `/api/workspaces/${encodeURIComponent(session.workspace_id)}/sessions/${encodeURIComponent(session.id)}`;

function row(dl, label, value) {
  dl.append(el("dt", {}, label), el("dd", {}, value === null || value === undefined || value === "" ? "–" : value));
}

async function load() {
  let data;
  try {
    ({ data } = await api("GET", `${scoped}/inspect`));
  } catch {
    return; // the panel stays hidden; the session's own health box shows the error
  }
  const h = data.health;
  const pill = document.getElementById("s-health");
  pill.textContent = h.health;
  pill.className = `badge ${healthClass(h.health, session)}`;
  pill.title = `health ${h.health}, state ${h.state}; ${h.eligible_for_wake ? "wake ok" : h.ineligibility_reason}`
    + (h.health === "dead" && cleanlyStopped(session) ? "\nstopped without a failure: no agent process runs" : "");
  pill.dataset.health = h.health;
  // `dead` is the wake service's word for a stopped session (no agent process): no alarm to a person, whose header
  // shows the session's outcome instead. The Wake panel below keeps the value.
  pill.hidden = session.state === "stopped";
  const wake = data.wake_state || {};
  const last = data.last_wake_event;
  const dl = clear(document.getElementById("d-wake"));
  row(dl, "eligible", h.eligible_for_wake ? "yes" : `no (${h.ineligibility_reason})`);
  row(dl, "policy", data.policy ? data.policy.validation_status : "none");
  row(dl, "snapshot", data.policy_snapshot_id);
  row(dl, "last wake", wake.last_wake_at ? relTime(wake.last_wake_at) : null);
  row(dl, "last decision", last ? `${last.result} (${last.reason})` : null);
  document.getElementById("d-wake-box").hidden = false;
}

load();
setInterval(load, REFRESH_MS);
// session-head.js announces each state change (a stop, a crash, a resume): the pill follows at once, not at the next poll.
document.addEventListener("compozy:session", (event) => {
  session = event.detail || session;
  load();
});
