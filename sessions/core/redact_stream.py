"""Redaction across streamed chunks. `redact_text` sees one stored row at a time; an agent that streams a secret
in small, spaced deltas (six characters every 50 ms) put it in the store one harmless-looking piece per row, and
the transcript joined the pieces back together.

Two parts, both used by the recorder:
- `secret_tail(text)`: how much of the end of a streamed run might be the beginning of a secret (a provider
  prefix, a key and its separator, URL credentials, a private-key block). The recorder holds that much back,
  briefly, so the next chunk joins it and the row that holds the whole secret is redacted as a whole.
- `PrivateKeyCarry`: a private-key block outlives any short hold (a model streams 3 KiB of key for seconds). A
  row that opens a block and does not close it makes the rows after it in the same stream redacted up to the
  block's END line.
"""

from __future__ import annotations

import re

from sessions.core.redact import PROVIDER_PREFIXES, REDACTED, is_secret_key

# Look no further back than this for the start of a secret: longer tails are released as they are.
_TAIL_CHARS = 512
# Every proper beginning of a prefix ("g", "gh", "ghp"): the chunk may end right inside the prefix itself.
_PREFIX_STARTS = frozenset(p[:i] for p in PROVIDER_PREFIXES for i in range(1, len(p)))
# Whole words a chunk may end inside (redact.py's key words are fragments such as "passw", found in finished text).
_KEY_WORDS = ("token", "secret", "password", "passwd", "key", "credential", "auth", "bearer")

_BOUNDARY = r"(?<![A-Za-z0-9_\-])"
# A provider token under way: its prefix, then token characters up to the end of the text.
_PROVIDER_OPEN_RE = re.compile(
    _BOUNDARY + "(?:" + "|".join(re.escape(p) for p in PROVIDER_PREFIXES) + r")[A-Za-z0-9_\-.]*\Z")
# What may follow a key's separator while its value is still being streamed: `=hunt`, `: "ab`, `: `.
_VALUE_OPEN_RE = re.compile(r"""[ \t]*["']?[^\s"',;]*""")
_IDENTIFIER_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_\-][A-Za-z0-9]+)+")
# Key characters, matched on the reversed tail: where the run that ends at a position starts. Every rule below
# looks at a fixed position (the end, the last separator, the last "://"), never searches from every position:
# a 512-character run of letters costs one scan, not 512.
_RUN_REV_RE = re.compile(r"[\w.\-]*")
_SCHEME_REV_RE = re.compile(r"[A-Za-z0-9+.\-]*")
_LETTER_RE = re.compile(r"[^\W\d]")
_BEGIN_RE = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
_ARMOUR = "-----BEGIN "


def _open_block(text: str) -> tuple[int, str] | None:
    """(start, label) of the last private-key block in `text` that has no END line after it."""
    found = None
    for m in _BEGIN_RE.finditer(text):
        found = m
    if found is None or f"-----END {found.group(1)}-----" in text[found.end():]:
        return None
    return found.start(), found.group(1)


def _run_start(rev: str, end: int, pattern: re.Pattern[str] = _RUN_REV_RE) -> int:
    """Start of the run of `pattern` characters that ends at `end` (an index into the unreversed text)."""
    at = len(rev) - end
    found = pattern.match(rev, at)  # the run patterns match the empty string: always a match
    return end - ((found.end() if found else at) - at)


def _key_before(tail: str, rev: str, end: int) -> int | None:
    """Start of a secret-like key that ends at `end` (a closing quote and blanks before `end` skipped)."""
    k_end = len(tail[:end].rstrip(" \t"))
    if k_end and tail[k_end - 1] in "\"'":
        k_end -= 1
    start = _run_start(rev, k_end)
    if start == k_end or not is_secret_key(tail[start:k_end]):
        return None
    return start - 1 if start and tail[start - 1] in "\"'" else start


def secret_tail(text: str) -> int:
    """How many characters at the end of `text` might be the beginning of a secret still being streamed."""
    block = _open_block(text) if "PRIVATE KEY" in text else None
    if block is not None:
        return len(text) - block[0]
    tail = text[-_TAIL_CHARS:]
    n, rev = len(tail), tail[::-1]
    # A private-key armour line under way ("-----BEG"): hold from its first dash.
    dash = tail.rfind("-----")
    if dash != -1 and "\n" not in tail[dash:] and _ARMOUR.startswith(tail[dash:dash + len(_ARMOUR)]):
        return n - dash
    starts: list[int] = []
    # A key, its separator and a value not finished (or not begun): `password=hunt`, `"api_key": "ab`.
    sep = max(tail.rfind("="), tail.rfind(":"))
    if sep > 0 and _VALUE_OPEN_RE.fullmatch(tail, sep + 1):
        key = _key_before(tail, rev, sep)
        if key is not None:
            starts.append(key)
    body = len(tail.rstrip(" \t"))
    if body < n:  # blanks at the end: `Bearer `, `--api-key `, `aws_secret_access_key ` wait for their value
        start = _run_start(rev, body)
        word = tail[start:body]
        if (word.lower() == "bearer" or (word.startswith("-") and is_secret_key(word.lstrip("-")))
                or (_IDENTIFIER_KEY_RE.fullmatch(word) and is_secret_key(word))):
            starts.append(start)
        return n - min(starts) if starts else 0
    token = max(tail.rfind(" "), tail.rfind("\t"), tail.rfind("\r"), tail.rfind("\n")) + 1  # the text's last token
    run = _run_start(rev, n)
    # A provider token lies inside the run of key characters that ends the text (every prefix is made of them):
    # searched from there, not from every position of the last token (a chunk of digits and a `;` took 1.8 µs).
    provider = _PROVIDER_OPEN_RE.search(tail, max(token, run))
    if provider is not None:
        starts.append(provider.start())
    scheme = tail.rfind("://", token)
    if scheme > 0 and not any(c in tail[scheme + 3:] for c in "/?#@"):  # URL credentials under way
        starts.append(_run_start(rev, scheme, _SCHEME_REV_RE))
    letter = _LETTER_RE.search(tail, run) if run < n else None
    if letter is not None:  # a key still being spelled ("passw", "api_k") or waiting for its separator
        word = tail[letter.start():]
        segment = re.search(r"[a-z]+\Z", word.lower())
        if (word in _PREFIX_STARTS or is_secret_key(word)
                or (segment is not None and any(k.startswith(segment.group()) for k in _KEY_WORDS))):
            starts.append(letter.start())
    return n - min(starts) if starts else 0


class PrivateKeyCarry:
    """Per stream (turn, event type): a private-key block a row opened and left open hides the rows after it
    until its END line. Used on the store's writer thread, in commit order."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], str] = {}

    def apply(self, turn_id: str, type_: str, text: str) -> str:
        key = (turn_id, type_)
        label = self._open.pop(key, None)
        if label is not None:
            end = text.find(f"-----END {label}-----")
            if end == -1:
                self._open[key] = label
                return REDACTED
            text = REDACTED + text[end:]
        if "PRIVATE KEY" in text:
            block = _open_block(text)
            if block is not None:
                self._open[key] = block[1]
        return text
