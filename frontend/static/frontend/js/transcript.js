// Raw persisted events (SessionEventPayload) → transcript entries in the DOM.
//
// Assembly follows the events reference: by sequence; consecutive agent_message chunks of a turn form
// one bubble, thoughts fold into a <details>, tool_call + tool_result join by tool_call_id, markers stay
// separate small notes, errors and session_stopped are banners. Every sequence renders at most once.
// The live tail appends; older pages prepend (with a fresh assembly context, joined at the seam).
import { absTime, el, pretty } from "./common.js";

// Markers that mean something needs a look; the others are plain notes.
const WARN_MARKERS = new Set([
  "prompt_timeout", "prompt_dropped", "session_unhealthy", "provider_failure", "mcp_auth_required",
  "file_mutation_unverified", "prompt_interrupted",
]);
// Events that carry no transcript content of their own.
const SILENT_TYPES = new Set(["usage", "available_commands_update"]);
// A thought's summary shows its start; longer previews only cost layout.
const THOUGHT_PREVIEW_CHARS = 120;

class Context {
  constructor() {
    this.open = null; // {kind: "assistant"|"thought", turn, text: Text, entry}
    this.tools = new Map(); // tool_call_id → card, within this direction
    this.permissions = new Map(); // request_id → card, within this direction
    this.plans = new Map(); // turn_id → card
  }
}

function entryTitle(ev) {
  return `#${ev.sequence ?? "–"} · ${ev.type} · ${absTime(ev.timestamp)}`;
}

function textOf(ev) {
  const c = ev.content || {};
  return typeof c.text === "string" ? c.text : "";
}

export class Transcript {
  constructor(root, options = {}) {
    this.root = root;
    this.options = options; // {canDecide(): bool, onDecide(requestId, decision, card)}
    this.live = new Context();
    this.firstSeq = null;
    this.lastSeq = 0;
    this.entries = 0;
    this.toolFinal = new Map(); // tool_call_id → last tool_result content seen in any direction
    this.toolCards = new Map(); // tool_call_id → the card live results update
    this.permissionFinal = new Map(); // request_id → last non-pending decision content
    this.permissionCards = new Map(); // request_id → every card showing that request
  }

  get empty() {
    return this.entries === 0;
  }

  // Events ascending, newer than anything shown; returns the number of new entries.
  append(events) {
    const fragment = document.createDocumentFragment();
    let added = 0;
    for (const ev of events) {
      if (typeof ev.sequence !== "number" || ev.sequence <= this.lastSeq) continue; // never twice
      this.lastSeq = ev.sequence;
      if (this.firstSeq === null) this.firstSeq = ev.sequence;
      const node = this.render(ev, this.live, true);
      if (node) {
        fragment.append(node);
        added += 1;
      }
    }
    if (added) this.root.append(fragment);
    this.entries += added;
    return added;
  }

  // Events ascending, all older than anything shown; returns the number of new entries.
  prepend(events) {
    const older = events.filter((ev) => typeof ev.sequence === "number"
      && (this.firstSeq === null || ev.sequence < this.firstSeq));
    if (!older.length) return 0;
    const ctx = new Context();
    const fragment = document.createDocumentFragment();
    let added = 0;
    for (const ev of older) {
      const node = this.render(ev, ctx, false);
      if (node) {
        fragment.append(node);
        added += 1;
      }
    }
    this.firstSeq = older[0].sequence;
    if (!this.lastSeq) this.lastSeq = older[older.length - 1].sequence;
    // A message cut by the page boundary continues in the first entry already on screen.
    const seamOlder = fragment.lastChild;
    const seamNewer = this.root.firstChild;
    if (seamOlder && seamNewer && seamOlder.dataset.kind && seamOlder.dataset.kind === seamNewer.dataset.kind
        && (seamOlder.dataset.kind === "assistant" || seamOlder.dataset.kind === "thought")
        && seamOlder.dataset.turn === seamNewer.dataset.turn) {
      const olderText = seamOlder.querySelector(".text").firstChild;
      const newerText = seamNewer.querySelector(".text").firstChild;
      newerText.insertData(0, olderText.data);
      seamNewer.dataset.seq = seamOlder.dataset.seq;
      if (seamNewer.dataset.kind === "thought") this.previewThought(seamNewer, newerText.data);
      seamOlder.remove();
      added -= 1;
    }
    this.root.prepend(fragment);
    this.entries += added;
    return added;
  }

  // Closes the streaming bubble (a turn ended) so the next chunk starts a new one.
  close(ctx = this.live) {
    if (ctx.open) ctx.open.entry.classList.remove("streaming");
    ctx.open = null;
  }

  // One event → a new entry node, or null when it extended or updated an entry already shown.
  render(ev, ctx, live) {
    switch (ev.type) {
      case "agent_message":
        return this.chunk(ev, ctx, "assistant", live);
      case "thought":
        return this.chunk(ev, ctx, "thought", live);
      case "user_message":
      case "synthetic_reentry":
        this.close(ctx);
        return this.userEntry(ev);
      case "tool_call":
        return this.toolCall(ev, ctx, live);
      case "tool_result":
        return this.toolResult(ev, ctx, live);
      case "permission":
        return this.permission(ev, ctx, live);
      case "plan":
        return this.plan(ev, ctx);
      case "done":
        this.close(ctx);
        return this.turnEnd(ev);
      case "error":
        this.close(ctx);
        return this.banner(ev, "error");
      case "session_stopped":
        this.close(ctx);
        return this.banner(ev, "stopped");
      case "transcript_marker.created":
      case "transcript_marker.redacted":
        return this.marker(ev, ctx);
      case "runtime_progress":
      case "runtime_warning":
        this.close(ctx);
        return this.note(ev, ev.type === "runtime_warning" ? "warn" : "info",
          ev.type === "runtime_warning" ? "warning" : "progress", textOf(ev));
      case "clarify":
        this.close(ctx);
        return this.note(ev, "warn", "clarify", pretty((ev.content || {}).raw));
      case "session.compaction_fired":
        this.close(ctx);
        return this.note(ev, "info", "compaction", "Context compaction fired.");
      case "system": {
        const c = ev.content || {};
        this.close(ctx);
        return this.note(ev, c.unknown_variant ? "warn" : "muted", "system", c.title || "system update");
      }
      default:
        if (SILENT_TYPES.has(ev.type)) return null;
        this.close(ctx);
        return this.note(ev, "muted", ev.type, textOf(ev));
    }
  }

  chunk(ev, ctx, kind, live) {
    const text = textOf(ev);
    const turn = ev.turn_id || "";
    if (!text && !(ev.content && ev.content.raw)) return null; // empty chunks are dropped
    const piece = text || "[non-text content]";
    if (ctx.open && ctx.open.kind === kind && ctx.open.turn === turn) {
      ctx.open.text.appendData(piece);
      if (kind === "thought") this.previewThought(ctx.open.entry, ctx.open.text.data);
      return null;
    }
    this.close(ctx);
    const textNode = document.createTextNode(piece);
    let entry;
    if (kind === "assistant") {
      entry = el("div", { class: "entry entry-assistant", title: entryTitle(ev),
        dataset: { seq: ev.sequence, kind, turn } },
      el("div", { class: "who" }, ev.agent_name || "Agent"),
      el("div", { class: "bubble" }, el("span", { class: "text" }, textNode)));
      if (live) entry.classList.add("streaming");
    } else {
      entry = el("details", { class: "entry entry-thought", title: entryTitle(ev), dataset: { seq: ev.sequence, kind, turn } },
        el("summary", {}, el("span", { class: "thought-label" }, "Thought"), el("span", { class: "thought-preview" })),
        el("div", { class: "text" }, textNode));
      this.previewThought(entry, piece);
    }
    ctx.open = { kind, turn, text: textNode, entry };
    return entry;
  }

  previewThought(entry, text) {
    const preview = entry.querySelector(".thought-preview");
    if (preview && preview.textContent.length < THOUGHT_PREVIEW_CHARS) {
      preview.textContent = text.length > THOUGHT_PREVIEW_CHARS ? `${text.slice(0, THOUGHT_PREVIEW_CHARS)}…` : text;
    }
  }

  userEntry(ev) {
    const c = ev.content || {};
    let who = "You";
    if (ev.type === "synthetic_reentry") who = `Daemon${c.synthetic && c.synthetic.reason ? ` · ${c.synthetic.reason}` : ""}`;
    else if (c.action === "steered") who = "You · steer";
    else if (c.source === "agent") who = "User (replayed by the agent)";
    const text = c.authored_text || c.text || "";
    return el("div", { class: `entry entry-user${ev.type === "synthetic_reentry" ? " synthetic" : ""}`,
      title: entryTitle(ev), dataset: { seq: ev.sequence, kind: "user", turn: ev.turn_id || "" } },
    el("div", { class: "who" }, who),
    el("div", { class: "bubble" }, el("span", { class: "text" }, text)));
  }

  toolCall(ev, ctx, live) {
    const c = ev.content || {};
    const id = c.tool_call_id || `seq-${ev.sequence}`;
    const existing = ctx.tools.get(id) || (live ? this.toolCards.get(id) : null);
    if (existing) {
      this.updateTool(existing, c);
      return null;
    }
    this.close(ctx);
    const card = el("div", { class: "entry entry-tool", title: entryTitle(ev),
      dataset: { seq: ev.sequence, kind: "tool", toolCallId: id, turn: ev.turn_id || "" } },
    el("div", { class: "tool-head" },
      el("span", { class: "tool-kind" }, c.tool_kind || "tool"),
      el("span", { class: "tool-title" }, c.title || c.tool_name || id),
      el("span", { class: "tool-status status-pending" }, "pending")),
    el("details", { class: "tool-input", hidden: true }, el("summary", {}, "Input"), el("pre", {})),
    el("details", { class: "tool-output", hidden: true }, el("summary", {}, "Result"), el("pre", {})));
    this.updateTool(card, c);
    ctx.tools.set(id, card);
    if (!this.toolCards.has(id) || live) this.toolCards.set(id, card);
    const final = this.toolFinal.get(id);
    if (final) this.finishTool(card, final);
    return card;
  }

  updateTool(card, c) {
    if (c.title) card.querySelector(".tool-title").textContent = c.title;
    if (c.tool_kind) card.querySelector(".tool-kind").textContent = c.tool_kind;
    if (c.status) this.setToolStatus(card, c.status);
    if (c.tool_input !== undefined) {
      const input = card.querySelector(".tool-input");
      input.hidden = false;
      input.querySelector("pre").textContent = pretty(c.tool_input);
    }
  }

  setToolStatus(card, status) {
    const pill = card.querySelector(".tool-status");
    pill.textContent = status.replace("_", " ");
    pill.className = `tool-status status-${status}`;
    card.dataset.status = status;
  }

  finishTool(card, c) {
    const failed = c.status === "failed" || Boolean(c.tool_error);
    this.setToolStatus(card, failed ? "failed" : (c.status || "completed"));
    const result = c.tool_result || {};
    const parts = [];
    if (c.tool_error) parts.push(`error: ${pretty(c.tool_error)}`);
    if (result.content) parts.push(pretty(result.content));
    if (result.stdout) parts.push(pretty(result.stdout));
    if (result.stderr) parts.push(`stderr: ${pretty(result.stderr)}`);
    if (result.structured_patch) parts.push(pretty(result.structured_patch));
    if (!parts.length && result.raw_output !== undefined) parts.push(pretty(result.raw_output));
    const output = card.querySelector(".tool-output");
    output.hidden = parts.length === 0;
    output.querySelector("pre").textContent = parts.join("\n\n");
    if (failed) output.open = true;
  }

  toolResult(ev, ctx, live) {
    const c = ev.content || {};
    const id = c.tool_call_id || `seq-${ev.sequence}`;
    if (live || !this.toolFinal.has(id)) this.toolFinal.set(id, c);
    const card = ctx.tools.get(id) || (live ? this.toolCards.get(id) : null);
    if (card) {
      this.finishTool(card, c);
      return null;
    }
    // The call is older than what is loaded (or was never recorded): show the result on its own.
    this.close(ctx);
    const orphan = el("div", { class: "entry entry-tool orphan", title: entryTitle(ev),
      dataset: { seq: ev.sequence, kind: "tool", toolCallId: id, turn: ev.turn_id || "" } },
    el("div", { class: "tool-head" },
      el("span", { class: "tool-kind" }, "result"),
      el("span", { class: "tool-title" }, c.tool_name || id),
      el("span", { class: "tool-status status-pending" }, "")),
    el("details", { class: "tool-input", hidden: true }, el("summary", {}, "Input"), el("pre", {})),
    el("details", { class: "tool-output", hidden: true }, el("summary", {}, "Result"), el("pre", {})));
    this.finishTool(orphan, c);
    ctx.tools.set(id, orphan);
    return orphan;
  }

  permission(ev, ctx, live) {
    const c = ev.content || {};
    const id = c.request_id || c.tool_call_id || `seq-${ev.sequence}`;
    if (c.decision && c.decision !== "pending" && (live || !this.permissionFinal.has(id))) {
      this.permissionFinal.set(id, c);
    }
    const existing = ctx.permissions.get(id);
    if (existing) {
      this.updatePermission(existing, c);
      if (live) for (const card of this.permissionCards.get(id) || []) this.updatePermission(card, c);
      return null;
    }
    if (live && this.permissionCards.has(id)) {
      for (const card of this.permissionCards.get(id)) this.updatePermission(card, c);
      return null;
    }
    this.close(ctx);
    const card = el("div", { class: "entry entry-permission", title: entryTitle(ev),
      dataset: { seq: ev.sequence, kind: "permission", requestId: id, turn: ev.turn_id || "" } },
    el("span", { class: "perm-label" }, "Permission"),
    el("span", { class: "perm-what" }, [c.action, c.title || c.resource].filter(Boolean).join(" · ")),
    el("span", { class: "perm-decision" }),
    el("span", { class: "perm-actions" }));
    ctx.permissions.set(id, card);
    if (!this.permissionCards.has(id)) this.permissionCards.set(id, []);
    this.permissionCards.get(id).push(card);
    this.updatePermission(card, this.permissionFinal.get(id) || c);
    return card;
  }

  updatePermission(card, c) {
    const decision = c.decision || "pending";
    card.dataset.decision = decision;
    const pill = card.querySelector(".perm-decision");
    pill.textContent = decision === "pending" ? "waiting for a decision" : decision;
    pill.className = `perm-decision decision-${decision}`;
    if (c.decision_source) pill.title = `decided by ${c.decision_source}`;
    const actions = card.querySelector(".perm-actions");
    actions.textContent = "";
    if (decision === "pending" && this.options.canDecide && this.options.canDecide()) {
      const id = card.dataset.requestId;
      actions.append(
        el("button", { type: "button", class: "button small approve", dataset: { decision: "approve" },
          onclick: () => this.options.onDecide(id, "approve") }, "Approve"),
        el("button", { type: "button", class: "button small deny", dataset: { decision: "deny" },
          onclick: () => this.options.onDecide(id, "deny") }, "Deny"));
    }
  }

  // Re-evaluates the approve/deny buttons (the session stopped, or a decision came from elsewhere).
  refreshPermissions(pendingIds) {
    for (const [id, cards] of this.permissionCards) {
      for (const card of cards) {
        if (card.dataset.decision !== "pending") continue;
        if (pendingIds && !pendingIds.has(id)) {
          card.querySelector(".perm-actions").textContent = "";
          continue;
        }
        this.updatePermission(card, { decision: "pending" });
      }
    }
  }

  plan(ev, ctx) {
    const entries = ((ev.content || {}).entries || []).filter((e) => e && typeof e === "object");
    const list = el("ol", { class: "plan-list" }, ...entries.map((e) =>
      el("li", { class: `plan-item plan-${e.status || "pending"}` }, el("span", { class: "plan-status" }, e.status || "pending"),
        " ", e.content || "")));
    const turn = ev.turn_id || "";
    const existing = ctx.plans.get(turn);
    if (existing) {
      existing.querySelector(".plan-list").replaceWith(list);
      return null;
    }
    this.close(ctx);
    const card = el("div", { class: "entry entry-plan", title: entryTitle(ev), dataset: { seq: ev.sequence, kind: "plan", turn } },
      el("div", { class: "plan-head" }, "Plan"), list);
    ctx.plans.set(turn, card);
    return card;
  }

  turnEnd(ev) {
    const c = ev.content || {};
    const reason = c.prompt_stop_reason || c.stop_reason || "";
    return el("div", { class: `entry entry-turn-end turn-${reason || "done"}`, title: entryTitle(ev),
      dataset: { seq: ev.sequence, kind: "turn-end", turn: ev.turn_id || "" } },
    el("span", {}, reason === "cancelled" ? "turn cancelled" : `turn finished${reason ? ` · ${reason}` : ""}`));
  }

  banner(ev, kind) {
    const c = ev.content || {};
    const failure = c.failure || null;
    const heading = kind === "stopped" ? "Session stopped" : "Error";
    const reason = c.stop_reason ? ` · ${c.stop_reason}` : "";
    const lines = [];
    if (kind === "error" && c.error) lines.push(el("div", { class: "banner-text" }, pretty(c.error)));
    if (kind === "stopped" && (c.stop_detail || c.error)) lines.push(el("div", { class: "banner-text" }, c.stop_detail || pretty(c.error)));
    if (failure) {
      lines.push(el("div", { class: "banner-failure" }, el("span", { class: "failure-kind" }, failure.kind || "failure"),
        failure.summary ? ` ${failure.summary}` : ""));
      if (failure.crash_bundle_path) lines.push(el("div", { class: "small" }, "crash bundle: ", el("code", {}, failure.crash_bundle_path)));
    }
    if (c.text) lines.push(el("details", {}, el("summary", {}, "agent stderr"), el("pre", {}, c.text)));
    const tone = kind === "stopped" && !failure && c.stop_reason !== "error" ? "banner-stopped" : "banner-error";
    return el("div", { class: `entry entry-banner ${tone}`, title: entryTitle(ev),
      dataset: { seq: ev.sequence ?? "", kind: `banner-${kind}`, turn: ev.turn_id || "" } },
    el("strong", {}, heading + reason), ...lines);
  }

  marker(ev, ctx) {
    const c = ev.content || {};
    const raw = c.raw || {};
    const kind = String(c.title || raw.kind || "marker").replace(/^transcript_marker\./, "");
    this.close(ctx);
    const node = this.note(ev, WARN_MARKERS.has(kind) ? "warn" : "info", kind, c.text || raw.summary || "");
    node.classList.add("entry-marker");
    node.dataset.marker = kind;
    if (raw.evidence && Object.keys(raw.evidence).length) node.title += `\n${pretty(raw.evidence)}`;
    return node;
  }

  note(ev, tone, label, text) {
    return el("div", { class: `entry entry-note note-${tone}`, title: entryTitle(ev),
      dataset: { seq: ev.sequence ?? "", kind: "note", turn: ev.turn_id || "" } },
    el("span", { class: "note-kind" }, label), text ? el("span", { class: "note-text" }, text) : null);
  }
}
