// The session page's composer and what the user sends from it: prompts with their busy-input mode
// (queue, interrupt, steer), the queue of prompts waiting for a turn, and the turn actions in the header
// (cancel turn, interrupt, stop session).
//
// They share one status line (`#composer-status`), which every write reports to, and the queue: a stop
// asks first when queued prompts would be stranded, and a canceled turn says whether the next one runs.
// The other session modules report on that line too (setComposerStatus); of them this one imports only the record.
import { api, clear, debounce, el, errorText, mayUse, whoami } from "./common.js";
import { CLIP_CHARS, clip } from "./long-text.js";
import { $, data, refreshSessionSoon, scoped, session } from "./session-record.js";

const composer = $("composer");
const input = $("prompt-input");
const modeSelect = $("prompt-mode");
const sendButton = $("prompt-send");
const composerStatus = $("composer-status");

export function setComposerStatus(text, tone = "", sticky = false, entry = "") {
  composerStatus.textContent = text;
  composerStatus.dataset.tone = tone;
  composerStatus.dataset.sticky = sticky ? "1" : "";
  composerStatus.dataset.entry = entry; // a queued entry this message is about: it changes once the entry runs
}

export function setupModes() {
  modeSelect.value = (data.busy_input && data.busy_input.default_mode) || "queue";
}

// Enter sends and Shift+Enter starts a new line, as in the chat tools people know; Ctrl/Cmd+Enter still sends.
// Not while an input method composes a word (Enter picks the word), nor while the slash menu is open (Enter picks
// the command: session-commands.js).
export function setupComposer() {
  composer.addEventListener("submit", sendPrompt);
  input.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.isComposing || event.shiftKey || event.altKey) return;
    if (!$("slash-menu").hidden && !(event.ctrlKey || event.metaKey)) return;
    event.preventDefault();
    composer.requestSubmit();
  });
}

// Prompts go to an active session, and to a stopped one, which the daemon reactivates under the same id first;
// from a token that may prompt (a viewer's read-only token watches).
function canSend(s) {
  return (s.state === "active" || s.state === "stopped") && mayUse("prompt");
}

whoami().then(() => {
  if (mayUse("prompt")) return;
  sendButton.disabled = true;
  input.disabled = true;
  composer.dataset.readOnly = "1";
  setComposerStatus("You are watching: this sign-in may read this session, not send to it.", "", true);
});

let sending = false; // a prompt is in flight

// The composer's part of a new session record `s`; `lastState` is the state the page showed before it.
export function showSessionState(s, lastState) {
  if (!sending) sendButton.disabled = !canSend(s);
  sendButton.textContent = s.state === "stopped" ? "Resume & send" : "Send";
  sendButton.title = s.state === "stopped" ? "Continue this session (same id, context recovered) with this prompt" : "";
  // While a prompt is in flight its own status line wins (a resume passes through starting).
  if (!sending && (s.state !== lastState || !composerStatus.dataset.sticky)) {
    if (s.state === "starting") setComposerStatus("The agent is starting; prompts can be sent once it is active.");
    else if (s.state === "stopping") setComposerStatus("The session is stopping.");
    else if (s.state === "stopped") setComposerStatus("This session is stopped; sending a prompt resumes it (same id, context recovered).");
    else if (lastState !== "active" && !composerStatus.dataset.sticky) setComposerStatus("");
  }
}

async function sendPrompt(event) {
  event.preventDefault();
  const message = input.value.trim();
  if (!message) {
    input.focus();
    return;
  }
  const mode = modeSelect.value;
  const resuming = session.state === "stopped";
  sending = true;
  sendButton.disabled = true;
  setComposerStatus(resuming ? "Resuming the session…" : "Sending…");
  try {
    const { status, data: body } = await api("POST", `${scoped}/prompt`, { message, mode });
    const result = body.prompt || {};
    input.value = "";
    if (result.status === "queued") {
      addQueued({ ...result, text: message });
      renderQueue();
      setComposerStatus(`Queued at position ${result.queue_position ?? "?"}.`, "ok", true, result.queue_entry_id || "");
    } else if (result.status === "staged") {
      setComposerStatus("Steer staged for the next tool result (falls back to the queue).", "ok", true);
    } else if (result.mode === "interrupt" || result.status === "interrupted") {
      setComposerStatus(result.new_turn_id ? "Interrupted the running turn; your prompt replaces it."
        : "Interrupted the running turn.", "ok", true);
    } else if (result.mode === "steer") {
      setComposerStatus("Steer sent as a new turn with the interrupted prompt.", "ok", true);
    } else {
      const sent = status === 200 ? "Sent." : `Prompt ${result.status || "sent"}.`;
      setComposerStatus(resuming ? `Session resumed. ${sent}` : sent, "ok", true);
    }
    // A resumed session is active again by now: the refresh reopens the stream after the page's cursor.
    refreshSessionSoon();
    refreshQueueSoon();
  } catch (err) {
    setComposerStatus(errorText(err), "error", true);
  } finally {
    sending = false;
    sendButton.disabled = !canSend(session);
  }
}

// ---- queue -----------------------------------------------------------------------------------------

const queue = new Map(); // queue_entry_id → entry

export function addQueued(entry) {
  const id = entry.queue_entry_id;
  if (!id) return;
  const known = queue.get(id) || {};
  queue.set(id, { ...known, ...Object.fromEntries(Object.entries(entry).filter(([, v]) => v !== undefined && v !== null)) });
}

// Markers are how entries come and go when no queue route lists them; true when the queue changed.
export function applyQueueMarker(d) {
  const kind = String(d.title || "");
  const evidence = (d.marker && d.marker.evidence) || {};
  const id = evidence.queue_entry_id;
  if (kind === "prompt_queued" && id) {
    if (!queue.has(id)) addQueued({ queue_entry_id: id, queue_position: evidence.queue_position,
      queue_generation: evidence.queue_generation, text: null });
    return true;
  }
  if ((kind === "prompt_accepted" || kind === "prompt_dropped") && id) {
    return queue.delete(id);
  }
  return kind === "prompt_dropped" || kind === "prompt_interrupted";
}

export function renderQueue() {
  const list = clear($("queue-list"));
  const entries = [...queue.values()];
  for (const [index, entry] of entries.entries()) {
    const cancel = el("button", { type: "button", class: "button small", dataset: { entryId: entry.queue_entry_id },
      title: "Remove this prompt from the queue" }, "Cancel");
    cancel.addEventListener("click", () => cancelQueued(entry.queue_entry_id, cancel));
    list.append(el("li", { class: "queue-item", dataset: { entryId: entry.queue_entry_id } },
      el("span", { class: "queue-pos" }, String(index + 1)),
      // One line, cut: a pasted megabyte would cost the page its layout on every render.
      el("span", { class: "queue-text", title: clip(entry.text || "", CLIP_CHARS * 4) },
        clip(entry.text || "", CLIP_CHARS) || el("span", { class: "muted" }, "(queued from another client)")),
      el("code", { class: "queue-id", title: `generation ${entry.queue_generation ?? "?"}` }, entry.queue_entry_id),
      cancel));
  }
  $("queue-count").textContent = String(entries.length);
  $("queue-empty").hidden = entries.length > 0;
  const drop = dropText();
  $("btn-interrupt").title = "Cancel the running turn and keep its text for one steer"
    + (drop ? `; drops ${drop}` : "; nothing queued is dropped");
  $("btn-interrupt").dataset.drops = drop;
}

// What an interrupt drops (it fences off older input): "2 queued prompts and 1 staged steer", "" for nothing.
export function dropText() {
  const entries = [...queue.values()];
  const steers = entries.filter((e) => e.mode === "steer").length;
  const queued = entries.length - steers;
  const plural = (n, word) => `${n} ${word}${n > 1 ? "s" : ""}`;
  return [queued && plural(queued, "queued prompt"), steers && plural(steers, "staged steer")]
    .filter(Boolean).join(" and ");
}

async function cancelQueued(id, button) {
  button.disabled = true;
  try {
    await api("DELETE", `${scoped}/prompt/queue/${encodeURIComponent(id)}`);
    queue.delete(id);
    setComposerStatus("Queued prompt canceled.", "ok", true);
  } catch (err) {
    if (err.status === 404) queue.delete(id); // already sent or canceled elsewhere
    else setComposerStatus(errorText(err), "error", true);
  }
  renderQueue();
}

export async function refreshQueue() {
  try {
    const { data: body } = await api("GET", `${scoped}/prompt/queue`);
    queue.clear();
    for (const entry of body.queue || []) {
      if (entry.status === "queued") addQueued(entry);
    }
    renderQueue();
    // "Queued at position 1." stayed after the prompt had run: say it left the queue.
    const mine = composerStatus.dataset.entry;
    if (mine && !queue.has(mine)) setComposerStatus("Your queued prompt left the queue.", "ok");
  } catch {
    // The derived queue stays on screen.
  }
}

export const refreshQueueSoon = debounce(refreshQueue, 150);

// ---- actions ---------------------------------------------------------------------------------------

async function action(button, busyText, fn) {
  const label = button.textContent;
  button.disabled = true;
  button.textContent = busyText;
  try {
    await fn();
  } catch (err) {
    setComposerStatus(errorText(err), "error", true);
  } finally {
    button.disabled = false;
    button.textContent = label;
    refreshSessionSoon();
  }
}

export function setupActions() {
  $("btn-stop").addEventListener("click", (event) => {
    // A stop ends the agent's process: asked once, and queued prompts (the user's own unsent work) are named.
    const queued = queue.size;
    const stranded = queued ? ` ${queued} queued prompt${queued > 1 ? "s" : ""} will not run while it is stopped.` : "";
    if (!window.confirm(`Stop this session? The agent's process ends; a prompt resumes it later.${stranded}`)) return;
    stopSession(event.currentTarget);
  });
  $("btn-cancel-turn").addEventListener("click", (event) => action(event.currentTarget, "Canceling…", async () => {
    const { data: body } = await api("POST", `${scoped}/prompt/cancel`);
    const canceled = (body && body.prompt && body.prompt.status) === "canceled";
    setComposerStatus(canceled ? `Turn canceled.${queue.size ? " The next queued prompt runs now." : ""}`
      : "No turn was running.", "ok", true);
  }));
  $("btn-interrupt").addEventListener("click", (event) => {
    // An interrupt drops what waits (queued prompts, a staged steer): say which, and ask first when there is any.
    const drop = dropText();
    if (drop && !window.confirm(`Interrupt the running turn? This drops ${drop}; they will not run.`)) return;
    action(event.currentTarget, "Interrupting…", async () => {
      const { data: body } = await api("POST", `${scoped}/interrupt`, {});
      const dropped = (body && body.prompt && body.prompt.canceled_queued_entries) || [];
      for (const id of dropped) queue.delete(id);
      renderQueue();
      setComposerStatus(`Interrupted${dropped.length ? `; dropped ${dropped.length} waiting prompt${dropped.length > 1 ? "s" : ""} (shown in the transcript)` : ""}. `
        + "A steer now resends the interrupted prompt with your correction.", "ok", true);
    });
  });
}

function stopSession(button) {
  action(button, "Stopping…", async () => {
    await api("POST", `${scoped}/stop`);
    setComposerStatus("Session stopped.", "ok", true);
  });
}
