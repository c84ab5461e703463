// The session header's line for a running turn (issue 48): "working · 40s · Run: npm test", and once the agent
// has said nothing for `[session.supervision] quiet_notice_after`, "no output for 1m 20s" instead, so a hung turn
// never reads as a healthy one. The rule is the daemon's (sessions/core/display.py): its record brings `quiet`
// when the bound has passed; between records the page counts on from the last output it saw streamed.
import { parseTime } from "./common.js";
import { $, data, session } from "./session-record.js";

let lastOutputMs = null; // Date.now() of the last streamed row of the running turn
let streamTool = null; // the running tool call the stream last showed (null once it finished)

// "1m 20s", as `quiet_text` on the daemon: whole seconds, minutes past one, hours past sixty.
export function spoken(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}

// The stream saw rows of the running turn: output, and the tool it runs now (`null` when none runs).
export function sawOutput(tool) {
  lastOutputMs = Date.now();
  if (tool !== undefined) streamTool = tool;
  renderWorking();
}

export function renderWorking() {
  const line = $("s-working");
  const s = session;
  if (s.state !== "active" || s.prompt_state !== "prompting") {
    line.hidden = true;
    lastOutputMs = null;
    streamTool = null;
    return;
  }
  const a = s.activity || {};
  const now = Date.now();
  const started = parseTime(a.turn_started_at);
  const fromRecord = [parseTime(a.last_activity_at), started, parseTime(s.quiet && s.quiet.since)]
    .filter((t) => t !== null);
  const last = Math.max(lastOutputMs ?? -Infinity, ...fromRecord);
  const waiting = (s.pending_permissions || 0) + (s.pending_elicitations || 0) > 0;
  const noticeAfter = (data.supervision || {}).quiet_notice_after || 0;
  const silent = Number.isFinite(last) ? (now - last) / 1000 : 0;
  const quiet = !waiting && noticeAfter > 0 && silent >= noticeAfter;
  const tool = streamTool ?? (a.current_tool ? String(a.current_tool).slice(0, 200) : null);
  line.hidden = false;
  line.dataset.quiet = quiet ? "true" : "";
  if (quiet) {
    line.textContent = `no output for ${spoken(silent)}`;
    line.title = "The agent has said nothing for this long; it may be stuck (a network, a login). "
      + "Interrupt or stop it, or wait.";
  } else {
    const parts = [waiting ? "waiting for you" : "working"];
    if (started !== null) parts.push(spoken((now - started) / 1000));
    if (tool && !waiting) parts.push(tool);
    line.textContent = parts.join(" · ");
    line.title = "The running turn: time since it started, and the tool it runs now";
  }
}
