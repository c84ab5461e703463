// What the agent says of its session, in the header: its mode (a switcher where it offers several), the
// context it has used of its size (a meter) and what the session has cost. Shown from each session record
// (renderAgentFacts, called by session-head.js); a switch goes through `POST …/mode`.
import { api, el, errorText, formatCost, formatTokens } from "./common.js";
import { setComposerStatus } from "./session-composer.js";
import { $, refreshSessionSoon, scoped, session } from "./session-record.js";

const modeBox = $("s-mode-box");
const modeSelect = $("s-mode");
let switching = false; // a switch is in flight: a record read before it lands must not put the old mode back

export function renderAgentFacts(s) {
  renderMode(s);
  renderContext(s.usage);
  const cost = formatCost(s.usage && s.usage.cost);
  $("s-cost").textContent = cost || "–";
}

function renderMode(s) {
  const mode = s.mode || null;
  const available = (mode && mode.available) || [];
  modeBox.hidden = !mode || !mode.current;
  if (modeBox.hidden || switching) return;
  const ids = available.map((m) => m.id);
  const known = [...modeSelect.options].map((o) => o.value);
  // The agent's current mode even when it is not among those it offers (it may report one it entered itself).
  const options = ids.includes(mode.current) ? available : [{ id: mode.current, name: mode.current }, ...available];
  if (known.join("\n") !== options.map((m) => m.id).join("\n")) {
    modeSelect.replaceChildren(...options.map((m) => el("option", { value: m.id }, m.name || m.id)));
  }
  modeSelect.value = mode.current;
  // Only a running agent can switch, and only between modes it offers.
  modeSelect.disabled = s.state !== "active" || available.length < 2;
  modeSelect.title = modeSelect.disabled && s.state !== "active"
    ? "The mode can be switched while the session is active" : "The agent's mode (session/set_mode)";
}

function renderContext(usage) {
  const meter = $("s-context");
  const label = $("s-context-label");
  const used = usage && usage.context_used;
  const size = usage && usage.context_size;
  if (typeof used !== "number" || typeof size !== "number" || size <= 0) {
    meter.hidden = true;
    label.textContent = "–";
    label.title = "";
    return;
  }
  const share = Math.min(1, used / size);
  meter.hidden = false;
  meter.value = share;
  meter.setAttribute("aria-valuetext", `${used} of ${size} tokens`);
  label.textContent = `${formatTokens(used)} / ${formatTokens(size)}`;
  label.title = `${used.toLocaleString()} of ${size.toLocaleString()} tokens (${Math.round(share * 100)}%)`;
}

async function switchMode() {
  const wanted = modeSelect.value;
  const before = (session.mode && session.mode.current) || "";
  if (!wanted || wanted === before) return;
  switching = true;
  modeSelect.disabled = true;
  setComposerStatus(`Switching the agent to ${wanted}…`);
  try {
    await api("POST", `${scoped}/mode`, { mode: wanted });
    setComposerStatus(`Mode: ${modeSelect.selectedOptions[0]?.textContent || wanted}.`, "ok", true);
  } catch (err) {
    modeSelect.value = before;
    setComposerStatus(errorText(err), "error", true);
  } finally {
    switching = false;
    refreshSessionSoon(); // the record says which mode the agent is in now
  }
}

export function setupAgentFacts() {
  modeSelect.addEventListener("change", switchMode);
}
