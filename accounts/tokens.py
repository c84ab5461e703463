"""The token secret's format and hashing: no Django, so the guard's hot path and tests use it directly.

A token reads `<id>.<secret>`: the id finds its row, the secret is checked against a SHA-256 of a per-token salt
and the secret (the secret has 256 random bits, so a slow hash would add nothing but latency to every request).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

TOKEN_ID_PREFIX = "tok_"


def new_token_id() -> str:
    return TOKEN_ID_PREFIX + secrets.token_hex(8)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def new_salt() -> str:
    return secrets.token_hex(16)


def digest(salt: str, secret: str) -> str:
    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def split(presented: str) -> tuple[str, str] | None:
    """(id, secret) of a presented token, None when it does not look like one of ours."""
    token_id, dot, secret = presented.partition(".")
    if not dot or not token_id.startswith(TOKEN_ID_PREFIX) or len(token_id) > 40 or not secret:
        return None
    return token_id, secret


def matches(salt: str, stored: str, secret: str) -> bool:
    return hmac.compare_digest(digest(salt, secret), stored)
