"""JSON as RFC 8259 has it: no NaN, no Infinity, and one value per key.

Python's json module writes NaN, Infinity and -Infinity by default, and reads them back; a browser's JSON.parse
refuses the whole document that holds one. A NaN cost an agent reported once made `GET /api/sessions` unreadable to
the dashboard, which then showed no session at all (issue 44). So what the daemon answers, streams, stores and
prints is encoded here with `allow_nan=False`. A value that is not finite (stored by an earlier version, or one
that got past the checks at the edges) is written as `null`, never as a token no JSON parser accepts: a reader
gets the document, without that one number.

`loads` is the reading side, for what a client sends: NaN and Infinity are refused (`NotFinite`), and so is a key
that repeats in one object (`DuplicateKey`): Python keeps the last, other parsers the first, so two readers of the
same body (a proxy, a hook, the daemon) would each act on a different value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

# What the encoder's ValueError says of a NaN or an infinity under allow_nan=False (CPython's C and Python encoders).
_NOT_FINITE = "Out of range float values are not JSON compliant"


class NotFinite(ValueError):
    """NaN, Infinity or -Infinity, or a number too large to be one (1e400), in JSON text."""


class DuplicateKey(ValueError):
    """An object whose key repeats."""


def finite(value: Any) -> Any:
    """`value` with every float that is not finite (in lists, tuples and dicts, keys included) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {finite(k) if isinstance(k, float) else k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumper(**options: Any) -> Callable[[Any], str]:
    """`json.dumps` with these options (`cls`, `indent`, `separators`, `sort_keys`, `ensure_ascii`), the encoder
    built once and refusing NaN: a document holding one is encoded again with it as null."""
    cls: type[json.JSONEncoder] = options.pop("cls", None) or json.JSONEncoder
    strict = cls(allow_nan=False, **options)
    loose = cls(allow_nan=True, **options)

    def dumps(value: Any) -> str:
        try:
            return strict.encode(value)
        except ValueError as exc:
            if not str(exc).startswith(_NOT_FINITE):
                raise
        # Rare: the encoder's own `default` (a pydantic model, a datetime) may be what held the NaN, so the value
        # is taken as that encoder writes it, then cleaned.
        return strict.encode(finite(json.loads(loose.encode(value))))

    return dumps


_dumpers: dict[tuple[tuple[str, Any], ...], Callable[[Any], str]] = {}


def dumps(value: Any, **options: Any) -> str:
    """One call's `json.dumps`, refusing NaN (see `dumper`; a module that encodes per event keeps a dumper)."""
    key = tuple(sorted(options.items()))
    encode = _dumpers.get(key)
    if encode is None:
        encode = _dumpers[key] = dumper(**options)
    return encode(value)


def _constant(name: str) -> Any:
    raise NotFinite(f"{name} is not a JSON number (RFC 8259)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(f"the number {text[:40]} is too large")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"the key {key[:80]!r} appears more than once in one object")
            seen.add(key)
    return value


_STRICT = json.JSONDecoder(parse_constant=_constant, parse_float=_float, object_pairs_hook=_object)
_FINITE = json.JSONDecoder(parse_constant=_constant, parse_float=_float)


def loads(text: str | bytes, *, duplicates: bool = False) -> Any:
    """JSON text a client sent, as `json.loads` reads it, except that NaN and Infinity (NotFinite) and, unless
    `duplicates`, a repeated key (DuplicateKey) are refused. Both are ValueErrors, as malformed JSON is."""
    if isinstance(text, bytes | bytearray):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    return (_FINITE if duplicates else _STRICT).decode(text)
