// The session page's diagnostics panel: activity and supervision (with the idle, elapsed and timeout
// timers ticking between records), the failure, and the optional panels shown only when the daemon has
// the route: health, recap, and transcript repair (preview, then apply).
//
// It only reads the session record and asks the daemon; a repair applied to a stopped session reopens
// the stream after the page's cursor (catchUp), so the rows it appended show in the transcript.
import { absTime, api, clear, duration, el, errorText, parseTime, pretty, relTime } from "./common.js";
import { $, data, scoped, session } from "./session-record.js";
import { catchUp } from "./session-stream.js";

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

export function renderDiagnostics() {
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

export function tickTimers() {
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

export async function loadHealth() {
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

export async function loadRecap() {
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

export function setupRepair() {
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
