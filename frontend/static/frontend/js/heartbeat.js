// The dashboard's HEARTBEAT.md panel: each configured agent's wake policy (valid, invalid with its diagnostics, or
// none), and whether the wake service runs in this daemon start (health recomputed, last scheduler cycle).
import { api, clear, el, errorText, relTime } from "./common.js";

// Policies change when someone edits a file; a minute is soon enough for an overview.
const REFRESH_MS = 60_000;

const tbody = document.getElementById("heartbeat-body");
const service = document.getElementById("wake-service");

function policyCell(a) {
  const label = a.validation_status === "valid" ? (a.active ? "active" : "disabled") : a.validation_status;
  const cls = { active: "health-healthy", disabled: "badge-stopped", invalid: "health-stale", missing: "badge-stopped" };
  return el("td", {}, el("span", { class: `badge ${cls[label] || ""}`, title: a.source_path || "no file" }, label));
}

function render(agents) {
  clear(tbody);
  for (const a of agents) {
    // The fix is in each message: shown in the cell, not only in a tooltip keyboard and touch users cannot reach.
    const diags = (a.diagnostics || []).map((d) => el("div", { class: `diag diag-${d.severity}` },
      el("code", {}, d.code), `: ${d.message || d.severity}`));
    if (diags.length && a.source_path) diags.push(el("div", { class: "muted" }, a.source_path));
    tbody.append(el("tr", { dataset: { agent: a.agent_name, policy: a.validation_status } },
      el("td", {}, a.agent_name),
      policyCell(a),
      el("td", { class: "small" }, a.summary || el("span", { class: "muted" }, "–")),
      el("td", {}, a.digest ? el("code", { class: "small", title: a.digest }, a.digest.slice(0, 15)) : "–"),
      el("td", { class: "small" }, ...(diags.length ? diags : ["–"]))));
  }
  const svc = (agents[0] && agents[0].service) || {};
  service.textContent = svc.health_recomputed_at
    ? `wake service: ${svc.last_cycle_at ? `last cycle ${relTime(svc.last_cycle_at)}` : "no cycle yet"}`
    : "wake service: waiting for the boot health recompute";
}

async function load() {
  try {
    const { data } = await api("GET", "/api/heartbeat/agents");
    render(data.agents || []);
  } catch (err) {
    service.textContent = `HEARTBEAT.md status unavailable: ${errorText(err)}`;
  }
}

load();
setInterval(load, REFRESH_MS);
