"""Secret redaction for everything Compozy persists or exports.

Applied to logs, crash bundles, stored events and diagnostics. Key/value shapes err on the side of
over-redaction; ordinary prose, code, paths, UUIDs and git hashes are left alone.

This runs on every stored event, so all regexes are compiled once at import and a cheap substring
pre-check lets common text skip most of them. Every rewrite maps its own output to itself, which
keeps ``redact_text`` idempotent (re-redacting stored data must not change it).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

__all__ = [
    "PROVIDER_PREFIXES",
    "REDACTED",
    "bound_tail",
    "bound_text",
    "holds_known_secret",
    "is_secret_key",
    "known_secrets",
    "redact_argv",
    "redact_text",
    "redact_value",
    "register_secret",
]

REDACTED = "[REDACTED]"

# --- secret-like keys ------------------------------------------------------------------------------

# Matched against the lower-cased key with "-", "." and spaces folded to "_".
# Exclusions keep usage counters (max_tokens, inputTokens, tokenizer), "author"/"authority" and
# auth metadata (authMethodId, auth_type) readable; "authorization"/"authorize" stay secret.
_SECRET_KEY_RE = re.compile(
    r"token(?!s|iz|_?(?:count|usage|limit|budget))"
    r"|secret|passw(?:or)?d|api_?key|credential|private_?key|access_?key|session_?key"
    r"|auth(?!or(?!i[sz])|_?(?:methods?|type|mode|required|enabled))"
)
_KEY_FOLD_RE = re.compile(r"[-.\s]+")
# Keys that name a credential's id, never the credential: an actor's `token_id` (issue 49) says which token acted,
# and is what `compozy token revoke` takes.
_ID_KEYS = frozenset({"token_id"})


@lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """True when ``key`` names a credential (``OPENAI_API_KEY``, ``x-api-key``, ``client_secret``...)."""
    if not key:
        return False
    norm = _KEY_FOLD_RE.sub("_", key.lower())
    return norm not in _ID_KEYS and _SECRET_KEY_RE.search(norm) is not None


# --- free-text patterns ----------------------------------------------------------------------------

# Auth schemes kept in front of a redacted credential ("Bearer [REDACTED]") so logs stay readable.
_SCHEMES = r"(?i:bearer|basic|token|digest|negotiate|bot|apikey)"
_SCHEME_PREFIX_RE = re.compile(rf"({_SCHEMES})([ \t]+)(\S.*)", re.DOTALL)

# Values that are type annotations, not secrets: keeps `def f(token: str)` and `password: Optional[str]`.
_NOT_A_VALUE = (
    r"(?!(?:str|bytes|int|float|bool|None|Any|Optional|Union|dict|list|string|number|boolean|object"
    r"|SecretStr)\b)"
)
# A value: already-redacted marker, a quoted string (keeps its quotes), or a bare token.
_QUOTED = r"(?P<q>\\?[\"'])(?:\\.|(?!(?P=q)).)*?(?P=q)"
# A quote that never closes on this line still must not let the word after it through.
_UNCLOSED = r"[\"'][^\s\"']+"

# scheme://user:pass@host -> scheme://[REDACTED]@host. A colon is required so `ssh://git@host` survives;
# the password part is greedy up to the last "@" of the authority.
_URL_USERINFO_RE = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#@:'\"<>]*:[^\s/?#'\"<>]*@")

# env:NAME and vault:path secret references.
_SECRET_REF_RE = re.compile(r"(?<![\w\-])(?:env|vault):[\w./#\-]+")

# "key": "value" / 'key': 'value' / \"key\": \"value\" (JSON, Python reprs, escaped JSON in logs).
_QUOTED_KEY_RE = re.compile(
    r"(?P<kq>\\?[\"'])(?P<key>[^\"'\\\s]{1,128})(?P=kq)[ \t]*:[ \t]*"
    r"(?:(?P<vq>\\?[\"'])(?P<val>(?:\\.|(?!(?P=vq)).)*?)(?P=vq)"
    r"|(?P<open>\\?[\"'])[^\s\"'\\]+"  # unclosed on this line
    r"|(?P<bare>(?![\[{\"'\\]|null\b|true\b|false\b|None\b|True\b|False\b)[^\s,}\]]+))"
)

# --key value / --key=value / -key value. A following "-..." is the next flag, not a value.
_FLAG_RE = re.compile(
    r"(?<![\w\-])(?P<dash>--?)(?P<key>[A-Za-z][\w.\-]*)(?P<sep>=|[ \t]+(?!-))"
    rf"(?P<val>\[REDACTED\]|{_QUOTED}|{_UNCLOSED}|[^\s\"']+)"
)

# key=value / key: value (also HTTP headers: "Authorization: Bearer x", "X-Api-Key: x").
# `==` is a comparison, and a "/" before the key means a path such as /etc/passwd.
_ASSIGN_RE = re.compile(
    r"(?<![\w.\-/])(?P<key>[A-Za-z_][\w.\-]*)(?P<sep>=(?!=)|:[ \t]*)"
    rf"(?:(?P<scheme>{_SCHEMES})(?P<ws>[ \t]+)(?=\S))?{_NOT_A_VALUE}"
    rf"(?P<val>\[REDACTED\]|{_QUOTED}|{_UNCLOSED}|[^\s,;&\"'<>(){{}}\[\]]+)"
)

# identifier_key VALUE: a key spelled as an identifier (with "_" or "-", e.g. `aws configure set
# aws_secret_access_key VALUE`, `export API_KEY VALUE`), a blank, then a value that looks generated: 16+ token
# characters with a digit or a "+" or "/". Prose ("the api_key parameter") keeps its words.
_SPACED_RE = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z0-9]*(?:[_\-][A-Za-z0-9]+)+)[ \t]+"
    r"(?P<val>(?=[A-Za-z0-9+/=_\-.]*[0-9+/])[A-Za-z0-9+/=_\-.]{16,})(?![^\s,;])"
)

# Bare "Bearer <token>". The token must look like one (a digit or an inner symbol, or 20+ chars) so
# prose such as "uses Bearer authentication." is left alone; a trailing "." stays outside the token.
_TOK = r"[A-Za-z0-9\-._~+/]"
_TOK_END = r"[A-Za-z0-9\-_~+/]"
_BEARER_RE = re.compile(
    rf"(?<![\w\-])(?P<scheme>[Bb]earer|BEARER)(?P<ws>[ \t]+)"
    rf"(?:(?={_TOK}*(?:[0-9]|[\-._~+/][A-Za-z0-9])){_TOK}{{7,}}{_TOK_END}=*|{_TOK}{{19,}}{_TOK_END}=*)"
)

# GitLab token prefixes (personal, pipeline trigger, deploy, runner, OAuth, feed, CI job, incoming mail, agent):
# one list for the pattern and for its cheap gate, which tests these exact prefixes, not "gl" and "-" (common in
# prose and code, they would run the full pattern over most chunks).
_GITLAB_PREFIXES = ("glpat-", "glptt-", "gldt-", "glrt-", "glsoat-", "glft-", "glcbt-", "glimt-", "glagent-")

# How each shape of _PROVIDER_RE begins: a streamed chunk that ends inside one is held until the rest arrives
# (redact_stream.py). Kept beside the pattern so the two change together.
PROVIDER_PREFIXES = ("sk-", "sk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "AKIA", "ASIA",
                     "AIza", "xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-", *_GITLAB_PREFIXES, "eyJ")

# Provider credential shapes, redacted wherever they appear.
_PROVIDER_RE = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-[A-Za-z0-9_\-]{20,}"  # OpenAI sk-/sk-proj-, Anthropic sk-ant-
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe secret / restricted keys
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{22,}"  # GitHub fine-grained PATs
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"  # AWS access key ids
    r"|AIza[0-9A-Za-z_\-]{35,}"  # Google API keys
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack tokens
    rf"|(?:{'|'.join(_GITLAB_PREFIXES)})[A-Za-z0-9_\-]{{20,}}"  # GitLab tokens
    r"|eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"  # JWTs
    r")"
)

# Private key blocks (PEM: RSA, EC, DSA, PKCS#8, encrypted; OpenSSH; PGP). The body up to the matching END line is
# replaced; a block cut off before its END (a streamed chunk, a truncated log line) is replaced to the end of the
# text. The output keeps both armour lines, so redacting it again changes nothing.
_PEM_RE = re.compile(
    r"-----BEGIN (?P<label>(?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----(?:.*?-----END (?P=label)-----|.*\Z)",
    re.DOTALL,
)


def _sub_pem(m: re.Match[str]) -> str:
    label = m.group("label")
    return f"-----BEGIN {label}-----{REDACTED}-----END {label}-----"


# Words every secret-like key contains ("api_key", "private_key", "session_key" all contain "key").
# Found with str.find on lower-cased text; the key rules then run anchored at those hits only, which is
# far cheaper than scanning every position of every event with the full patterns.
_KEY_WORDS = ("token", "secret", "passw", "key", "credential", "auth")
# Run of key characters, matched on the reversed text to find where a key starts left of a hit. Word characters
# of any script count, as in the key patterns' \w, so one scan covers the whole run a regex would.
_KEY_RUN_RE = re.compile(r"[\w.\-]*")
# Longer runs are data (base64, a minified blob), not a key: skipped whole, never scanned once per hit inside
# them (`tokentoken…` made that quadratic: 7 s for 256 KiB).
_MAX_KEY_CHARS = 128
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_AFTER_KEY = frozenset("=:\"'\\")
_QUOTES = frozenset("\"'")


def _redact_secret_value(key: str, value: str) -> str:
    """Redact a quoted-string or bare value of a secret key; keep an auth scheme word for auth keys."""
    if value == REDACTED or not value:
        return value
    if "auth" in key.lower():
        m = _SCHEME_PREFIX_RE.fullmatch(value)
        if m:
            return f"{m.group(1)}{m.group(2)}{REDACTED}"
    return REDACTED


def _sub_quoted_key(m: re.Match[str]) -> str:
    key = m.group("key")
    if not is_secret_key(key):
        return m.group(0)
    vq = m.group("vq")
    value_start = m.start("vq") if vq is not None else max(m.start("open"), m.start("bare"))
    head = m.group(0)[: value_start - m.start()]
    if vq is not None:
        return f"{head}{vq}{_redact_secret_value(key, m.group('val'))}{vq}"
    # A bare (number-like) or unclosed value becomes a quoted marker so JSON stays valid.
    kq = m.group("kq")
    return f"{head}{kq}{REDACTED}{kq}"


def _replace_value(m: re.Match[str], value_group: str = "val") -> str:
    """Swap the value group for the redacted marker, keeping its surrounding quotes."""
    val = m.group(value_group)
    q = m.group("q")
    new = f"{q}{REDACTED}{q}" if q and val.startswith(q) else REDACTED
    start, end = m.start(value_group) - m.start(), m.end(value_group) - m.start()
    whole = m.group(0)
    return whole[:start] + new + whole[end:]


def _sub_flag(m: re.Match[str]) -> str:
    return _replace_value(m) if is_secret_key(m.group("key")) else m.group(0)


def _sub_assign(m: re.Match[str]) -> str:
    key = m.group("key")
    if not is_secret_key(key):
        return m.group(0)
    if m.group("scheme") and "auth" not in key.lower():
        # "password: basic x" - the word is part of the value, not an auth scheme.
        q = m.group("q")
        mark = f"{q}{REDACTED}{q}" if q else REDACTED
        return f"{key}{m.group('sep')}{mark}"
    return _replace_value(m)


def _sub_bearer(m: re.Match[str]) -> str:
    return f"{m.group('scheme')}{m.group('ws')}{REDACTED}"


_KEYED_SUB_FUNCS: dict[re.Pattern[str], Callable[[re.Match[str]], str]] = {
    _FLAG_RE: _sub_flag,
    _QUOTED_KEY_RE: _sub_quoted_key,
    _ASSIGN_RE: _sub_assign,
}


def _lower(text: str) -> str:
    """Lower-case with positions aligned to ``text`` (a few characters, e.g. "İ", lower to two)."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


def _keyed_edit(text: str, start: int) -> re.Match[str] | None:
    """Try the key/value forms for a key (or its dashes) starting at ``start``; return a secret match."""
    key_start = start
    while key_start < len(text) and text[key_start] == "-":
        key_start += 1
    if key_start > start:  # --key value / --key=value / -key value
        m = _FLAG_RE.match(text, start)
        return m if m is not None and is_secret_key(m.group("key")) else None
    if start > 0 and text[start - 1] in "\"'":  # "key": value (also \"key\": in escaped JSON)
        qpos = start - 2 if start > 1 and text[start - 2] == "\\" else start - 1
        m = _QUOTED_KEY_RE.match(text, qpos)
        if m is not None:
            return m if is_secret_key(m.group("key")) else None
    m = _ASSIGN_RE.match(text, start)
    return m if m is not None and is_secret_key(m.group("key")) else None


def _key_word_hits(low: str) -> list[int]:
    hits: list[int] = []
    for word in _KEY_WORDS:
        i = low.find(word)
        while i != -1:
            hits.append(i)
            i = low.find(word, i + 1)
    if len(hits) > 1:
        hits.sort()
    return hits


def _run_end(pattern: re.Pattern[str], text: str, at: int) -> int:
    """End of the run of `pattern` at `at`; the patterns match the empty string, so there always is one."""
    found = pattern.match(text, at)
    return found.end() if found else at


def _redact_keyed(text: str, low: str, hits: list[int]) -> str:
    """Redact values of secret-like keys, examining only keys around the trigger-word ``hits``."""
    pieces: list[str] = []
    done = 0  # end of the last rewritten value; later hits inside it are already handled
    run_end = -1  # end of the key run around the last hit: later hits inside it share its key
    rev = low[::-1]
    n = len(text)
    for pos in hits:
        if pos < done or pos < run_end:
            continue
        start = max(pos - (_run_end(_KEY_RUN_RE, rev, n - pos) - (n - pos)), done)
        end = run_end = _run_end(_KEY_RUN_RE, low, pos)
        if end - start > _MAX_KEY_CHARS:
            continue
        # Cheap reject before any regex: every form needs a separator or quote right after the key, dashes
        # before it, a quote before it (quoted keys may hold other characters), or a blank and then a value
        # (`aws_secret_access_key VALUE`).
        after = low[end : end + 1]
        if low[start] != "-" and (low[start - 1] if start else "") not in _QUOTES:
            if after in (" ", "\t"):
                m = _SPACED_RE.match(text, start)
                if m is not None and is_secret_key(m.group("key")):
                    pieces.append(text[done : m.start("val")])
                    pieces.append(REDACTED)
                    done = m.end()
                continue
            if after not in _AFTER_KEY:
                continue
        m = _keyed_edit(text, start)
        if m is None:
            continue
        replacement = _KEYED_SUB_FUNCS[m.re](m)
        if replacement != m.group(0):
            pieces.append(text[done : m.start()])
            pieces.append(replacement)
            done = m.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def redact_text(text: str) -> str:
    """Return ``text`` with credentials replaced by ``[REDACTED]``; idempotent.

    Each rule is gated by a substring pre-check, so ordinary text pays for a few ``in`` tests only.
    Gates look at the input: redaction only removes trigger substrings, it never introduces them.
    """
    if not text:
        return text
    if "PRIVATE KEY" in text:
        text = _PEM_RE.sub(_sub_pem, text)
    low = _lower(text)
    changed = False
    if ":" in low:
        if "://" in low and "@" in low:
            text, count = _URL_USERINFO_RE.subn(rf"\1{REDACTED}@", text)
            changed = count > 0
        if "env:" in low or "vault:" in low:
            text, count = _SECRET_REF_RE.subn(REDACTED, text)
            changed = changed or count > 0
    if changed:
        low = _lower(text)
    hits = _key_word_hits(low)
    if hits:
        text = _redact_keyed(text, low, hits)
    if "bearer" in low:
        text = _BEARER_RE.sub(_sub_bearer, text)
    if (
        "sk-" in low
        or "xox" in low
        or "eyJ" in text
        or "AIza" in text
        or "AKIA" in text
        or "ASIA" in text
        or ("_" in low and ("k_" in low or "gh" in low))
        or ("gl" in text and any(prefix in text for prefix in _GITLAB_PREFIXES))
    ):
        text = _PROVIDER_RE.sub(REDACTED, text)
    for secret in _KNOWN_SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


# Secrets this process holds whatever their shape (the daemon's own API token has no recognisable prefix): a user
# who pastes one into a prompt must not find it in events.db, a crash bundle or an evidence archive.
_KNOWN_SECRETS: list[str] = []


def register_secret(value: str | None) -> None:
    if value and len(value) >= 16 and value not in _KNOWN_SECRETS:
        _KNOWN_SECRETS.append(value)


def known_secrets() -> tuple[str, ...]:
    """Those registered so far, in order: the store writer process is handed them (it redacts what it stores)."""
    return tuple(_KNOWN_SECRETS)


def holds_known_secret(text: str) -> bool:
    """`text` carries a registered secret (an environment value an agent must not inherit)."""
    return any(secret in text for secret in _KNOWN_SECRETS)


def redact_argv(args: Iterable[Any]) -> list[str]:
    """Redact a command line given as separate arguments: ``["--api-key", "x"]`` hides ``x`` too."""
    out: list[str] = []
    hide_next = False
    for raw in args:
        arg = str(raw)
        if hide_next:
            hide_next = False
            if not arg.startswith("-"):
                out.append(REDACTED)
                continue
        if arg.startswith("-") and "=" not in arg and is_secret_key(arg.lstrip("-")):
            hide_next = True
        out.append(redact_text(arg))
    return out


def _is_secret_scalar(value: Any) -> bool:
    # bool is an int subclass, but a flag such as auth_required=True leaks nothing.
    if isinstance(value, bool):
        return False
    return (isinstance(value, str) and value != "") or isinstance(value, int | float)


def redact_value(value: Any) -> Any:
    """Recursively redact dicts, lists, tuples and strings; returns new objects, never mutates input.

    A dict entry whose key is secret-like has its string/number value replaced wholesale; nested
    containers under such a key are still walked so their structure stays inspectable.
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(k, str) and _is_secret_scalar(v) and is_secret_key(k):
                out[k] = REDACTED
            else:
                out[k] = redact_value(v)
        return out
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, tuple):
        items = [redact_value(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


# --- byte bounding ---------------------------------------------------------------------------------


def _encode(text: str) -> bytes:
    # surrogatepass: text decoded with surrogateescape must not crash the bounding of crash output.
    return text.encode("utf-8", "surrogatepass")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _head(data: bytes, limit: int) -> bytes:
    """Longest prefix of ``data`` within ``limit`` bytes that ends on a character boundary."""
    if len(data) <= limit:
        return data
    cut = limit
    while cut > 0 and (data[cut] & 0xC0) == 0x80:  # step back off continuation bytes
        cut -= 1
    return data[:cut]


def _tail(data: bytes, limit: int) -> bytes:
    """Longest suffix of ``data`` within ``limit`` bytes that starts on a character boundary."""
    if len(data) <= limit:
        return data
    start = len(data) - limit
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return data[start:]


def bound_text(text: str, limit_bytes: int, suffix: str = "...[truncated]") -> str:
    """Keep the head of ``text`` so its UTF-8 size, suffix included, is at most ``limit_bytes``."""
    if limit_bytes < 0:
        raise ValueError("limit_bytes must be >= 0")
    if len(text) * 4 <= limit_bytes:  # no character encodes to more than 4 bytes
        return text
    data = _encode(text)
    if len(data) <= limit_bytes:
        return text
    marker = _encode(suffix)
    if len(marker) >= limit_bytes:
        return _decode(_head(marker, limit_bytes))
    return _decode(_head(data, limit_bytes - len(marker))) + suffix


def bound_tail(text: str, limit_bytes: int, prefix: str = "...[truncated]") -> str:
    """Keep the tail of ``text`` (prefix included) within ``limit_bytes``: the end of stderr matters most."""
    if limit_bytes < 0:
        raise ValueError("limit_bytes must be >= 0")
    if len(text) * 4 <= limit_bytes:
        return text
    data = _encode(text)
    if len(data) <= limit_bytes:
        return text
    marker = _encode(prefix)
    if len(marker) >= limit_bytes:
        return _decode(_head(marker, limit_bytes))
    return prefix + _decode(_tail(data, limit_bytes - len(marker)))
