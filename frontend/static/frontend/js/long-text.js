// Text from the agent, shown in bounded time however long it is. One unbroken line of megabytes (no space, no
// newline) in a message or a tool's output held the browser's main thread for minutes (issue 44: 0.5 / 2 / 10 MB,
// 60 / 198 / 296 s). So nothing the agent sends is rendered whole by default:
// - Markdown runs only over text up to MARKDOWN_MAX_CHARS; longer text shows plain (entries.js);
// - plain text shows its first SHOWN_CHARS, then "Show more" adds MORE_CHARS a click, never the rest at once;
// - the text is laid out in pieces of PIECE_CHARS, each a block of its own, so a click lays out the pieces it added
//   and the browser keeps the earlier ones as they were;
// - one-line fields (titles, commands, notes) are cut at a length (`clip`).
// Where a person approves what they read, control and bidi characters are shown as escapes (`visible`).
import { el } from "./common.js";

export const MARKDOWN_MAX_CHARS = 64 * 1024;
export const SHOWN_CHARS = 64 * 1024;
export const MORE_CHARS = 256 * 1024;
const PIECE_CHARS = 16 * 1024;
// A full piece ends at a newline in its second half when there is one, so pieces break where the text does.
const PIECE_MIN_CHARS = PIECE_CHARS / 2;
// Cut this close to an escape sequence, a piece ends before it, so the sequence stays whole in the next piece.
const ESCAPE_CHARS = 32;
// A one-line field shows this much; the rest is said as a count.
export const CLIP_CHARS = 500;

export function sizeText(chars) {
  if (chars < 1024) return `${chars} characters`;
  if (chars < 1024 * 1024) return `${Math.round(chars / 1024)} KB`;
  return `${(chars / (1024 * 1024)).toFixed(1)} MB`;
}

// `text` cut to `max` characters, its length said past that ("… (12 KB more)").
export function clip(text, max = CLIP_CHARS) {
  const s = String(text ?? "");
  if (s.length <= max) return s;
  return `${s.slice(0, safeEnd(s, max))}… (${sizeText(s.length - max)} more)`;
}

// Never cut between the two halves of a surrogate pair.
function safeEnd(text, end) {
  const code = text.charCodeAt(end - 1);
  return code >= 0xd800 && code <= 0xdbff ? end - 1 : end;
}

// ---- control and bidi characters, as escapes ----------------------------------------------------------------

// Control (Cc) and format (Cf: bidi overrides, isolates and marks, zero-width characters) characters, and the line
// and paragraph separators: the server escapes the same in permission titles (sessions/core/visible.py).
const INVISIBLE = /[\p{Cc}\p{Cf}\u2028\u2029]/gu;
const NAMED = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function escapeOne(ch) {
  if (NAMED[ch]) return NAMED[ch];
  const code = ch.codePointAt(0);
  return code <= 0xffff ? `\\u${code.toString(16).padStart(4, "0")}` : `\\U${code.toString(16).padStart(8, "0")}`;
}

// `text` as it runs: "invoice_\u202egpj.exe" reads so, not "invoice_exe.jpg". `lines`: newlines and tabs stay
// (a block of several lines, such as a tool's input); every other such character is still escaped.
export function visible(text, { lines = false } = {}) {
  return String(text ?? "").replace(INVISIBLE, (ch) => (lines && (ch === "\n" || ch === "\t") ? ch : escapeOne(ch)));
}

// ---- long text, a piece at a time ---------------------------------------------------------------------------

const plainPiece = (text) => [text];

// A node showing `text` (which may grow: `update`) a bounded amount at a time. `render(piece, state)` turns a
// piece into nodes (text by default; tool output renders ANSI colours, its state carried from piece to piece);
// `initial`: how much shows before "Show more" (at most SHOWN_CHARS); `tag`/`className`: the container's.
export class LongText {
  constructor(text, { render = plainPiece, initial = SHOWN_CHARS, tag = "div", className = "" } = {}) {
    this.text = String(text ?? "");
    this.render = render;
    this.limit = Math.min(initial, SHOWN_CHARS);
    this.pieces = []; // {start, end, closed, state, node}
    this.covered = 0; // text[0, covered) is in pieces (a piece's closing newline counts, unshown)
    this.state = {};
    this.node = el(tag, { class: `long-text ${className}`.trim() });
    this.button = el("button", { type: "button", class: "button small show-more", hidden: true,
      onclick: () => this.more() });
    this.fill();
  }

  // The container and its button, for a caller that places them apart (a `pre` cannot hold a button).
  get nodes() {
    return [this.node, this.button];
  }

  // The text grew (a streamed answer): what fits under the shown limit appears, the button says the rest.
  update(text) {
    const next = String(text ?? "");
    if (!next.startsWith(this.text.slice(0, this.covered))) {
      this.reset(next);
      return;
    }
    this.text = next;
    this.fill();
  }

  reset(text) {
    this.text = text;
    this.pieces = [];
    this.covered = 0;
    this.state = {};
    this.node.textContent = "";
    this.fill();
  }

  more() {
    this.limit += MORE_CHARS;
    this.fill();
  }

  fill() {
    const limit = Math.min(this.limit, this.text.length);
    while (this.covered < limit) {
      let piece = this.pieces[this.pieces.length - 1];
      if (!piece || piece.closed) {
        piece = { start: this.covered, end: this.covered, closed: false, state: { ...this.state },
          node: el("span", { class: "long-piece" }) };
        this.pieces.push(piece);
        this.node.append(piece.node);
      }
      let end = Math.min(piece.start + PIECE_CHARS, limit);
      let next = end;
      if (end === piece.start + PIECE_CHARS && end < this.text.length) {
        piece.closed = true;
        const newline = this.text.lastIndexOf("\n", end - 1);
        const escape = this.text.lastIndexOf("\x1b", end - 1);
        if (newline >= piece.start + PIECE_MIN_CHARS) {
          end = newline;
          next = newline + 1;
        } else if (escape > end - ESCAPE_CHARS && escape > piece.start) {
          end = escape;
          next = escape;
        } else {
          end = safeEnd(this.text, end);
          next = end;
        }
      }
      const state = { ...piece.state };
      piece.node.replaceChildren(...this.render(this.text.slice(piece.start, end), state));
      piece.end = end;
      this.state = state;
      this.covered = next;
    }
    this.label();
  }

  label() {
    const rest = this.text.length - this.covered;
    this.button.hidden = rest <= 0;
    if (rest <= 0) return;
    this.button.textContent = rest <= MORE_CHARS ? `Show the rest (${sizeText(rest)})`
      : `Show ${sizeText(MORE_CHARS)} more (${sizeText(rest)} not shown)`;
  }
}

// A block of long text with its "Show more" button under it: the one node to place.
export function longTextNode(text, options = {}) {
  const view = new LongText(text, options);
  const node = el("div", { class: "long-text-block" }, ...view.nodes);
  node.longText = view;
  return node;
}
