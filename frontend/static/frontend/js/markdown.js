// The agent's Markdown → a sanitised DOM fragment. Agent output is untrusted (an agent, or a web page it read,
// can emit HTML and `javascript:` links), so three layers stand between it and the page:
// 1. markdown-it with `html: false`: raw HTML in the text is escaped as text, and links whose scheme is not
//    http, https or mailto stay plain text; images are not rendered (their Markdown stays text).
// 2. DOMPurify over markdown-it's output, with the same scheme rule and only the tags Markdown produces.
// 3. The page's Content-Security-Policy (frontend/views.py): no inline script, no foreign origin, Trusted Types.
// DOMPurify returns a fragment (RETURN_DOM_FRAGMENT): no HTML string is ever assigned to the DOM here.
// Code blocks are highlighted by highlight.js (vendored, pinned: vendor/README.md) inside markdown-it, so its
// `<span class="hljs-…">` markup goes through the same DOMPurify pass; each block gets a copy button after it.
import hljs from "../vendor/highlight/core.min.js";
import bash from "../vendor/highlight/languages/bash.min.js";
import css from "../vendor/highlight/languages/css.min.js";
import diff from "../vendor/highlight/languages/diff.min.js";
import go from "../vendor/highlight/languages/go.min.js";
import javascript from "../vendor/highlight/languages/javascript.min.js";
import json from "../vendor/highlight/languages/json.min.js";
import python from "../vendor/highlight/languages/python.min.js";
import rust from "../vendor/highlight/languages/rust.min.js";
import shell from "../vendor/highlight/languages/shell.min.js";
import sql from "../vendor/highlight/languages/sql.min.js";
import typescript from "../vendor/highlight/languages/typescript.min.js";
import xml from "../vendor/highlight/languages/xml.min.js";
import yaml from "../vendor/highlight/languages/yaml.min.js";
import markdownit from "../vendor/markdown-it.min.mjs";
import DOMPurify from "../vendor/purify.es.mjs";

for (const [name, grammar] of Object.entries({ bash, css, diff, go, javascript, json, python, rust, shell, sql,
  typescript, xml, yaml })) hljs.registerLanguage(name, grammar);
// A block longer than this is shown plain: highlighting is a nicety, never a frozen tab.
const HIGHLIGHT_MAX_CHARS = 100_000;

// Highlighted HTML for a named language highlight.js knows, else the escaped text; never a guess (a guess costs
// every grammar's run and colours prose as code).
function highlighted(code, lang) {
  if (lang && code.length <= HIGHLIGHT_MAX_CHARS && hljs.getLanguage(lang)) {
    try {
      return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
    } catch {
      // a grammar that throws leaves the block plain
    }
  }
  return md.utils.escapeHtml(code);
}

const SAFE_URL = /^(?:https?:|mailto:)/i;
const ALLOWED_TAGS = ["a", "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote",
  "em", "strong", "s", "del", "code", "pre", "table", "thead", "tbody", "tr", "th", "td", "span", "div"];
const ALLOWED_ATTR = ["href", "title", "class", "start", "align", "data-lang"];

// linkify: a bare http(s) URL becomes a link; fuzzy matches are off, or `calc.py` would link to a Paraguayan host.
const md = markdownit({ html: false, linkify: true, breaks: false, typographer: false });
md.linkify.set({ fuzzyLink: false, fuzzyEmail: false, fuzzyIP: false });
md.disable("image");
md.validateLink = (url) => SAFE_URL.test(url.trim());

// A fenced block shows its language above the code (the language is text: markdown-it escapes it).
md.renderer.rules.fence = (tokens, idx, options, env, self) => {
  const token = tokens[idx];
  const lang = (token.info || "").trim().split(/\s+/)[0] || "";
  const escaped = highlighted(token.content, lang.toLowerCase());
  const label = lang ? `<div class="code-lang">${md.utils.escapeHtml(lang)}</div>` : "";
  const cls = lang ? ` class="language-${md.utils.escapeHtml(lang.replace(/[^\w+-]/g, ""))}"` : "";
  return `<div class="code-block"${lang ? ` data-lang="${md.utils.escapeHtml(lang)}"` : ""}>${label}<pre><code${cls}>${escaped}</code></pre></div>\n`;
};

const purifier = DOMPurify(window);
purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") || "";
    if (!SAFE_URL.test(href.trim())) node.removeAttribute("href");
    else {
      node.setAttribute("rel", "noopener noreferrer");
      node.setAttribute("target", "_blank");
    }
  }
});

const PURIFY_CONFIG = {
  ALLOWED_TAGS, ALLOWED_ATTR, ALLOWED_URI_REGEXP: SAFE_URL, ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

// A DocumentFragment of `text` rendered as Markdown, sanitised; each code block with a copy button.
export function renderMarkdown(text) {
  const fragment = purifier.sanitize(md.render(String(text || "")), PURIFY_CONFIG);
  for (const block of fragment.querySelectorAll(".code-block")) addCopyButton(block);
  return fragment;
}

// The button copies the block's text (textContent: what the agent wrote, without the highlighting's markup).
function addCopyButton(block) {
  const code = block.querySelector("code");
  if (!code) return;
  const button = document.createElement("button");
  button.type = "button";
  button.className = "code-copy";
  button.textContent = "Copy";
  button.title = "Copy this code";
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(code.textContent || "");
      button.textContent = "Copied";
    } catch {
      button.textContent = "Copy failed";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
  block.prepend(button);
}
