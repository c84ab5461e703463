// Transcript entries → DOM. The server assembles (sessions/live/transcript.py); this module only renders.
//
// An entry is {message: {id, role, metadata, parts}, start_sequence, sequence}: a UI message whose parts are
// `text`, `reasoning`, `dynamic-tool`, `data-compozy-permission` and `data-compozy-event`. Each message is one
// node (`display: contents`, so its parts lay out as the transcript's own rows) keyed by the message id. A
// delta re-sends a changed entry whole; re-rendering it whole would cost quadratic time over a long answer, so
// parts are patched: a text part that grew gets only its new text appended, a changed part is replaced.
import { absTime, el, pretty } from "./common.js";
import { CLIP_CHARS, LongText, MARKDOWN_MAX_CHARS, clip, longTextNode, visible } from "./long-text.js";
import { renderMarkdown } from "./markdown.js";
import { terminalNode, toolNode } from "./tool-view.js";

// Markers that mean something needs a look; the others are plain notes.
const WARN_MARKERS = new Set([
  "prompt_timeout", "prompt_dropped", "session_unhealthy", "provider_failure", "mcp_auth_required",
  "file_mutation_unverified", "prompt_interrupted",
]);
// A thought's summary shows its start; longer previews only cost layout.
const THOUGHT_PREVIEW_CHARS = 120;

const isText = (part) => part && (part.type === "text" || part.type === "reasoning");

// A note says a line or two; one that says more is cut (a permission's, escaped, may grow six-fold).
const NOTE_CHARS = 16 * 1024;
// What a person approves, in the order it runs: control and bidi characters as escapes, cut at a length.
const shownAsItRuns = (fields) => visible(clip(fields.filter(Boolean).join(" · "), CLIP_CHARS * 4));

// Deep equality of two parsed JSON values; unlike comparing their JSON texts, it builds no copy of a part
// that carries megabytes (a tool's output), and stops at the first difference.
function sameValue(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((key) => Object.hasOwn(b, key) && sameValue(a[key], b[key]));
}

function eventTitle(data) {
  return `#${data.sequence ?? "–"} · ${data.event_type} · ${absTime(data.timestamp)}`;
}

function messageTitle(entry) {
  const m = entry.message;
  const span = entry.sequence !== entry.start_sequence ? `${entry.start_sequence}–${entry.sequence}` : entry.start_sequence;
  return `#${span} · ${m.role} · ${absTime((m.metadata || {}).created_at)}`;
}

// Text longer than MARKDOWN_MAX_CHARS shows as plain text, a bounded part at a time (long-text.js): re-rendering
// Markdown on every chunk of a huge answer, or laying out a megabyte line at once, would cost the browser more than
// reading it is worth (a typical answer is a few kilobytes).
//
// Markdown is re-rendered at most once a frame per node while an answer streams in.
const pendingRenders = new Map(); // .text node → its full text
let renderFrame = 0;

function renderText(node, text) {
  if (node.longText) {
    node.longText.update(text);
    return;
  }
  if (text.length > MARKDOWN_MAX_CHARS) {
    node.classList.remove("md");
    node.classList.add("plain");
    node.longText = new LongText(text);
    node.replaceChildren(...node.longText.nodes);
    return;
  }
  node.replaceChildren(renderMarkdown(text));
}

function scheduleRender(node, text) {
  pendingRenders.set(node, text);
  if (renderFrame) return;
  renderFrame = requestAnimationFrame(() => {
    renderFrame = 0;
    const batch = [...pendingRenders];
    pendingRenders.clear();
    for (const [target, full] of batch) if (target.isConnected) renderText(target, full);
  });
}

function markdownNode(text) {
  const node = el("div", { class: "text md" });
  renderText(node, text);
  return node;
}

// The actor of a decision, as a person reads it: `alice`, or `webhook-link (alice's link)`.
function answeredBy(data) {
  const actor = data && data.actor;
  if (!actor || typeof actor !== "object") return "";
  if (actor.kind === "webhook-link") return actor.user ? `webhook-link (${actor.user}'s link)` : "webhook-link";
  return String(actor.label || actor.user || "");
}

export class EntryView {
  constructor(root, options = {}) {
    this.root = root;
    this.options = options; // {canDecide(): bool, onDecide(requestId, decision)}
    this.shown = new Map(); // message id → {entry, node, parts: [node…], end: node|null}
    this.decided = new Map(); // permission request id → decision seen in a later event
    this.errorKeys = new Set(); // what error banners said (see banner)
    this.pending = null; // request ids the daemon lists as waiting (null: not known yet)
    this.live = false; // the stream is open: the newest unfinished answer shows as streaming
    this.streamingNode = null;
  }

  get empty() {
    return this.shown.size === 0;
  }

  get firstStart() {
    const first = this.root.firstElementChild;
    return first ? Number(first.dataset.seq) : null;
  }

  // Replaces everything (the first snapshot, or a reset after an epoch/generation change).
  replace(entries) {
    this.root.textContent = "";
    this.shown.clear();
    this.decided.clear();
    this.errorKeys.clear();
    this.streamingNode = null;
    return this.upsert(entries);
  }

  // Entries from a delta (new or changed), ascending by start; returns how many are new.
  upsert(entries) {
    let added = 0;
    const fragment = document.createDocumentFragment();
    for (const entry of entries) {
      const known = this.shown.get(entry.message.id);
      if (known) {
        if (entry.sequence > known.entry.sequence) this.patch(known, entry);
        continue;
      }
      const view = this.build(entry);
      const last = this.root.lastElementChild;
      if (!last || Number(last.dataset.seq) < entry.start_sequence) fragment.append(view.node);
      else this.insertOrdered(view.node, entry.start_sequence);
      added += 1;
    }
    if (fragment.firstChild) this.root.append(fragment);
    this.markStreaming();
    return added;
  }

  // An older page, all starting before anything shown; returns how many are new.
  prepend(entries) {
    const fragment = document.createDocumentFragment();
    let added = 0;
    for (const entry of entries) {
      if (this.shown.has(entry.message.id)) continue;
      fragment.append(this.build(entry).node);
      added += 1;
    }
    this.root.prepend(fragment);
    return added;
  }

  insertOrdered(node, start) {
    for (const other of this.root.children) {
      if (Number(other.dataset.seq) > start) {
        this.root.insertBefore(node, other);
        return;
      }
    }
    this.root.append(node);
  }

  setLive(live) {
    this.live = live;
    this.markStreaming();
  }

  // The newest answer that has not ended carries the typing caret while the stream is live.
  markStreaming() {
    let target = null;
    const last = this.root.lastElementChild;
    const view = last && this.shown.get(last.dataset.entryId);
    const meta = (view && view.entry.message.metadata) || {};
    // A note the agent sent after its turn ended is whole as it stands: no caret, whatever follows.
    if (this.live && view && view.entry.message.role === "assistant" && !meta.stop_reason && !meta.out_of_turn) {
      const texts = view.node.querySelectorAll(":scope > .entry-assistant");
      target = texts.length ? texts[texts.length - 1] : null;
    }
    if (target === this.streamingNode) return;
    if (this.streamingNode) this.streamingNode.classList.remove("streaming");
    if (target) target.classList.add("streaming");
    this.streamingNode = target;
  }

  // ---- one message ------------------------------------------------------------------------------

  build(entry) {
    const m = entry.message;
    const outOfTurn = m.role === "assistant" && (m.metadata || {}).out_of_turn;
    const node = el("div", { class: `message message-${m.role}${outOfTurn ? " out-of-turn" : ""}`, title: messageTitle(entry),
      dataset: { entryId: m.id, seq: entry.start_sequence, last: entry.sequence, turn: (m.metadata || {}).turn_id || "" } });
    const view = { entry, node, parts: [], end: null };
    if (m.role === "user") {
      node.append(this.userNode(m));
    } else {
      for (const part of m.parts || []) {
        const partNode = this.partNode(part, m);
        view.parts.push(partNode);
        node.append(partNode);
      }
      view.end = this.turnEnd(m);
      if (view.end) node.append(view.end);
    }
    this.shown.set(m.id, view);
    return view;
  }

  patch(view, entry) {
    const m = entry.message;
    const old = view.entry.message;
    view.entry = entry;
    view.node.dataset.last = entry.sequence;
    view.node.title = messageTitle(entry);
    if (m.role === "user") {
      view.node.replaceChildren(this.userNode(m));
      return;
    }
    const parts = m.parts || [];
    const before = old.parts || [];
    parts.forEach((part, i) => {
      const prev = before[i];
      if (i >= view.parts.length) {
        const partNode = this.partNode(part, m);
        view.parts.push(partNode);
        view.node.insertBefore(partNode, view.end);
      } else if (isText(part) && isText(prev) && part.type === prev.type && part.text.startsWith(prev.text)) {
        if (part.text.length > prev.text.length) this.growText(view.parts[i], part);
      } else if (!sameValue(part, prev)) {
        const partNode = this.partNode(part, m);
        view.parts[i].replaceWith(partNode);
        if (this.streamingNode === view.parts[i]) this.streamingNode = null;
        view.parts[i] = partNode;
      }
    });
    const end = this.turnEnd(m);
    if (end && !view.end) {
      view.node.append(end);
      view.end = end;
    }
  }

  // ---- parts --------------------------------------------------------------------------------------

  partNode(part, message) {
    switch (part.type) {
      case "text": {
        const meta = message.metadata || {};
        return el("div", { class: `entry entry-assistant${meta.out_of_turn ? " out-of-turn" : ""}` },
          el("div", { class: "who" }, meta.agent_name || "Agent",
            meta.out_of_turn ? el("span", { class: "out-of-turn-label", title: "Sent by the agent after its turn ended" },
              " · after the turn ended") : null),
          el("div", { class: "bubble" }, markdownNode(part.text)));
      }
      case "reasoning": {
        const node = el("details", { class: "entry entry-thought" },
          el("summary", {}, el("span", { class: "thought-label" }, "Thought"), el("span", { class: "thought-preview" })),
          markdownNode(part.text));
        this.previewThought(node, part.text);
        return node;
      }
      case "dynamic-tool":
        return toolNode(part);
      case "data-compozy-permission":
        return this.permissionNode(part.id, part.data || {});
      case "data-compozy-event":
        return this.eventNode(part.data || {});
      default:
        return el("div", { class: "entry entry-note note-muted" }, el("span", { class: "note-kind" }, part.type));
    }
  }

  // The text grew: its Markdown is rendered again (at most once a frame), as one block can change meaning with a
  // later chunk (a fence closing, a table's second row); plain text shows what fits under its bound.
  growText(node, part) {
    const text = node.querySelector(".text");
    if (text.longText) text.longText.update(part.text);
    else scheduleRender(text, part.text);
    if (part.type === "reasoning") this.previewThought(node, part.text);
  }

  previewThought(node, text) {
    const preview = node.querySelector(".thought-preview");
    if (preview && preview.textContent.length < THOUGHT_PREVIEW_CHARS) {
      preview.textContent = text.length > THOUGHT_PREVIEW_CHARS ? `${text.slice(0, THOUGHT_PREVIEW_CHARS)}…` : text;
    }
  }

  userNode(message) {
    const meta = message.metadata || {};
    let who = "You";
    if (meta.synthetic_reentry) who = `Daemon${meta.synthetic && meta.synthetic.reason ? ` · ${meta.synthetic.reason}` : ""}`;
    else if (meta.action === "steered") who = "You · steer";
    else if (meta.source === "agent") who = "User (replayed by the agent)";
    const typed = meta.authored_text || (message.parts || []).filter((p) => p.type === "text").map((p) => p.text).join("");
    return el("div", { class: `entry entry-user${meta.synthetic_reentry ? " synthetic" : ""}` },
      el("div", { class: "who" }, who),
      el("div", { class: "bubble" }, typed.length > MARKDOWN_MAX_CHARS ? longTextNode(typed, { className: "text" })
        : el("span", { class: "text" }, typed)));
  }

  turnEnd(message) {
    const reason = (message.metadata || {}).stop_reason;
    if (!reason) return null;
    return el("div", { class: `entry entry-turn-end turn-${reason}` },
      el("span", {}, reason === "cancelled" ? "turn cancelled" : `turn finished · ${reason}`));
  }

  permissionNode(requestId, data) {
    const card = el("div", { class: "entry entry-permission", title: eventTitle(data), dataset: { requestId } },
      el("span", { class: "perm-label" }, "Permission"),
      el("span", { class: "perm-what" }, shownAsItRuns([data.action, data.title || data.resource])),
      el("span", { class: "perm-decision" }),
      el("span", { class: "perm-actions" }));
    const later = this.decided.get(requestId);
    this.showDecision(card, later || data);
    return card;
  }

  showDecision(card, data) {
    const decision = data.decision && data.decision !== "" ? data.decision : "pending";
    card.dataset.decision = decision;
    const pill = card.querySelector(".perm-decision");
    // Who answered (issue 49): a person's name, or `webhook-link` (and whose link it was).
    const who = answeredBy(data);
    pill.textContent = decision === "pending" ? "waiting for a decision" : who ? `${decision} by ${who}` : decision;
    pill.className = `perm-decision decision-${decision}`;
    if (data.decision_source) pill.title = `decided by ${who || data.decision_source}`;
    const actions = card.querySelector(".perm-actions");
    actions.textContent = "";
    const id = card.dataset.requestId;
    const waiting = this.pending === null || this.pending.has(id);
    if (decision === "pending" && waiting && this.options.canDecide && this.options.canDecide()) {
      actions.append(
        el("button", { type: "button", class: "button small approve", dataset: { decision: "approve" },
          onclick: () => this.options.onDecide(id, "approve") }, "Approve"),
        el("button", { type: "button", class: "button small deny", dataset: { decision: "deny" },
          onclick: () => this.options.onDecide(id, "deny") }, "Deny"));
    }
  }

  // Re-evaluates approve/deny buttons: `pendingIds` is what the daemon lists as waiting (null: unknown).
  refreshPermissions(pendingIds) {
    this.pending = pendingIds;
    for (const card of this.root.querySelectorAll(".entry-permission[data-request-id]")) {
      if (card.dataset.decision === "pending") this.showDecision(card, { decision: "pending" });
    }
  }

  eventNode(data) {
    const type = data.event_type || "event";
    switch (type) {
      case "error":
        return this.banner(data, "error");
      case "session_stopped":
        return this.banner(data, "stopped");
      case "transcript_marker.created":
      case "transcript_marker.redacted":
        return this.marker(data);
      case "runtime_progress":
        return this.note(data, "info", "progress", data.text);
      case "runtime_warning":
        return this.note(data, "warn", "warning", data.text);
      case "clarify":
        return this.note(data, "warn", "clarify", data.text || data.title);
      case "session.compaction_fired":
        return this.note(data, "info", "compaction", "Context compaction fired.");
      case "plan":
        return this.plan(data);
      case "system":
        if (data.terminal) {
          return el("div", { class: "entry entry-tool entry-terminal", title: eventTitle(data) },
            terminalNode(String(data.terminal.terminal_id || ""), data.terminal));
        }
        return this.note(data, "muted", type, data.text || data.title || "");
      case "permission":
        return this.decision(data);
      default:
        return this.note(data, "muted", type, data.text || data.title || "");
    }
  }

  // A decision settles the request card wherever it is shown, and is noted where it happened.
  decision(data) {
    const id = data.request_id || "";
    if (id && data.decision && data.decision !== "pending") {
      this.decided.set(id, data);
      for (const card of this.root.querySelectorAll(`.entry-permission[data-request-id="${CSS.escape(id)}"]`)) {
        this.showDecision(card, data);
      }
    }
    const who = answeredBy(data) || data.decision_source;
    return this.note(data, "muted", "permission",
      shownAsItRuns([data.decision, data.title || data.resource, who && `by ${who}`]));
  }

  plan(data) {
    const items = (data.entries || []).filter((e) => e && typeof e === "object");
    return el("div", { class: "entry entry-plan", title: eventTitle(data) },
      el("div", { class: "plan-head" }, "Plan"),
      el("ol", { class: "plan-list" }, ...items.map((e) => el("li", { class: `plan-item plan-${e.status || "pending"}` },
        el("span", { class: "plan-status" }, e.status || "pending"), " ", clip(e.content || "", CLIP_CHARS * 4)))));
  }

  banner(data, kind) {
    const failure = data.failure || null;
    const heading = kind === "stopped" ? "Session stopped" : "Error";
    const reason = data.stop_reason ? ` · ${data.stop_reason}` : "";
    const text = kind === "stopped" && data.stop_detail ? data.stop_detail : (data.error ? pretty(data.error) : "");
    const key = JSON.stringify([text, failure && failure.kind, failure && failure.summary]);
    // A failed start records the error and then the stop it caused, in the same words: say them once.
    const repeated = kind === "stopped" && Boolean(text || failure) && this.errorKeys.has(key);
    if (kind === "error") this.errorKeys.add(key);
    const lines = [];
    if (text && !repeated) lines.push(el("div", { class: "banner-text" }, clip(text, MARKDOWN_MAX_CHARS)));
    if (failure && !repeated) {
      lines.push(el("div", { class: "banner-failure" }, el("span", { class: "failure-kind" }, failure.kind || "failure"),
        failure.summary ? ` ${clip(failure.summary, CLIP_CHARS * 4)}` : ""));
      if (failure.crash_bundle_path) {
        lines.push(el("div", { class: "small" }, "crash bundle: ", el("code", {}, failure.crash_bundle_path)));
      }
    }
    if (data.text) lines.push(el("details", {}, el("summary", {}, "agent stderr"), longTextNode(data.text, { tag: "pre" })));
    const tone = kind === "stopped" && !failure && data.stop_reason !== "error" ? "banner-stopped" : "banner-error";
    return el("div", { class: `entry entry-banner ${tone}`, title: eventTitle(data), dataset: { kind: `banner-${kind}` } },
      el("strong", {}, heading + reason), ...lines);
  }

  marker(data) {
    const marker = data.marker || {};
    const kind = String(data.title || marker.kind || "marker").replace(/^transcript_marker\./, "");
    const node = this.note(data, WARN_MARKERS.has(kind) ? "warn" : "info", kind, data.text || marker.summary || "");
    node.classList.add("entry-marker");
    node.dataset.marker = kind;
    if (marker.evidence && Object.keys(marker.evidence).length) {
      node.title += `\n${clip(pretty(marker.evidence), CLIP_CHARS * 4)}`;
    }
    return node;
  }

  note(data, tone, label, text) {
    return el("div", { class: `entry entry-note note-${tone}`, title: eventTitle(data) },
      el("span", { class: "note-kind" }, clip(label, 80)),
      text ? el("span", { class: "note-text" }, clip(text, NOTE_CHARS)) : null);
  }
}
