// A tool call's card: its head (kind, title, status), what it changed (a unified diff per `diff` content block),
// the terminals it ran (command, exit code, output) and its text output. Every string here is the agent's and
// goes into the DOM as text (`el` sets textContent); ANSI colours become class names, never markup. What the agent
// sends is shown in bounded time however long (long-text.js): lines wrap anywhere, output past a bound shows a
// chunk at a time, a diff's lines are cut at a length and shown a bounded number at a time; titles and commands
// show control and bidi characters as escapes, as they run.
import { el, pretty } from "./common.js";
import { CLIP_CHARS, LongText, SHOWN_CHARS, clip, longTextNode, visible } from "./long-text.js";

// Lines shown before "show all": enough for a typical edit or test run, short enough to scroll past.
const DIFF_VISIBLE_LINES = 60;
const OUTPUT_VISIBLE_LINES = 30;
// "Show all" on a diff adds at most this many lines a click, each cut at DIFF_LINE_CHARS (a minified file's one line).
const DIFF_MORE_LINES = 1000;
const DIFF_LINE_CHARS = 1000;
// Above this many cells (old lines × new lines), or this many characters in the changed lines, the line diff is
// not computed: the change shows as the old text removed and the new one added, so a huge rewrite costs no
// noticeable time in the browser.
const DIFF_MAX_CELLS = 4_000_000;
const DIFF_MAX_CHARS = 2_000_000;
const DIFF_CONTEXT = 3;

function toolStatus(part) {
  if (part.state === "output-error") return "failed";
  if (part.state === "output-available") return "completed";
  return part.status || "pending";
}

const splitLines = (text) => {
  if (!text) return [];
  const lines = String(text).split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
};

// [{op: " "|"-"|"+", text, a, b}] for old → new (a, b: 1-based line numbers on each side).
export function lineDiff(oldText, newText) {
  const a = splitLines(oldText);
  const b = splitLines(newText);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  const middle = [];
  const chars = (lines) => lines.reduce((sum, line) => sum + line.length, 0);
  if (midA.length * midB.length <= DIFF_MAX_CELLS && chars(midA) + chars(midB) <= DIFF_MAX_CHARS) {
    // Longest common subsequence, table filled from the end so the walk below runs forwards.
    const n = midA.length;
    const m = midB.length;
    const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i -= 1) {
      for (let j = m - 1; j >= 0; j -= 1) {
        table[i][j] = midA[i] === midB[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      // On a tie the removed line goes first, as in `diff -u`.
      if (i < n && j < m && midA[i] === midB[j]) { middle.push([" ", midA[i]]); i += 1; j += 1; }
      else if (i < n && (j >= m || table[i + 1][j] >= table[i][j + 1])) { middle.push(["-", midA[i]]); i += 1; }
      else { middle.push(["+", midB[j]]); j += 1; }
    }
  } else {
    for (const line of midA) middle.push(["-", line]);
    for (const line of midB) middle.push(["+", line]);
  }
  const ops = [...a.slice(0, head).map((l) => [" ", l]), ...middle, ...a.slice(a.length - tail).map((l) => [" ", l])];
  let lineA = 1;
  let lineB = 1;
  return ops.map(([op, text]) => {
    const row = { op, text, a: lineA, b: lineB };
    if (op !== "+") lineA += 1;
    if (op !== "-") lineB += 1;
    return row;
  });
}

// Hunks of changed lines with DIFF_CONTEXT lines around each: [{header, rows}].
function hunks(rows) {
  const keep = new Array(rows.length).fill(false);
  rows.forEach((row, i) => {
    if (row.op === " ") return;
    for (let k = Math.max(0, i - DIFF_CONTEXT); k <= Math.min(rows.length - 1, i + DIFF_CONTEXT); k += 1) keep[k] = true;
  });
  const result = [];
  let current = null;
  rows.forEach((row, i) => {
    if (!keep[i]) { current = null; return; }
    if (!current) { current = { rows: [] }; result.push(current); }
    current.rows.push(row);
  });
  for (const hunk of result) {
    const first = hunk.rows[0];
    const countA = hunk.rows.filter((r) => r.op !== "+").length;
    const countB = hunk.rows.filter((r) => r.op !== "-").length;
    hunk.header = `@@ -${countA ? first.a : first.a - 1},${countA} +${countB ? first.b : first.b - 1},${countB} @@`;
  }
  return result;
}

// A "show all" button under a block whose extra lines are hidden; one click shows them.
function bounded(node, hiddenNodes, label) {
  if (!hiddenNodes.length) return node;
  for (const hidden of hiddenNodes) hidden.hidden = true;
  const button = el("button", { type: "button", class: "button small show-all" }, label);
  button.addEventListener("click", () => {
    for (const hidden of hiddenNodes) hidden.hidden = false;
    button.remove();
  });
  return el("div", { class: "bounded" }, node, button);
}

// `node` with the first `shown` of `total` rows (`make(from, to)` builds rows [from, to) into `parent`), and a
// button under it that adds the rest, at most `step` rows a click: the rows are built only when shown.
function stepwise(node, parent, total, shown, make, step, noun) {
  let done = Math.min(shown, total);
  parent.append(...make(0, done));
  if (done >= total) return node;
  const button = el("button", { type: "button", class: "button small show-all" });
  const label = () => {
    const rest = total - done;
    button.textContent = rest <= step ? `Show all ${total} ${noun} (${rest} more)`
      : `Show ${step} more ${noun} (${rest} not shown)`;
  };
  button.addEventListener("click", () => {
    const to = Math.min(total, done + step);
    parent.append(...make(done, to));
    done = to;
    if (done >= total) button.remove();
    else label();
  });
  label();
  return el("div", { class: "bounded" }, node, button);
}

// One row of a diff; a line longer than DIFF_LINE_CHARS is cut (its length said) and wraps.
function diffLine(line) {
  if (line.header !== undefined) return el("div", { class: "diff-line diff-hunk" }, line.header);
  const kind = line.op === "+" ? "diff-add" : line.op === "-" ? "diff-del" : "diff-ctx";
  const long = line.text.length > DIFF_LINE_CHARS;
  return el("div", { class: `diff-line ${kind}${long ? " diff-long" : ""}` },
    `${line.op}${clip(line.text, DIFF_LINE_CHARS)}`);
}

export function diffNode(block) {
  const path = String(block.path || "");
  const isNew = block.old_text === null || block.old_text === undefined;
  const rows = lineDiff(isNew ? "" : block.old_text, block.new_text || "");
  const added = rows.filter((r) => r.op === "+").length;
  const removed = rows.filter((r) => r.op === "-").length;
  const lines = [];
  for (const hunk of hunks(rows)) lines.push({ header: hunk.header }, ...hunk.rows);
  const shownPath = visible(clip(path, CLIP_CHARS));
  const head = el("div", { class: "diff-head" },
    el("span", { class: "diff-path" }, shownPath || "(no path)"),
    isNew ? el("span", { class: "diff-new" }, "new file") : null,
    el("span", { class: "diff-count" }, el("span", { class: "diff-count-add" }, `+${added}`), " ",
      el("span", { class: "diff-count-del" }, `−${removed}`)));
  const body = el("div", { class: "diff-body", role: "group", "aria-label": `Diff of ${shownPath}` },
    el("div", { class: "diff-line diff-file" }, isNew ? "--- /dev/null" : `--- ${shownPath}`),
    el("div", { class: "diff-line diff-file" }, `+++ ${shownPath}`));
  if (!lines.length) body.append(el("div", { class: "diff-line diff-ctx muted" }, "(no change)"));
  return el("div", { class: "tool-diff", dataset: { path: clip(path, CLIP_CHARS), added, removed } }, head,
    stepwise(body, body, lines.length, DIFF_VISIBLE_LINES, (from, to) => lines.slice(from, to).map(diffLine),
      DIFF_MORE_LINES, "lines"));
}

// ---- ANSI -----------------------------------------------------------------------------------------------------

// SGR colours (30–37, 90–97 foreground; bold) become classes; every other escape sequence is dropped.
const ESCAPES = /\x1b\[([0-9;]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;

// `state` ({fg, bold}): the colours in force where `text` starts, updated to where it ends (text shown in pieces).
export function ansiNodes(text, state = {}) {
  const nodes = [];
  let fg = state.fg ?? null;
  let bold = Boolean(state.bold);
  let last = 0;
  const push = (chunk) => {
    if (!chunk) return;
    const classes = [fg !== null ? `ansi-fg-${fg}` : "", bold ? "ansi-bold" : ""].filter(Boolean).join(" ");
    nodes.push(classes ? el("span", { class: classes }, chunk) : chunk);
  };
  const source = String(text);
  for (const match of source.matchAll(ESCAPES)) {
    push(source.slice(last, match.index));
    last = match.index + match[0].length;
    if (match[2] !== "m") continue;
    for (const code of (match[1] || "0").split(";").map(Number)) {
      if (code === 0) { fg = null; bold = false; }
      else if (code === 1) bold = true;
      else if (code === 22) bold = false;
      else if (code === 39) fg = null;
      else if ((code >= 30 && code <= 37) || (code >= 90 && code <= 97)) fg = code;
    }
  }
  push(source.slice(last));
  state.fg = fg;
  state.bold = bold;
  return nodes;
}

// Monospace output, ANSI colours rendered, the first OUTPUT_VISIBLE_LINES lines shown until "show all".
const outputLines = (text) => {
  const lines = String(text).split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  return lines;
};

// Where the line after the first `count` lines starts (the text's length when it has no more lines).
function afterLines(text, count) {
  let at = 0;
  for (let i = 0; i < count; i += 1) {
    const next = text.indexOf("\n", at);
    if (next < 0) return text.length;
    at = next + 1;
  }
  return at;
}

function lineCount(text) {
  let count = 0;
  for (let at = text.indexOf("\n"); at >= 0; at = text.indexOf("\n", at + 1)) count += 1;
  return count + (text.length && !text.endsWith("\n") ? 1 : 0) || 1;
}

export function outputBlock(text, extraClass = "") {
  const source = String(text);
  if (source.length > SHOWN_CHARS) {
    // Past the bound: the first lines (at most SHOWN_CHARS of them), then a chunk a click (long-text.js).
    const view = new LongText(source, { tag: "pre", className: `tool-text ${extraClass}`.trim(),
      render: ansiNodes, initial: afterLines(source, OUTPUT_VISIBLE_LINES) });
    return el("div", { class: "bounded" }, ...view.nodes);
  }
  const lines = outputLines(source);
  const pre = el("pre", { class: `tool-text ${extraClass}`.trim() });
  const shown = lines.slice(0, OUTPUT_VISIBLE_LINES).join("\n");
  pre.append(...ansiNodes(shown));
  if (lines.length <= OUTPUT_VISIBLE_LINES) return pre;
  const rest = el("span", { class: "tool-text-rest" }, "\n", ...ansiNodes(lines.slice(OUTPUT_VISIBLE_LINES).join("\n")));
  pre.append(rest);
  return bounded(pre, [rest], `Show all ${lines.length} lines (${lines.length - OUTPUT_VISIBLE_LINES} more)`);
}

// A terminal the tool ran: its id until it exits, then its command, exit code and output. `settled`: the tool call
// itself finished, so a terminal with no exit on record will not report one in this call.
export function terminalNode(terminalId, exited, settled = false) {
  const head = el("div", { class: "terminal-head" }, el("span", { class: "terminal-label" }, "terminal"),
    exited && exited.command
      ? el("code", { class: "terminal-command" }, `$ ${visible(clip(exited.command, CLIP_CHARS * 4))}`)
      : el("code", { class: "terminal-id" }, visible(clip(terminalId, CLIP_CHARS))));
  const node = el("div", { class: "tool-terminal", dataset: { terminalId } }, head);
  if (!exited) {
    head.append(el("span", { class: "terminal-state muted" }, settled ? "no output reported" : "running"));
    return node;
  }
  const code = exited.exit_code;
  head.append(el("span", { class: `terminal-exit ${code === 0 ? "exit-ok" : "exit-bad"}` },
    code === null || code === undefined ? (exited.signal ? `signal ${exited.signal}` : "exited") : `exit ${code}`));
  node.append(outputBlock(exited.output || "", "terminal-output"));
  if (exited.truncated) node.append(el("div", { class: "small muted" }, "output truncated by the daemon"));
  return node;
}

function textOutput(part, shownDiffs) {
  const result = part.output && typeof part.output === "object" ? part.output : {};
  const lines = [];
  if (part.errorText) lines.push(`error: ${pretty(part.errorText)}`);
  if (result.content) lines.push(pretty(result.content));
  if (result.stdout) lines.push(pretty(result.stdout));
  if (result.stderr) lines.push(`stderr: ${pretty(result.stderr)}`);
  if (result.structured_patch && !shownDiffs) lines.push(pretty(result.structured_patch));
  if (!lines.length && result.raw_output !== undefined) lines.push(pretty(result.raw_output));
  if (!lines.length && part.output !== undefined && typeof part.output !== "object") lines.push(pretty(part.output));
  return lines.join("\n\n");
}

export function toolNode(part) {
  const status = toolStatus(part);
  const content = Array.isArray(part.content) ? part.content.filter((b) => b && typeof b === "object") : [];
  const result = part.output && typeof part.output === "object" ? part.output : {};
  let diffs = content.filter((b) => b.type === "diff");
  if (!diffs.length && Array.isArray(result.structured_patch)) diffs = result.structured_patch;
  const terminals = new Set([...content, ...(Array.isArray(result.terminals) ? result.terminals : [])]
    .filter((b) => b.terminal_id).map((b) => String(b.terminal_id)));
  const exited = part.terminals && typeof part.terminals === "object" ? part.terminals : {};
  const output = textOutput(part, diffs.length > 0);
  const hasInput = part.input !== undefined && part.input !== null;
  const title = part.title || part.toolName || part.toolCallId || "";
  return el("div", { class: "entry entry-tool", dataset: { toolCallId: part.toolCallId || "", status } },
    el("div", { class: "tool-head" },
      el("span", { class: "tool-kind" }, part.toolKind || "tool"),
      el("span", { class: "tool-title", title: visible(clip(title, CLIP_CHARS * 4)) }, visible(clip(title, CLIP_CHARS))),
      el("span", { class: `tool-status status-${status}` }, status.replace("_", " "))),
    ...diffs.map(diffNode),
    ...[...terminals].map((id) => terminalNode(id, exited[id], status === "completed" || status === "failed")),
    el("details", { class: "tool-input", hidden: !hasInput }, el("summary", {}, "Input"),
      hasInput ? longTextNode(visible(pretty(part.input), { lines: true }), { tag: "pre" }) : el("pre", {})),
    // Folded like the input, except where the output is the point: a failure, a command's run.
    output ? el("details", { class: "tool-output", open: status === "failed" || part.toolKind === "execute" },
      el("summary", {}, `Result · ${lineCount(output)} lines`), outputBlock(output)) : null);
}
