"""Text a person must read as it is: control and bidi characters shown as escapes, never acted on.

A command whose name holds U+202E (RIGHT-TO-LEFT OVERRIDE) reads backwards: "invoice_\\u202egpj.exe" showed as
"invoice_exe.jpg" in the approval card. A newline or carriage return can hide the rest of a command past the
first line. Where a person approves what they read (the permission row's title and resource, the terminal command a
request names), every control (Cc) and format (Cf: the bidi overrides, isolates and marks, zero-width characters)
character is written as its escape (`\\u202e`, `\\n`), so what is shown is what runs."""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str) -> str:
    if text.isprintable():  # the common case: nothing to show
        return text
    out = []
    for ch in text:
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf") or ch in ("\u2028", "\u2029"):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)
