// The Memory page: browse and search entries, edit or delete one, write a new one, and read what a session was
// given at its start. Every value is shown as text (textContent through el()): agents wrote some of these entries.
import { api, clear, el, errorText, pageData, startDaemonStatus } from "./common.js";

const data = pageData().initial || {};
const body = document.getElementById("memory-body");
const empty = document.getElementById("memory-empty");
const error = document.getElementById("memory-error");
const workspace = document.getElementById("memory-workspace");
const query = document.getElementById("memory-query");
const editor = document.getElementById("memory-editor");
let current = null;

function showError(err) {
  error.textContent = errorText(err);
  error.hidden = false;
}

function where(entry) {
  const params = new URLSearchParams({ scope: entry.scope, type: entry.type });
  if (entry.workspace) params.set("workspace", entry.workspace);
  if (entry.agent) params.set("agent", entry.agent);
  return params;
}

async function open(entry) {
  error.hidden = true;
  try {
    const { data: shown } = await api("GET", `/api/memory/entries/${encodeURIComponent(entry.slug)}?${where(entry)}`);
    current = shown.entry;
    document.getElementById("editor-title").textContent = current.name;
    document.getElementById("editor-meta").textContent = `${current.scope} ${current.type} · ${current.provenance} · ${current.path}`;
    document.getElementById("editor-description").value = current.description;
    document.getElementById("editor-body").value = current.body;
    editor.hidden = false;
  } catch (err) {
    showError(err);
  }
}

function row(entry) {
  const link = el("a", { href: "#", dataset: { slug: entry.slug } }, entry.name || entry.slug);
  link.addEventListener("click", (event) => { event.preventDefault(); open(entry); });
  const scope = entry.scope + (entry.agent ? `:${entry.agent}` : "");
  return el("tr", { dataset: { slug: entry.slug, scope: entry.scope } }, el("td", {}, scope), el("td", {}, entry.type),
    el("td", {}, link), el("td", {}, entry.description || entry.snippet || ""));
}

function render(entries) {
  clear(body).append(...entries.map(row));
  empty.hidden = entries.length > 0;
}

function renderProblems(problems) {
  clear(document.getElementById("memory-problems")).append(
    ...(problems || []).map((p) => el("li", {}, `${p.path}: ${p.problem}`)));
}

async function load() {
  error.hidden = true;
  const params = new URLSearchParams();
  if (workspace.value) params.set("workspace", workspace.value);
  try {
    if (query.value.trim()) {
      params.set("q", query.value.trim());
      const { data: found } = await api("GET", `/api/memory/search?${params}`);
      render(found.results.map((r) => ({ ...r, workspace: r.scope === "workspace" ? workspace.value : null })));
    } else {
      const { data: listed } = await api("GET", `/api/memory/entries?${params}`);
      render(listed.entries);
    }
  } catch (err) {
    showError(err);
  }
}

for (const ws of data.workspaces || []) workspace.append(el("option", { value: ws.root_dir }, ws.name || ws.root_dir));
document.getElementById("memory-filter").addEventListener("submit", (event) => { event.preventDefault(); load(); });
document.getElementById("memory-reset").addEventListener("click", () => { query.value = ""; load(); });
workspace.addEventListener("change", load);

document.getElementById("editor-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!current) return;
  try {
    await api("PATCH", `/api/memory/entries/${encodeURIComponent(current.slug)}`, {
      scope: current.scope, type: current.type, workspace: current.workspace || null, agent: current.agent || null,
      description: document.getElementById("editor-description").value,
      body: document.getElementById("editor-body").value });
    await load();
  } catch (err) {
    showError(err);
  }
});

document.getElementById("editor-delete").addEventListener("click", async () => {
  if (!current) return;
  try {
    await api("DELETE", `/api/memory/entries/${encodeURIComponent(current.slug)}?${where(current)}`);
    editor.hidden = true;
    current = null;
    await load();
  } catch (err) {
    showError(err);
  }
});

document.getElementById("new-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const value = (id) => document.getElementById(id).value;
  try {
    await api("POST", "/api/memory/entries", {
      scope: value("new-scope"), type: value("new-type"), name: value("new-name"),
      description: value("new-description"), body: value("new-body"),
      workspace: value("new-scope") === "workspace" ? workspace.value || null : null,
      agent: value("new-scope") === "agent" ? value("new-agent") || null : null });
    event.target.reset();
    await load();
  } catch (err) {
    showError(err);
  }
});

document.getElementById("snapshot-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const out = document.getElementById("snapshot-text");
  const id = document.getElementById("snapshot-session").value.trim();
  try {
    const { data: given } = await api("GET", `/api/memory/sessions/${encodeURIComponent(id)}/snapshot`);
    out.textContent = given.snapshot ? given.snapshot.text : "This session was given no memory.";
  } catch (err) {
    out.textContent = errorText(err);
  }
});

render(data.entries || []);
renderProblems((data.health || {}).problems);
startDaemonStatus();
