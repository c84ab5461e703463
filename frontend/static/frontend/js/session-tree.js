// A coordinator's tree (or any session's spawned descendants): each child under its parent, with its role and
// state, each a link to its own page. Polled only while the session is live and is a coordinator or has shown
// children (children come and go with the steps); otherwise drawn again on a catalog change or a state change.
import { api, clear, debounce, el, pageData } from "./common.js";

const POLL_MS = 3000;
const LIVE = new Set(["starting", "active", "stopping"]);
const session = pageData().session || {};
let current = session; // the latest record (`compozy:session`): its state decides the poll
let shown = 0; // children drawn last
let timer = null;
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
    shown = children.length;
    panel.hidden = children.length === 0;
    count.textContent = String(children.length);
    const tree = branch(children, session.id);
    clear(list);
    if (tree) list.append(...tree.childNodes);
  } catch {
    // The daemon restarting: the next poll draws the tree again; the header already says the daemon is away.
  }
  pace();
}

function pace() {
  const wanted = LIVE.has(current.state) && (current.type === "coordinator" || shown > 0);
  if (wanted && timer === null) timer = setInterval(refresh, POLL_MS);
  else if (!wanted && timer !== null) {
    clearInterval(timer);
    timer = null;
  }
}

document.addEventListener("compozy:session", (event) => {
  current = event.detail || current;
  refresh();
});
document.addEventListener("compozy:catalog", debounce(refresh, 300));
refresh();
