"""`[notifications]` and `[[notifications.webhooks]]` of config.toml: where events that need a person are sent.

Each webhook names its `url`, its `secret` (the HMAC key of the `X-Compozy-Signature` header, never logged, stored
or shown) and the `events` it wants, with optional `agents` / `workspaces` filters. The retry intervals are
settings so a test (or an impatient user) does not wait on the clock.
"""

from __future__ import annotations

import hashlib
import http.client
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from compozy_base.config.errors import ConfigError
from compozy_base.config.values import boolean, integer, parse_duration


class WebhookEvent(StrEnum):
    """The closed set of events a webhook may subscribe to (issue 31). `budget_exceeded` has
    no source yet: accepted in config, never produced."""

    PERMISSION_REQUESTED = "permission_requested"
    ELICITATION_REQUESTED = "elicitation_requested"
    AUTH_REQUIRED = "auth_required"
    SESSION_FAILED = "session_failed"
    TASK_NEEDS_ATTENTION = "task_needs_attention"
    BUDGET_EXCEEDED = "budget_exceeded"
    TURN_FINISHED = "turn_finished"


# Retry with backoff: 10 s doubling to 10 min, 12 attempts, gives a receiver down for about an hour its events.
DEFAULT_RETRY_MIN = 10.0
DEFAULT_RETRY_MAX = 600.0
DEFAULT_MAX_ATTEMPTS = 12
# One attempt in all, from connecting to the end of the answer (not each socket read: a receiver trickling a byte at a
# time is cut here), retried like a receiver that is down. 10 s is ample for a chat tool or ntfy, and short enough
# that a stuck receiver's backlog moves; each webhook has its own worker, so it holds up only its own deliveries.
DEFAULT_TIMEOUT = 10.0
WEBHOOK_KEYS = frozenset({"url", "secret", "events", "agents", "workspaces"})
# An action link answers for an hour by default: long enough to see a phone's notification in a meeting, short
# enough that a link left in a chat's history is useless by the next day.
DEFAULT_LINK_TTL = 3600.0
MAX_WEBHOOKS = 32


@dataclass(frozen=True)
class WebhookConfig:
    url: str
    # repr=False: a Config printed in a traceback or a log line never carries the secret.
    secret: str = field(repr=False)
    events: frozenset[WebhookEvent]
    agents: frozenset[str] = frozenset()
    workspaces: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        """The webhook's name in the outbox: a digest of its URL (URLs are unique across webhooks)."""
        return "wh_" + hashlib.sha256(self.url.encode()).hexdigest()[:16]

    @property
    def target(self) -> str:
        """The URL without its path, query or credentials: what logs, errors and doctor may show (a chat tool's
        incoming-webhook URL carries its own token in the path)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # host[:port], an IPv6 host in its brackets

    def wants(self, event: WebhookEvent, agent: str, workspace: tuple[str, ...]) -> bool:
        """Subscribed to `event`, and the agent and workspace (its id, name or root) pass the filters."""
        if event not in self.events:
            return False
        if self.agents and agent not in self.agents:
            return False
        return not self.workspaces or any(w in self.workspaces for w in workspace if w)


@dataclass(frozen=True)
class NotificationsConfig:
    webhooks: tuple[WebhookConfig, ...] = ()
    retry_min: float = DEFAULT_RETRY_MIN
    retry_max: float = DEFAULT_RETRY_MAX
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: float = DEFAULT_TIMEOUT
    # Signed, single-use approve/deny links in a permission's webhook payload (`actions`, issue 49).
    action_links: bool = False
    link_ttl: float = DEFAULT_LINK_TTL

    def backoff(self, attempts: int) -> float:
        """Seconds before the next attempt after `attempts` failed ones: retry_min doubling, capped at retry_max."""
        return min(self.retry_max, self.retry_min * (2 ** max(0, min(attempts - 1, 30))))

    def webhook(self, key: str) -> WebhookConfig | None:
        return next((w for w in self.webhooks if w.key == key), None)


def _names(value: object, key: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key}: must be a list of non-empty strings")
    return frozenset(value)


def _url(value: object, key: str) -> str:
    """An http(s) URL the sender can send, else ConfigError naming `key` and why, never the URL (a chat tool's
    incoming-webhook URL carries its token in the path). What the sender would refuse at every attempt (a space, a
    control or non-ASCII character, credentials, a port that is none) is refused once, here: such a URL used to
    raise in the sender at every attempt, its path in the log, and its deliveries were never given up."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: must be an http or https URL")
    if not value.isascii() or any(c <= " " or c == "\x7f" for c in value):
        raise ConfigError(f"{key}: must not contain spaces, control or non-ASCII characters (percent-encode them; "
                          "an international host in its xn-- form)")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:  # its message may quote the host and credentials: not repeated
        raise ConfigError(f"{key}: its host or port cannot be read (a port is a number in 1..65535)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{key}: must be an http or https URL with a host")
    if port == 0:
        raise ConfigError(f"{key}: its port must be a number in 1..65535")
    if "@" in parts.netloc:
        raise ConfigError(f"{key}: must not carry credentials (the sender cannot send user:password@); a "
                          "receiver that needs a token takes it in the path, or checks the signature")
    try:
        _sendable(value)
    except (ValueError, http.client.HTTPException) as exc:  # its message quotes the path: only its kind is said
        raise ConfigError(f"{key}: cannot be sent ({type(exc).__name__})") from None
    return value


def _sendable(url: str) -> None:
    """The request line and Host header of a POST to `url`, built as the sender builds them (urllib, then
    http.client), sending nothing: raises what an attempt would."""
    import urllib.request

    request = urllib.request.Request(url, method="POST")
    http.client.HTTPConnection(request.host).putrequest("POST", request.selector)


def _events(value: object, key: str) -> frozenset[WebhookEvent]:
    known = ", ".join(e.value for e in WebhookEvent)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{key}: must be a non-empty list of events ({known})")
    events = set()
    for item in value:
        try:
            events.add(WebhookEvent(item))
        except ValueError:
            raise ConfigError(f"{key}: unknown event {item!r:.60} (known: {known})") from None
    return frozenset(events)


def _webhook(raw: object, where: str) -> WebhookConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table ([[notifications.webhooks]])")
    unknown = sorted(set(raw) - WEBHOOK_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r:.60} (known: {', '.join(sorted(WEBHOOK_KEYS))})")
    secret = raw.get("secret")
    # The secret's value is never quoted back: an error names the key only.
    if not isinstance(secret, str) or len(secret) < 16:
        raise ConfigError(f"{where}.secret: must be a string of at least 16 characters")
    return WebhookConfig(url=_url(raw.get("url"), f"{where}.url"), secret=secret,
                         events=_events(raw.get("events"), f"{where}.events"),
                         agents=_names(raw.get("agents"), f"{where}.agents"),
                         workspaces=_names(raw.get("workspaces"), f"{where}.workspaces"))


def parse_notifications(table: dict[str, Any]) -> NotificationsConfig:
    """`[notifications]`: ConfigError naming the offending key (never a secret's value)."""
    raw_hooks = table.get("webhooks", [])
    if not isinstance(raw_hooks, list) or len(raw_hooks) > MAX_WEBHOOKS:
        raise ConfigError(f"notifications.webhooks: must be an array of at most {MAX_WEBHOOKS} tables "
                          "([[notifications.webhooks]])")
    hooks = tuple(_webhook(raw, f"notifications.webhooks[{i}]") for i, raw in enumerate(raw_hooks))
    seen: dict[str, int] = {}
    for i, hook in enumerate(hooks):
        if hook.url in seen:
            raise ConfigError(f"notifications.webhooks[{i}].url: the same URL as notifications.webhooks"
                              f"[{seen[hook.url]}]; subscribe one webhook to several events instead")
        seen[hook.url] = i
    retry_min = parse_duration(table.get("retry_min", DEFAULT_RETRY_MIN), "notifications.retry_min")
    retry_max = parse_duration(table.get("retry_max", DEFAULT_RETRY_MAX), "notifications.retry_max")
    if not 0.01 <= retry_min <= 3600:
        raise ConfigError("notifications.retry_min: must be between 10ms and 1h")
    if not retry_min <= retry_max <= 86400:
        raise ConfigError("notifications.retry_max: must be at least retry_min and at most 24h")
    timeout = parse_duration(table.get("timeout", DEFAULT_TIMEOUT), "notifications.timeout")
    if not 0.1 <= timeout <= 300:
        raise ConfigError("notifications.timeout: must be between 100ms and 5m")
    action_links = boolean(table.get("action_links", False), "notifications.action_links")
    link_ttl = parse_duration(table.get("link_ttl", DEFAULT_LINK_TTL), "notifications.link_ttl")
    if not 1 <= link_ttl <= 7 * 86400:
        raise ConfigError("notifications.link_ttl: must be between 1s and 168h")
    return NotificationsConfig(
        webhooks=hooks, retry_min=retry_min, retry_max=retry_max, timeout=timeout, action_links=action_links,
        link_ttl=link_ttl,
        max_attempts=integer(table.get("max_attempts", DEFAULT_MAX_ATTEMPTS), "notifications.max_attempts", 1, 100))
