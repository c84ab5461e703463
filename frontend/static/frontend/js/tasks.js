// The tasks page: status, attempts and the linked sessions of every task, needs-attention first (the server
// orders them). Polled: task changes are few and slow, and a poll survives a daemon restart without a stream.
import { api, badge, clear, el, errorText, pageData, relTime, startDaemonStatus } from "./common.js";

const POLL_MS = 3000;
const STATUS_BADGE = {
  queued: "idle", running: "running", succeeded: "stopped", failed: "failed", canceled: "stopped",
  needs_attention: "hung",
};
const RETRYABLE = new Set(["failed", "canceled", "needs_attention"]);
const LIVE = new Set(["queued", "running", "needs_attention", "failed"]);

const body = document.getElementById("tasks-body");
const empty = document.getElementById("tasks-empty");
const error = document.getElementById("tasks-error");

function statusCell(task) {
  const cell = el("td", { class: "col-status" }, badge(STATUS_BADGE[task.status] || "unknown"));
  cell.firstChild.textContent = task.status;
  if (task.reason) cell.append(el("div", { class: "muted" }, task.reason));
  return cell;
}

function sessionsCell(task) {
  const cell = el("td");
  for (const run of task.runs) {
    const label = `#${run.attempt} ${run.outcome || run.status}`;
    const line = el("div", { class: "run" });
    if (run.session_id) line.append(el("a", { href: `/sessions/${run.session_id}` }, run.session_id), " ");
    line.append(el("span", { class: "muted" }, label));
    if (run.recovers_run_id) line.append(el("span", { class: "muted", title: `recovers ${run.recovers_run_id}` }, " ↺"));
    cell.append(line);
  }
  return cell;
}

async function act(task, action) {
  error.hidden = true;
  loadFailed = false;
  try {
    await api("POST", `/api/tasks/${task.id}/${action}`);
  } catch (err) {
    error.textContent = `${action} ${task.id}: ${errorText(err)}`;
    error.hidden = false;
  }
  await refresh();
}

function actionsCell(task) {
  const row = el("span", { class: "button-row" });
  if (RETRYABLE.has(task.status)) {
    row.append(el("button", { type: "button", class: "button small", onclick: () => act(task, "retry") }, "Retry"));
  }
  if (LIVE.has(task.status)) {
    row.append(el("button", { type: "button", class: "button small danger", onclick: () => act(task, "cancel") },
      "Cancel"));
  }
  return el("td", null, row);
}

function render(data) {
  clear(body);
  for (const task of data.tasks) {
    body.append(el("tr", { dataset: { taskId: task.id, status: task.status } },
      statusCell(task),
      el("td", null, el("div", null, task.title), el("div", { class: "muted" }, task.id)),
      el("td", null, `${task.attempts} / ${task.max_attempts}`,
        task.requeued ? el("div", { class: "muted" }, `requeued ${task.requeued}`) : ""),
      sessionsCell(task),
      el("td", { title: task.updated_at || "" }, relTime(task.updated_at)),
      actionsCell(task)));
  }
  empty.hidden = data.tasks.length > 0;
  const totals = data.totals;
  const attention = document.getElementById("stat-needs-attention");
  attention.textContent = totals.needs_attention;
  // Red only when something waits for a person, as on the dashboard.
  attention.closest(".stat").classList.toggle("stat-bad", Boolean(totals.needs_attention));
  document.getElementById("stat-running").textContent = totals.running_runs;
  document.getElementById("stat-requeued").textContent = totals.requeued;
  document.getElementById("stat-total").textContent = totals.total;
}

// Set while the last refresh failed: the next one that works clears its message (an action's error stays).
let loadFailed = false;

async function refresh() {
  try {
    render((await api("GET", "/api/tasks")).data);
    if (loadFailed) error.hidden = true;
    loadFailed = false;
  } catch (err) {
    error.textContent = errorText(err);
    error.hidden = false;
    loadFailed = true;
  }
}

const page = pageData();
startDaemonStatus();
render(page.initial);
setInterval(refresh, POLL_MS);
