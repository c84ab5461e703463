"""The accounts app's pure rules (issue 49): which scope covers which, a link's state on a given clock, the token
cache's lifetime on a given clock, token durations, and the token format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.django_env import ensure_django

ensure_django()

from accounts import tokens  # noqa: E402
from accounts.errors import AccountError  # noqa: E402
from accounts.links import state  # noqa: E402
from accounts.principal import Principal  # noqa: E402
from accounts.scopes import ROLE_SCOPES, Role, TokenScope, allows  # noqa: E402
from accounts.services import TokenCache, duration_seconds  # noqa: E402
from compozy.api.route_scopes import needed, session_of  # noqa: E402

T0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)


def test_admin_covers_every_scope_and_every_scope_covers_read() -> None:
    for scope in TokenScope:
        assert allows(frozenset({TokenScope.ADMIN}), scope)
        assert allows(frozenset({scope}), TokenScope.READ)
    assert not allows(frozenset({TokenScope.READ}), TokenScope.PROMPT)
    assert not allows(frozenset({TokenScope.PROMPT}), TokenScope.APPROVE)
    assert not allows(frozenset({TokenScope.APPROVE}), TokenScope.ADMIN)
    assert not allows(frozenset(), TokenScope.READ)
    assert ROLE_SCOPES[Role.VIEWER] == {TokenScope.READ}


def test_a_link_is_used_whatever_its_age_and_expires_at_its_ttl() -> None:
    expires = T0 + timedelta(hours=1)
    assert state(expires, None, T0) == "open"
    assert state(expires, None, expires - timedelta(seconds=1)) == "open"
    assert state(expires, None, expires) == "expired"
    assert state(expires, T0, T0) == "used"
    assert state(expires, T0, expires + timedelta(days=1)) == "used"


def test_a_checked_token_is_trusted_for_the_cache_lifetime_only() -> None:
    cache = TokenCache(ttl=2.0)
    who = Principal("alice", "tok_1", frozenset({TokenScope.READ}))
    cache.put("tok_1", "fp", who, now=100.0)
    assert cache.get("tok_1", "fp", 101.9) == (True, who, "")
    assert cache.get("tok_1", "fp", 102.1) == (False, None, "")  # revocation reaches every node within this
    assert cache.get("tok_1", "other", 101.0) == (False, None, "")  # another secret for the same id is checked anew
    cache.forget("tok_1")
    assert cache.get("tok_1", "fp", 100.5) == (False, None, "")  # a revocation here is seen at once
    # A refusal is kept with its code for the same lifetime: a retried revoked token is not read again.
    cache.put("tok_2", "fp", None, now=100.0, refusal="token_revoked")
    assert cache.get("tok_2", "fp", 101.9) == (True, None, "token_revoked")
    assert cache.get("tok_2", "fp", 102.1) == (False, None, "")


def test_durations_and_the_token_format() -> None:
    assert duration_seconds("30d") == 30 * 86400 and duration_seconds("1h30m") == 5400
    for bad in ("", "30", "d", "1x", "1h 2m"):
        with pytest.raises(AccountError) as refused:
            duration_seconds(bad)
        assert refused.value.code == "invalid_duration"
    token_id, secret = tokens.new_token_id(), tokens.new_secret()
    assert tokens.split(f"{token_id}.{secret}") == (token_id, secret)
    assert tokens.split(secret) is None and tokens.split(f"{token_id}.") is None
    salt = tokens.new_salt()
    stored = tokens.digest(salt, secret)
    assert tokens.matches(salt, stored, secret) and not tokens.matches(salt, stored, secret + "x")
    assert secret not in stored and tokens.digest(tokens.new_salt(), secret) != stored  # salted per token


def test_routes_declare_their_scope_and_unlisted_writes_are_the_admins() -> None:
    scoped = "/api/workspaces/ws_1/sessions/sess_1"
    assert needed("GET", scoped + "/events")[0] == TokenScope.READ
    assert needed("POST", scoped + "/prompt") == (TokenScope.PROMPT, "session.prompt")
    assert needed("POST", scoped + "/permissions/r1") == (TokenScope.APPROVE, "session.permission")
    assert needed("GET", "/api/audit")[0] == TokenScope.ADMIN
    assert needed("POST", "/api/some/new/route")[0] == TokenScope.ADMIN
    assert session_of(scoped + "/stream") == "sess_1"
    assert session_of("/sessions/sess_1/events.jsonl") == "sess_1"
    assert session_of("/api/sessions/catalog-stream") is None


def test_action_links_are_off_unless_asked_and_their_ttl_is_bounded() -> None:
    from compozy_base.config.errors import ConfigError
    from compozy_base.config.notifications import parse_notifications

    assert not parse_notifications({}).action_links
    on = parse_notifications({"action_links": True, "link_ttl": "10m"})
    assert on.action_links and on.link_ttl == 600
    for bad in ({"action_links": "yes"}, {"link_ttl": "0s"}, {"link_ttl": "30d"}):
        with pytest.raises(ConfigError):
            parse_notifications(bad)
    with pytest.raises(ConfigError, match=r"^notifications\.action_links: must be true or false"):
        parse_notifications({"action_links": "yes"})
