// The inbox: the attention list, live. The header's count (common.js) reads the same list and tells this page
// (`compozy:attention`) each time it does; the catalog stream wakes both. Permission requests are answered here,
// an agent's question (elicitation) on its session page (Open); any item can be acknowledged.
import {
  api, badge, clear, el, errorText, notificationsWanted, pageData, refreshAttention, relTime, setNotifications,
  startDaemonStatus,
} from "./common.js";
import { CLIP_CHARS, clip, visible } from "./long-text.js";

const CATALOG_RETRY_MS = 3000;
const KIND_BADGE = { permission: "running", elicitation: "running", auth: "waiting-for-auth", failed: "failed",
  task: "hung", budget: "unhealthy", quiet: "hung" };

const body = document.getElementById("attention-body");
const empty = document.getElementById("attention-empty");
const error = document.getElementById("attention-error");
const toggle = document.getElementById("notify-toggle");

function showError(err) {
  error.textContent = errorText(err);
  error.hidden = false;
}

async function act(method, url, payload) {
  error.hidden = true;
  try {
    await api(method, url, payload);
  } catch (err) {
    showError(err);
  }
  await refreshAttention();
}

function actions(item) {
  const cell = el("td", { class: "col-actions" });
  if (item.kind === "permission" && item.request_id && item.workspace_id) {
    const url = `/api/workspaces/${item.workspace_id}/sessions/${item.session_id}/permissions/${encodeURIComponent(item.request_id)}`;
    const approve = el("button", { type: "button", class: "button small approve", dataset: { action: "approve" } }, "Approve");
    const deny = el("button", { type: "button", class: "button small deny", dataset: { action: "deny" } }, "Deny");
    approve.addEventListener("click", () => act("POST", url, { decision: "approve" }));
    deny.addEventListener("click", () => act("POST", url, { decision: "deny" }));
    cell.append(approve, " ", deny, " ");
  }
  if (item.kind === "elicitation" && item.url) {
    // The question's form is on the session page (its schema does not fit a table row).
    cell.append(el("a", { class: "button small primary", href: item.url, dataset: { action: "open" } }, "Open"), " ");
  }
  const ack = el("button", { type: "button", class: "button small", dataset: { action: "ack" } }, "Acknowledge");
  ack.addEventListener("click", () => act("POST", `/api/attention/${item.id}/ack`));
  cell.append(ack);
  return cell;
}

function row(item) {
  const kind = el("td", { class: "col-status" }, badge(KIND_BADGE[item.kind] || "unknown"));
  kind.firstChild.textContent = item.kind;
  // A permission's summary names what the agent will run: shown as it runs (control and bidi characters escaped).
  const what = el("td", {},
    el("a", { class: "attention-summary", href: item.url }, visible(clip(item.summary, CLIP_CHARS * 4))));
  const since = el("td", { title: item.since }, relTime(item.since));
  return el("tr", { dataset: { id: item.id, kind: item.kind } }, kind, what, since, actions(item));
}

function render(items) {
  clear(body).append(...items.map(row));
  empty.hidden = items.length > 0;
}

function renderToggle() {
  if (!("Notification" in window)) return;
  toggle.hidden = false;
  const on = notificationsWanted();
  toggle.textContent = on ? "Notifications on" : "Notify me";
  toggle.setAttribute("aria-pressed", String(on));
  toggle.title = on ? "Turn browser notifications off" : "Show a browser notification for each new item while a Compozy tab is open";
}

toggle.addEventListener("click", async () => {
  await setNotifications(!notificationsWanted());
  renderToggle();
});

function openCatalogStream() {
  const source = new EventSource("/api/sessions/catalog-stream");
  source.addEventListener("open", () => refreshAttention());
  source.addEventListener("session_catalog_changed", () => document.dispatchEvent(new Event("compozy:catalog")));
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) setTimeout(openCatalogStream, CATALOG_RETRY_MS);
  });
}

document.addEventListener("compozy:attention", (event) => render(event.detail));
render((pageData().initial || {}).items || []);
renderToggle();
startDaemonStatus();
openCatalogStream();
