// The session page's elicitations: the agent's questions to a person (ACP `elicitation/create`, form mode),
// listed by `GET …/elicitations` and answered with a form built from each one's requested schema (a flat object
// of string, number, integer, boolean and multi-select fields; sessions/core/elicitation_form.py says what fits).
//
// The requests are not transcript entries, so the page refetches them when something says they changed: the
// start, a transcript delta carrying rows the transcript does not show (the `system` rows that open and close a
// request), a session record whose `pending_elicitations` differs from what is shown, and an answer sent.
// The agent's message is untrusted: it is shown as text, never parsed as HTML.
import { ApiError, api, clear, debounce, el, errorText } from "./common.js";
import { setComposerStatus } from "./session-composer.js";
import { $, scoped, session } from "./session-record.js";

// question key → its card; a refetch adds and removes cards but leaves an open one alone (and what is typed in it).
const cards = new Map();
// Questions answered here: a listing the daemon sent before it took the answer does not bring their forms back.
const answered = new Set();
// A question's key: its id with its time, as a resumed session's new runtime numbers its questions anew.
const keyOf = (item) => `${item.id}@${item.created_at || ""}`;
let fieldSeq = 0;

function choicesOf(prop) {
  if (!prop || typeof prop !== "object") return null;
  if (Array.isArray(prop.enum)) {
    const names = Array.isArray(prop.enumNames) ? prop.enumNames : [];
    return prop.enum.map((v, i) => ({ value: String(v), label: String(names[i] ?? v) }));
  }
  for (const key of ["oneOf", "anyOf"]) {
    if (Array.isArray(prop[key])) {
      return prop[key].filter((o) => o && typeof o === "object")
        .map((o) => ({ value: String(o.const), label: String(o.title ?? o.const) }));
    }
  }
  return null;
}

const INPUT_TYPE = { email: "email", uri: "url", date: "date" };

// One field: its control(s), and how to read and check its value. `read()` answers
// {value} (a value to send), {} (nothing to send) or {problem}.
function buildField(name, prop, required) {
  const id = `elicit-field-${++fieldSeq}`;
  const kind = prop.type;
  const title = String(prop.title || name);
  const mark = required ? el("span", { class: "required-mark", title: "required" }, " *") : null;
  const hint = prop.description ? el("span", { class: "field-hint muted small", id: `${id}-hint` }, String(prop.description)) : null;
  const after = hint ? [hint] : []; // Element.append would write a null as the text "null"
  const problem = el("p", { class: "field-problem", role: "alert", dataset: { problemFor: name }, hidden: true });
  const wrap = el("div", { class: "elicit-field", dataset: { field: name } });
  const choices = kind === "array" ? choicesOf(prop.items) : choicesOf(prop);
  let read;

  if (kind === "boolean") {
    const box = el("input", { type: "checkbox", id, name, checked: prop.default === true });
    wrap.append(el("label", { class: "check", for: id }, box, title, mark), ...after);
    read = () => ({ value: box.checked });
  } else if (kind === "array" && !choices) {
    // A list with no choices to offer: typed, comma-separated.
    const input = el("input", { type: "text", id, name, placeholder: "a, b, c", "aria-required": required ? "true" : null,
      value: Array.isArray(prop.default) ? prop.default.join(", ") : null });
    wrap.append(el("label", { for: id }, el("span", {}, title, mark), input), ...after);
    read = () => {
      const picked = input.value.split(",").map((v) => v.trim()).filter(Boolean);
      if (required && picked.length === 0) return { problem: "is required" };
      return picked.length || required ? { value: picked } : {};
    };
  } else if (kind === "array") {
    const boxes = choices.map((c) => {
      const box = el("input", { type: "checkbox", name, value: c.value,
        checked: Array.isArray(prop.default) && prop.default.map(String).includes(c.value) });
      return { box, label: el("label", { class: "check" }, box, c.label) };
    });
    wrap.append(el("fieldset", { class: "elicit-choices", "aria-required": required ? "true" : null },
      el("legend", {}, title, mark), hint, ...boxes.map((b) => b.label)));
    read = () => {
      const picked = boxes.filter((b) => b.box.checked).map((b) => b.box.value);
      if (required && picked.length === 0) return { problem: "is required" };
      if (typeof prop.minItems === "number" && picked.length < prop.minItems) return { problem: `pick at least ${prop.minItems}` };
      if (typeof prop.maxItems === "number" && picked.length > prop.maxItems) return { problem: `pick at most ${prop.maxItems}` };
      return picked.length || required ? { value: picked } : {};
    };
  } else if (choices) {
    const select = el("select", { id, name, "aria-required": required ? "true" : null });
    select.append(el("option", { value: "" }, required ? "Choose…" : "—"));
    for (const c of choices) select.append(el("option", { value: c.value, selected: String(prop.default) === c.value }, c.label));
    wrap.append(el("label", { for: id }, el("span", {}, title, mark), select), ...after);
    read = () => {
      if (select.value === "") return required ? { problem: "is required" } : {};
      return { value: select.value };
    };
  } else if (kind === "number" || kind === "integer") {
    const input = el("input", { type: "number", id, name, inputmode: kind === "integer" ? "numeric" : "decimal",
      step: kind === "integer" ? "1" : "any", min: prop.minimum, max: prop.maximum, value: prop.default,
      "aria-required": required ? "true" : null });
    wrap.append(el("label", { for: id }, el("span", {}, title, mark), input), ...after);
    read = () => {
      const raw = input.value.trim();
      if (raw === "") return input.validity.badInput ? { problem: "must be a number" } : required ? { problem: "is required" } : {};
      const value = Number(raw);
      if (!Number.isFinite(value)) return { problem: "must be a number" };
      if (kind === "integer" && !Number.isInteger(value)) return { problem: "must be an integer" };
      if (typeof prop.minimum === "number" && value < prop.minimum) return { problem: `must be at least ${prop.minimum}` };
      if (typeof prop.maximum === "number" && value > prop.maximum) return { problem: `must be at most ${prop.maximum}` };
      return { value };
    };
  } else {
    // A string, or a type this page does not know (sent as typed: the server says if it does not fit).
    const input = el("input", { type: INPUT_TYPE[prop.format] || "text", id, name, value: prop.default,
      minlength: prop.minLength, maxlength: prop.maxLength, "aria-required": required ? "true" : null });
    wrap.append(el("label", { for: id }, el("span", {}, title, mark), input), ...after);
    read = () => {
      const value = input.value;
      if (value === "") return required ? { problem: "is required" } : {};
      if (typeof prop.minLength === "number" && value.length < prop.minLength) return { problem: `must be at least ${prop.minLength} characters` };
      if (typeof prop.maxLength === "number" && value.length > prop.maxLength) return { problem: `must be at most ${prop.maxLength} characters` };
      if (input.type !== "text" && !input.checkValidity()) return { problem: `must be a valid ${prop.format}` };
      return { value };
    };
  }
  // The hint and the problem are read with the control (a group's with its fieldset).
  problem.id = `${id}-problem`;
  const described = [hint ? hint.id : "", problem.id].filter(Boolean).join(" ");
  const control = wrap.querySelector("fieldset") || wrap.querySelector("input, select");
  if (control) control.setAttribute("aria-describedby", described);
  wrap.append(problem);
  return { name, wrap, read, problem };
}

function showProblems(card, problems) {
  for (const p of card.querySelectorAll(".field-problem, .form-problem")) {
    p.hidden = true;
    p.textContent = "";
  }
  const general = [];
  for (const { field, reason } of problems) {
    const slot = field ? [...card.querySelectorAll(".field-problem")].find((p) => p.dataset.problemFor === field) : null;
    if (slot) {
      slot.textContent = slot.textContent ? `${slot.textContent}; ${reason}` : `${field} ${reason}`;
      slot.hidden = false;
    } else {
      general.push(`${field} ${reason}`.trim());
    }
  }
  const formProblem = card.querySelector(".form-problem");
  if (general.length) {
    formProblem.textContent = general.join("; ");
    formProblem.hidden = false;
  }
  const first = card.querySelector(".field-problem:not([hidden]), .form-problem:not([hidden])");
  if (first) first.closest(".elicit-field, .elicitation")?.querySelector("input, select")?.focus();
}

async function answer(card, item, action, content) {
  const buttons = card.querySelectorAll("button");
  for (const b of buttons) b.disabled = true;
  try {
    await api("POST", `${scoped}/elicitations/${encodeURIComponent(item.id)}`,
      action === "accept" ? { action, content } : { action });
    setComposerStatus(action === "accept" ? "Answer sent." : `Question ${action === "decline" ? "declined" : "canceled"}.`, "ok", true);
    answered.add(keyOf(item));
    dropCard(keyOf(item));
  } catch (err) {
    // The error's data (here its problems) rides in `diagnostic.evidence` (compozy_base/errors.py).
    const body = (err instanceof ApiError && err.body) || {};
    const evidence = (body.diagnostic && body.diagnostic.evidence) || body.data || {};
    const problems = err.code === "invalid_elicitation_content" && Array.isArray(evidence.problems) ? evidence.problems : [];
    if (problems.length) showProblems(card, problems);
    else showProblems(card, [{ field: "", reason: errorText(err) }]);
    if (err.code === "elicitation_not_found") setComposerStatus("That question was already answered or withdrawn.", "error", true);
  } finally {
    for (const b of buttons) b.disabled = false;
  }
  refreshElicitationsSoon();
}

function buildCard(item) {
  const schema = item.requested_schema && typeof item.requested_schema === "object" ? item.requested_schema : {};
  const props = schema.properties && typeof schema.properties === "object" ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required.map(String) : []);
  const fields = Object.entries(props)
    .filter(([, prop]) => prop && typeof prop === "object")
    .map(([name, prop]) => buildField(name, prop, required.has(name)));
  const card = el("form", { class: "elicitation", novalidate: true, dataset: { requestId: item.id },
    "aria-label": "The agent asks" });
  const decline = el("button", { type: "button", class: "button deny", dataset: { action: "decline" } }, "Decline");
  const cancel = el("button", { type: "button", class: "button", dataset: { action: "cancel" } }, "Cancel");
  card.append(
    el("p", { class: "elicitation-head" }, el("strong", {}, "The agent asks"),
      required.size ? el("span", { class: "muted small" }, " · * required") : null),
    // Agent output: text only (white-space keeps its lines), never markup.
    el("p", { class: "elicitation-message", text: String(item.message || "") }),
    el("div", { class: "elicit-fields" }, ...fields.map((f) => f.wrap)),
    el("p", { class: "form-problem form-error", role: "alert", hidden: true }),
    el("div", { class: "button-row elicitation-actions" },
      el("button", { type: "submit", class: "button primary", dataset: { action: "accept" } }, "Submit"), decline, cancel));
  card.addEventListener("submit", (event) => {
    event.preventDefault();
    const content = {};
    const problems = [];
    for (const f of fields) {
      const got = f.read();
      if (got.problem) problems.push({ field: f.name, reason: got.problem });
      else if ("value" in got) content[f.name] = got.value;
    }
    if (problems.length) {
      showProblems(card, problems);
      return;
    }
    answer(card, item, "accept", content);
  });
  decline.addEventListener("click", () => answer(card, item, "decline"));
  cancel.addEventListener("click", () => answer(card, item, "cancel"));
  return card;
}

function dropCard(key) {
  const card = cards.get(key);
  if (card) card.remove();
  cards.delete(key);
  $("elicitations").hidden = cards.size === 0;
}

export function shownElicitations() {
  return cards.size;
}

export function renderElicitations(items) {
  const box = $("elicitations");
  const open = new Set(items.map(keyOf));
  for (const key of [...cards.keys()]) if (!open.has(key)) dropCard(key);
  for (const item of items) {
    const key = keyOf(item);
    if (cards.has(key) || answered.has(key)) continue;
    const card = buildCard(item);
    cards.set(key, card);
    box.append(card);
  }
  box.hidden = cards.size === 0;
  if (items.length === 0) clear(box);
}

export async function refreshElicitations() {
  if (session.state !== "active") {
    renderElicitations([]);
    return;
  }
  try {
    const { data: body } = await api("GET", `${scoped}/elicitations`);
    renderElicitations(body.elicitations || []);
  } catch {
    // The next record or delta asks again.
  }
}

export const refreshElicitationsSoon = debounce(refreshElicitations, 150);
