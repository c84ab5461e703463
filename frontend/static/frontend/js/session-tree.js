// A coordinator's tree (or any session's spawned descendants): each child under its parent, with its role and
// state, each a link to its own page. Polled while the page is open: children come and go with the steps.
import { api, clear, el, pageData } from "./common.js";

const POLL_MS = 3000;
const session = pageData().session || {};
const panel = document.getElementById("tree-panel");
const list = document.getElementById("tree-list");
const count = document.getElementById("tree-count");

function branch(children, parent) {
  const items = children.filter((c) => c.parent_session_id === parent).map((child) => {
    const label = el("a", { href: `/sessions/${encodeURIComponent(child.id)}` }, child.role || child.name || child.id);
    const detail = child.state === "stopped" && child.stop_detail ? `stopped: ${child.stop_detail}` : child.state;
    const node = el("li", { dataset: { id: child.id, state: child.state } }, label, " ", el("span", { class: "muted small" }, detail));
    const below = branch(children, child.id);
    if (below) node.append(below);
    return node;
  });
  return items.length ? el("ul", { class: "tree-list" }, ...items) : null;
}

async function refresh() {
  if (!session.id || !session.workspace_id) return;
  try {
    const { data } = await api("GET", `/api/workspaces/${session.workspace_id}/sessions/${session.id}/children`);
    const children = data.children || [];
    panel.hidden = children.length === 0;
    count.textContent = String(children.length);
    const tree = branch(children, session.id);
    clear(list);
    if (tree) list.append(...tree.childNodes);
  } catch {
    // The daemon restarting: the next poll draws the tree again; the header already says the daemon is away.
  }
}

refresh();
setInterval(refresh, POLL_MS);
