// The agent's Markdown → a sanitised DOM fragment. Agent output is untrusted (an agent, or a web page it read,
// can emit HTML and `javascript:` links), so three layers stand between it and the page:
// 1. markdown-it with `html: false`: raw HTML in the text is escaped as text, and links whose scheme is not
//    http, https or mailto stay plain text; images are not rendered (their Markdown stays text).
// 2. DOMPurify over markdown-it's output, with the same scheme rule and only the tags Markdown produces.
// 3. The page's Content-Security-Policy (frontend/views.py): no inline script, no foreign origin, Trusted Types.
// DOMPurify returns a fragment (RETURN_DOM_FRAGMENT): no HTML string is ever assigned to the DOM here.
import markdownit from "../vendor/markdown-it.min.mjs";
import DOMPurify from "../vendor/purify.es.mjs";

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
  const escaped = md.utils.escapeHtml(token.content);
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

// A DocumentFragment of `text` rendered as Markdown, sanitised.
export function renderMarkdown(text) {
  return purifier.sanitize(md.render(String(text || "")), PURIFY_CONFIG);
}
