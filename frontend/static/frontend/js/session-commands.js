// The agent's slash commands in the composer: a `/` at the start of the prompt opens a list of the commands the
// agent offers (`available_commands` on the session record) with their descriptions, filtered by what follows
// the slash. Arrows move, Enter or Tab picks (the prompt becomes `/name `, ready for arguments), Escape closes.
// The prompt is sent as typed: the agent reads `/name args` itself.
import { clear, el } from "./common.js";
import { $, session } from "./session-record.js";

const input = $("prompt-input");
const menu = $("slash-menu");

let matches = []; // the commands shown, in order
let active = 0; // the index of the highlighted one
let dismissed = null; // the prompt text Escape closed the menu on: it stays closed until the text changes

function commands() {
  return (session.available_commands || []).filter((c) => c && c.name);
}

// The command name being typed: the text after a leading `/` while no space has ended it; null otherwise.
function typedName() {
  const match = /^\/(\S*)$/.exec(input.value);
  if (!match || input.selectionStart !== input.value.length) return null;
  return match[1].toLowerCase();
}

function filtered(typed) {
  const all = commands();
  const starts = all.filter((c) => c.name.toLowerCase().startsWith(typed));
  const contains = all.filter((c) => !starts.includes(c) && c.name.toLowerCase().includes(typed));
  return [...starts, ...contains];
}

function optionId(index) {
  return `slash-option-${index}`;
}

function close() {
  menu.hidden = true;
  clear(menu);
  matches = [];
  input.setAttribute("aria-expanded", "false");
  input.removeAttribute("aria-activedescendant");
}

function highlight(index) {
  active = (index + matches.length) % matches.length;
  for (const [i, item] of [...menu.children].entries()) {
    item.setAttribute("aria-selected", String(i === active));
  }
  input.setAttribute("aria-activedescendant", optionId(active));
  menu.children[active].scrollIntoView({ block: "nearest" });
}

// Shows the menu for the prompt as it stands, or closes it; also after a new record changed the commands.
export function renderCommands() {
  const typed = typedName();
  if (typed === null || input.value === dismissed || document.activeElement !== input) {
    close();
    return;
  }
  const previous = matches[active] && matches[active].name;
  const next = filtered(typed);
  if (!next.length) {
    close();
    return;
  }
  matches = next;
  menu.replaceChildren(...matches.map((c, i) => {
    const hint = c.input && c.input.hint ? el("span", { class: "slash-hint" }, ` ${c.input.hint}`) : null;
    const item = el("li", { id: optionId(i), role: "option", class: "slash-option", dataset: { command: c.name } },
      el("span", { class: "slash-name" }, `/${c.name}`, hint),
      el("span", { class: "slash-description" }, c.description || ""));
    // mousedown, not click: the textarea keeps the focus (and its caret).
    item.addEventListener("mousedown", (event) => {
      event.preventDefault();
      pick(i);
    });
    return item;
  }));
  menu.hidden = false;
  input.setAttribute("aria-expanded", "true");
  const kept = matches.findIndex((c) => c.name === previous);
  highlight(kept >= 0 ? kept : 0);
}

function pick(index) {
  const command = matches[index];
  if (!command) return;
  input.value = `/${command.name} `;
  input.setSelectionRange(input.value.length, input.value.length);
  close();
  input.focus();
}

function onKey(event) {
  if (menu.hidden || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === "ArrowDown" || event.key === "ArrowUp") {
    event.preventDefault();
    highlight(active + (event.key === "ArrowDown" ? 1 : -1));
  } else if ((event.key === "Enter" && !event.shiftKey) || (event.key === "Tab" && !event.shiftKey)) {
    event.preventDefault();
    pick(active);
  } else if (event.key === "Escape") {
    event.preventDefault();
    dismissed = input.value;
    close();
  }
}

export function setupCommands() {
  input.addEventListener("keydown", onKey);
  input.addEventListener("input", () => {
    if (input.value !== dismissed) dismissed = null;
    renderCommands();
  });
  // Moving the caret off the command name (a click, Home) closes the list; leaving the prompt does too.
  input.addEventListener("click", renderCommands);
  input.addEventListener("blur", close);
  input.addEventListener("focus", renderCommands);
  $("composer").addEventListener("submit", close);
}
