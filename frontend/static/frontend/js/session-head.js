// The session page's header, and what a new session record means for the rest of the page.
//
// renderHead shows the record (name, badge, state, facts, the agent's mode, context and cost, which turn
// actions apply, the slash commands it offers), then hands it on in a fixed order: the composer, the
// permission requests and the agent's questions (a stopped session has none; a count that differs from the
// questions shown refetches them), the diagnostics, the stream (reopened when the session
// was continued), and on a state change the poll's pace, the health panel and the `compozy:session` event
// that session-health.js follows. It runs at start and after each refetch of the record (session.js
// registers it with session-record.js).
import { absTime, badge, clear, el, relTime } from "./common.js";
import { renderAgentFacts } from "./session-agent.js";
import { renderCommands } from "./session-commands.js";
import { showSessionState } from "./session-composer.js";
import { loadHealth, renderDiagnostics } from "./session-diagnostics.js";
import { refreshElicitationsSoon, renderElicitations, shownElicitations } from "./session-elicitations.js";
import { renderPermissions } from "./session-permissions.js";
import { $, pollSession, session } from "./session-record.js";
import { resumeIfReactivated, view } from "./session-stream.js";
import { renderWorking } from "./session-working.js";

let lastState = session.state;
// The state of the last record the daemon sent: a provisional one (the stream's closing frame) changes what the
// page offers at once, but the health pill and `compozy:session` follow only the daemon's record, whose health
// is derived by then (read at the provisional stop, the pill said `unknown` and was never read again).
let lastRecordState = session.state;

export function renderHead() {
  const s = session;
  const previousState = lastState;
  $("session-head").dataset.state = s.state;
  $("s-name").textContent = s.name || "Unnamed session";
  $("s-badge").replaceWith(Object.assign(badge(s.badge), { id: "s-badge" }));
  const state = $("s-state");
  state.className = `state state-${s.state}`;
  state.textContent = s.state;
  // A stopped session reads as how it ended (completed, stopped by you, failed: KIND), never as `dead`.
  const outcome = s.state === "stopped" && s.outcome ? s.outcome : null;
  const pill = $("s-outcome");
  pill.hidden = !outcome;
  pill.className = `outcome outcome-${outcome ? outcome.tone : "none"}`;
  pill.textContent = outcome ? outcome.label : "";
  pill.title = outcome && s.stop_detail ? s.stop_detail : "";
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

  renderAgentFacts(s);
  renderCommands();
  renderWorking();

  const live = s.state === "starting" || s.state === "active";
  const prompting = s.prompt_state === "prompting";
  $("btn-stop").hidden = !live;
  $("btn-cancel-turn").hidden = !(s.state === "active" && prompting);
  $("btn-interrupt").hidden = !(s.state === "active" && prompting);

  showSessionState(s, lastState);
  if (s.state === "stopped" && lastState !== "stopped") {
    view.refreshPermissions(new Set());
    renderPermissions([]);
  }
  if (s.state !== "active") renderElicitations([]);
  else if ((s.pending_elicitations || 0) !== shownElicitations()) refreshElicitationsSoon();
  lastState = s.state;
  renderDiagnostics();
  resumeIfReactivated(previousState);
  if (s.state !== previousState) pollSession();
  if (s.provisional) {
    // Greyed until the daemon's record comes: the health it showed was the running session's.
    const pill = $("s-health");
    pill.classList.add("stale");
    pill.title = "health from before the stop; waiting for the daemon's record";
  }
  if (!s.provisional && s.state !== lastRecordState) {
    lastRecordState = s.state;
    // The health pill and panel would otherwise contradict the new state until their next poll.
    loadHealth();
    document.dispatchEvent(new CustomEvent("compozy:session", { detail: s }));
  }
}
