// The session's work, for a session with a worktree of its own (docs/reference/worktrees.md): its branch, what it
// changed (since its base, or in one turn), its checkpoints with Rewind and Fork, and Commit and Merge with their
// outcome. A session without a worktree shows none of it.
//
// It reads the worktree routes and is refreshed when the record changes (a turn's end takes a checkpoint): the
// checkpoints are refetched, and the changes only when a new checkpoint came or the person picked another turn.
// Turns a rewind took back stay in the transcript (events are append-only); they are marked here as rewound.
import { absTime, api, clear, el, errorText, relTime } from "./common.js";
import { $, scoped, session } from "./session-record.js";

// A file's diff shows this many lines at first; "Show all" adds the rest (the daemon already bounds a patch).
const DIFF_LINES_SHOWN = 400;
// A diff line longer than this wraps instead of widening the panel (a minified file's one line).
const LONG_LINE = 300;

let checkpoints = [];
let shownTurn = "";
let lastCheckpointCount = -1;
let busy = false;
const rewoundTurns = new Set();

const STATUS_MARK = { added: "A", modified: "M", deleted: "D", renamed: "R" };

function say(text, tone) {
  const node = $("work-status");
  node.textContent = text;
  node.className = `work-status small${tone ? ` ${tone}` : ""}`;
}

// A unified diff as lines, each coloured by what it is; every line is text, never markup.
function diffBody(patch) {
  const lines = patch.replace(/\n$/, "").split("\n");
  const body = el("div", { class: "diff-body", role: "group" });
  const add = (from, to) => {
    for (const line of lines.slice(from, to)) {
      let kind = "diff-ctx";
      if (line.startsWith("@@")) kind = "diff-hunk";
      else if (/^(diff --git|index |--- |\+\+\+ |new file|deleted file|similarity|rename |old mode|new mode)/.test(line)) kind = "diff-file";
      else if (line.startsWith("+")) kind = "diff-add";
      else if (line.startsWith("-")) kind = "diff-del";
      body.append(el("div", { class: `diff-line ${kind}${line.length > LONG_LINE ? " diff-long" : ""}` }, line));
    }
  };
  add(0, DIFF_LINES_SHOWN);
  if (lines.length > DIFF_LINES_SHOWN) {
    const more = el("button", { type: "button", class: "button small" },
      `Show all ${lines.length} lines`);
    more.addEventListener("click", () => {
      more.remove();
      add(DIFF_LINES_SHOWN, lines.length);
    });
    body.append(more);
  }
  return body;
}

function fileNode(file) {
  const summary = el("summary", { class: "work-file-head" },
    el("span", { class: `work-file-status status-${file.status}`, title: file.status }, STATUS_MARK[file.status] || "?"),
    el("span", { class: "diff-path" }, file.old_path ? `${file.old_path} → ${file.path}` : file.path),
    el("span", { class: "diff-count" },
      el("span", { class: "diff-count-add" }, `+${file.additions}`), " ",
      el("span", { class: "diff-count-del" }, `−${file.deletions}`)));
  const details = el("details", { class: "work-file", dataset: { path: file.path, status: file.status } }, summary);
  if (file.patch) {
    details.append(diffBody(file.patch));
  } else {
    const why = { binary: "Binary file: not shown.", too_large: `Patch too large to show (${file.patch_bytes} bytes).`,
      budget: "Left out: the changes' size bound was reached." }[file.patch_omitted] || "No patch.";
    details.append(el("p", { class: "muted small" }, why));
  }
  return details;
}

async function loadChanges() {
  const root = clear($("work-files"));
  const query = shownTurn ? `?turn=${encodeURIComponent(shownTurn)}` : "";
  let body;
  try {
    ({ data: body } = await api("GET", `${scoped}/changes${query}`));
  } catch (err) {
    $("work-summary").textContent = "";
    root.append(el("p", { class: "form-error small" }, errorText(err)));
    return;
  }
  const n = body.files.length;
  $("work-summary").textContent = n
    ? `${n} file${n > 1 ? "s" : ""} changed, +${body.additions} −${body.deletions}`
    : "No changes.";
  $("work-summary").title = `compared with ${body.base.slice(0, 12)}`;
  for (const file of body.files) root.append(fileNode(file));
  if (body.truncated) {
    root.append(el("p", { class: "muted small" },
      `Some patches were left out for size (${body.patch_bytes} bytes in all; bound ${body.patch_limit}). `
      + "The whole diff: `git diff` in the worktree."));
  }
}

function renderTurnChoice() {
  const select = $("work-turn");
  const keep = shownTurn;
  clear(select);
  select.append(el("option", { value: "" }, "All changes since the start"));
  for (const c of checkpoints) {
    if (!c.turn_id || c.reason !== "turn") continue;
    select.append(el("option", { value: c.turn_id }, `Turn of checkpoint ${c.n}${c.rewound ? " (rewound)" : ""}`));
  }
  select.value = [...select.options].some((o) => o.value === keep) ? keep : "";
  shownTurn = select.value;
}

function renderCheckpoints() {
  const list = clear($("work-checkpoints"));
  $("work-checkpoints-empty").hidden = checkpoints.length > 0;
  for (const c of [...checkpoints].reverse()) {
    const rewind = el("button", { type: "button", class: "button small", dataset: { action: "rewind" },
      title: "Take the files and the conversation back to this checkpoint" }, "Rewind");
    rewind.addEventListener("click", () => rewindTo(c));
    const fork = el("button", { type: "button", class: "button small", dataset: { action: "fork" },
      title: "A new session with its own worktree from this checkpoint" }, "Fork");
    fork.addEventListener("click", () => forkAt(c));
    const what = c.reason === "rewind" ? "before a rewind" : c.turn_id ? "turn" : c.reason;
    list.append(el("li", { class: `work-checkpoint${c.rewound ? " rewound" : ""}`, dataset: { n: c.n } },
      el("span", { class: "work-checkpoint-n" }, `#${c.n}`),
      el("span", { class: "muted small", title: absTime(c.created_at) }, `${what} · ${relTime(c.created_at)}`),
      c.rewound ? el("span", { class: "badge" }, "rewound") : null,
      el("code", { class: "small", title: c.commit }, c.commit.slice(0, 8)),
      el("span", { class: "button-row" }, rewind, fork)));
  }
}

// Entries of turns a rewind took back: kept in the transcript, shown as taken back.
function markRewound(root) {
  for (const node of root.querySelectorAll("[data-turn]")) {
    node.classList.toggle("entry-rewound", rewoundTurns.has(node.dataset.turn));
  }
}

// Entries added to the transcript (a streamed entry, older history paged in): only they are marked, and only
// once some turn was rewound; noteRewound marks every entry when the set grows.
function markAdded(mutations) {
  if (rewoundTurns.size === 0) return;
  for (const mutation of mutations) {
    for (const node of mutation.addedNodes) {
      if (node.nodeType !== Node.ELEMENT_NODE) continue;
      if (node.matches("[data-turn]")) node.classList.toggle("entry-rewound", rewoundTurns.has(node.dataset.turn));
      markRewound(node);
    }
  }
}

function noteRewound(turns) {
  for (const turn of turns) rewoundTurns.add(turn);
  markRewound($("entries"));
}

async function loadCheckpoints() {
  let body;
  try {
    ({ data: body } = await api("GET", `${scoped}/checkpoints`));
  } catch (err) {
    say(errorText(err), "bad");
    return false;
  }
  checkpoints = body.checkpoints;
  noteRewound(checkpoints.filter((c) => c.rewound && c.turn_id).map((c) => c.turn_id));
  renderCheckpoints();
  renderTurnChoice();
  const changed = checkpoints.length !== lastCheckpointCount;
  lastCheckpointCount = checkpoints.length;
  return changed;
}

async function act(label, fn) {
  if (busy) return;
  busy = true;
  for (const b of $("work-panel").querySelectorAll("button")) b.disabled = true;
  say(`${label}…`);
  try {
    await fn();
  } catch (err) {
    const files = err.body && err.body.diagnostic && err.body.diagnostic.evidence
      && err.body.diagnostic.evidence.files;
    say(`${label} failed: ${errorText(err)}${files && files.length ? ` (${files.join(", ")})` : ""}`, "bad");
  } finally {
    busy = false;
    for (const b of $("work-panel").querySelectorAll("button")) b.disabled = false;
  }
}

function rewindTo(c) {
  if (session.prompt_state === "prompting") {
    say("A turn is running: rewind once it ends (or interrupt it).", "bad");
    return;
  }
  if (!window.confirm(`Rewind the files and the conversation to checkpoint ${c.n}? `
    + "The state now is kept as a checkpoint first, so this can be undone.")) return;
  act("Rewind", async () => {
    const { data: body } = await api("POST", `${scoped}/rewind`, { checkpoint: c.n });
    noteRewound(body.rewound_turns);
    say(`Rewound to checkpoint ${body.checkpoint}; the state before is checkpoint ${body.before.n}.`, "ok");
    await refreshWork(true);
  });
}

function forkAt(c) {
  act("Fork", async () => {
    const { data: body } = await api("POST", `${scoped}/fork`, { checkpoint: c.n });
    const id = body.session.id;
    say("", "");
    const status = $("work-status");
    status.append(`Forked at checkpoint ${c.n}: `, el("a", { href: `/sessions/${encodeURIComponent(id)}` }, id));
  });
}

function setupForms() {
  $("work-turn").addEventListener("change", () => {
    shownTurn = $("work-turn").value;
    loadChanges();
  });
  $("work-refresh").addEventListener("click", () => refreshWork(true));
  $("work-commit").addEventListener("submit", (event) => {
    event.preventDefault();
    const message = $("work-commit-message").value.trim();
    act("Commit", async () => {
      const { data: body } = await api("POST", `${scoped}/commit`, message ? { message } : {});
      say(body.committed ? `Committed ${body.commit.slice(0, 8)} on ${body.branch}: ${body.message}`
        : "Nothing to commit.", "ok");
      $("work-commit-message").value = "";
    });
  });
  $("work-merge").addEventListener("submit", (event) => {
    event.preventDefault();
    const into = $("work-merge-into").value.trim();
    const squash = $("work-merge-squash").checked;
    act("Merge", async () => {
      const payload = { squash };
      if (into) payload.into = into;
      const { data: body } = await api("POST", `${scoped}/merge`, payload);
      const note = body.uncommitted ? " The worktree holds changes not committed yet: commit them to merge them." : "";
      say(body.up_to_date ? `${body.target} already has everything committed on the branch.${note}`
        : `Merged into ${body.target} (${body.commit.slice(0, 8)}): ${body.files.length} file(s).${note}`, "ok");
    });
  });
}

export async function refreshWork(force = false) {
  if (!session.worktree) return;
  const changed = await loadCheckpoints();
  if (changed || force) await loadChanges();
}

let lastSeen = "";

// After each record: a turn's end (the prompt state going idle) may have taken a checkpoint.
export function workOnRecord() {
  if (!session.worktree) return;
  const seen = `${session.prompt_state}|${session.state}`;
  if (seen === lastSeen) return;
  lastSeen = seen;
  if (session.prompt_state !== "prompting") refreshWork();
}

export function setupWork() {
  const wt = session.worktree;
  if (!wt) return;
  $("work-panel").hidden = false;
  $("work-branch").textContent = wt.branch;
  $("work-branch").title = `${wt.path}\nbase ${wt.base_commit}${wt.base_branch ? ` (${wt.base_branch})` : ""}`;
  $("work-merge-into").placeholder = wt.base_branch || "branch";
  if (session.forked_from) {
    $("work-forked").hidden = false;
    $("work-forked").append("Forked from ",
      el("a", { href: `/sessions/${encodeURIComponent(session.forked_from.session_id)}` },
        session.forked_from.session_id), ` at checkpoint ${session.forked_from.checkpoint}.`);
  }
  setupForms();
  // Entries paged in later (older history, new turns) are marked as they arrive.
  new MutationObserver(markAdded).observe($("entries"), { childList: true });
  lastSeen = `${session.prompt_state}|${session.state}`;
  refreshWork(true);
}
