// The session page's permission requests: the requests the agent left to a person (`GET …/permissions`),
// listed in the side panel and in the bar above the composer, and the approve/deny decisions on them.
//
// The transcript's permission cards decide through here too (EntryView's onDecide) and follow the open
// requests; the transcript sits above this module, so session.js hands its marker in (onOpenRequests).
import { api, clear, debounce, el, errorText, mayUse, pretty } from "./common.js";
import { CLIP_CHARS, clip, longTextNode, visible } from "./long-text.js";
import { setComposerStatus } from "./session-composer.js";
import { $, scoped, session } from "./session-record.js";

let markOpen = () => {};

// `mark(ids)` runs with the request ids still open after each listing the daemon answered.
export function onOpenRequests(mark) {
  markOpen = mark;
}

export async function decidePermission(requestId, decision) {
  try {
    await api("POST", `${scoped}/permissions/${encodeURIComponent(requestId)}`, { decision });
    setComposerStatus(`Permission ${decision === "approve" ? "approved" : "denied"}.`, "ok", true);
  } catch (err) {
    setComposerStatus(errorText(err), "error", true);
  }
  refreshPermissions();
}

export function renderPermissions(items) {
  const panel = $("permissions-panel");
  const list = clear($("permissions-list"));
  const bar = clear($("permission-bar"));
  panel.hidden = items.length === 0;
  bar.hidden = items.length === 0;
  $("permissions-count").textContent = String(items.length);
  for (const item of items) {
    // What is approved reads as it runs: control and bidi characters as escapes (long-text.js).
    const what = visible(clip([item.kind, item.title].filter(Boolean).join(" · ") || item.request_id, CLIP_CHARS * 4));
    // A token without the approve scope watches the request; the buttons are for those who may answer.
    const buttons = () => (mayUse("approve") ? [
      el("button", { type: "button", class: "button small approve", onclick: () => decidePermission(item.request_id, "approve") }, "Approve"),
      el("button", { type: "button", class: "button small deny", onclick: () => decidePermission(item.request_id, "deny") }, "Deny"),
    ] : [el("span", { class: "muted" }, "waiting for someone who may approve")]);
    list.append(el("li", { dataset: { requestId: item.request_id } }, el("span", { class: "perm-what" }, what),
      item.tool_input !== undefined && item.tool_input !== null
        ? longTextNode(visible(pretty(item.tool_input), { lines: true }), { tag: "pre", className: "small" }) : null,
      el("span", { class: "button-row" }, ...buttons())));
    bar.append(el("div", { class: "permission-request", dataset: { requestId: item.request_id } },
      el("span", {}, "The agent asks: ", el("strong", {}, what)), el("span", { class: "button-row" }, ...buttons())));
  }
}

export async function refreshPermissions() {
  if (session.state !== "active") {
    renderPermissions([]);
    return;
  }
  try {
    const { data: body } = await api("GET", `${scoped}/permissions`);
    const items = body.permissions || [];
    renderPermissions(items);
    markOpen(new Set(items.map((p) => p.request_id)));
  } catch {
    // Cards in the transcript still carry their own buttons.
  }
}

export const refreshPermissionsSoon = debounce(refreshPermissions, 100);
