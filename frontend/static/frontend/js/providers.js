// The providers page: each provider's state (found on PATH, via npx or missing; its key variable and whether it is
// set; the next step) and a form to set its key. The key goes to the API once (PUT /api/providers/NAME/key), which
// writes secrets.toml and reloads; no answer carries it back, and the field is cleared at once.
import { api, badge, clear, el, errorText, pageData, startDaemonStatus } from "./common.js";

const FOUND = { path: "on PATH", npx: "via npx", missing: "missing" };
const FOUND_BADGE = { path: "idle", npx: "idle", missing: "failed" };
const AUTH = { not_needed: "not needed", key_set: "key set", no_key: "no key", unknown: "unknown" };

const body = document.getElementById("providers-body");
const error = document.getElementById("providers-error");
const note = document.getElementById("providers-note");
const logins = document.getElementById("providers-login");

function say(text, failed) {
  error.hidden = !failed;
  error.textContent = failed ? text : "";
  note.textContent = failed ? "" : text;
}

async function save(provider, variable, input) {
  const value = input.value;
  input.value = "";  // the key leaves the page now: nothing keeps it
  try {
    const { data } = await api("PUT", `/api/providers/${encodeURIComponent(provider.name)}/key`,
      { variable: variable.value.trim(), value });
    say(`${provider.name}: ${variable.value.trim() || provider.key_env} ${value ? "set" : "removed"}; providers reloaded`
      + ` (auth: ${AUTH[data.provider.auth] || data.provider.auth})`, false);
    await refresh();
  } catch (err) {
    say(`${provider.name}: ${errorText(err)}`, true);
  }
}

async function login(provider, method) {
  say(`${provider.name}: logging in with ${method.id}…`, false);
  try {
    const { data } = await api("POST", `/api/providers/${encodeURIComponent(provider.name)}/login`,
      { method: method.id });
    say(data.ok ? `${provider.name}: logged in with ${data.method}` : `${provider.name}: ${data.error}`, !data.ok);
  } catch (err) {
    say(`${provider.name}: ${errorText(err)}`, true);
  }
}

// The login methods the agent offered at `initialize`: one button each (ACP `authenticate`); a terminal method is
// named with its command instead, to run in a terminal.
function offerLogins(provider, methods) {
  clear(logins);
  for (const method of methods) {
    if (method.type === "terminal") {
      logins.append(el("div", { class: "muted" }, `${provider.name}: ${method.how}`));
      continue;
    }
    const button = el("button", { type: "button", class: "button small", dataset: { method: method.id } },
      `Log in ${provider.name} with ${method.name || method.id}`);
    button.addEventListener("click", () => login(provider, method));
    logins.append(button, " ");
  }
}

async function test(provider, button) {
  button.disabled = true;
  clear(logins);
  say(`${provider.name}: starting its agent for the ACP handshake…`, false);
  try {
    const { data } = await api("POST", `/api/providers/${encodeURIComponent(provider.name)}/test`);
    const methods = data.auth_methods.map((m) => m.how).join("; ");
    say(data.ok ? `${provider.name}: ${data.agent_name || "agent"} ${data.version} answered`
      + (methods ? `; login methods: ${methods}` : "") : `${provider.name}: ${data.error}`, !data.ok);
    if (data.ok) offerLogins(provider, data.auth_methods);
  } catch (err) {
    say(`${provider.name}: ${errorText(err)}`, true);
  } finally {
    button.disabled = false;
  }
}

function keyForm(provider) {
  const variable = el("input", { type: "text", name: "variable", value: provider.key_env, placeholder: "VARIABLE",
    "aria-label": `${provider.name} key variable`, autocomplete: "off", spellcheck: "false", size: "18" });
  const input = el("input", { type: "password", name: "value", placeholder: "key", autocomplete: "off",
    "aria-label": `${provider.name} key`, size: "18" });
  const testButton = el("button", { type: "button", class: "button small" }, "Test");
  testButton.addEventListener("click", () => test(provider, testButton));
  const form = el("form", { class: "button-row provider-key", dataset: { provider: provider.name } },
    variable, input, el("button", { type: "submit", class: "button small" }, "Save"), testButton);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    save(provider, variable, input);
  });
  return form;
}

function render(providers) {
  clear(body);
  for (const p of providers) {
    const found = el("td", null, badge(FOUND_BADGE[p.found] || "unknown"));
    found.firstChild.textContent = FOUND[p.found] || p.found;
    if (p.path || p.package) found.append(el("div", { class: "muted" }, p.package || p.path));
    const key = el("td", null, el("div", null, AUTH[p.auth] || p.auth));
    if (p.key_env) key.append(el("div", { class: "muted" }, p.key_env + (p.key_source ? ` (${p.key_source})` : "")));
    body.append(el("tr", { dataset: { provider: p.name, found: p.found, auth: p.auth } },
      el("td", null, el("div", null, p.display_name), el("div", { class: "muted" }, p.name)),
      found, key,
      el("td", { class: "provider-hint" }, p.hint || ""),
      el("td", null, keyForm(p))));
  }
}

async function refresh() {
  try {
    render((await api("GET", "/api/providers")).data.providers);
  } catch (err) {
    say(errorText(err), true);
  }
}

startDaemonStatus();
render(pageData().initial || []);
