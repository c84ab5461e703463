"""Reloading `[providers.*]` and `[agents.*]` without a restart: the one place the daemon's config changes after
its start (`compozy daemon reload`, SIGHUP, a key set through the API).

1. `config.toml` and `secrets.toml` are read again, off the loop, and checked whole by the same loader as a start:
   a file the loader refuses is refused whole, with its one-line error, and the daemon keeps what it runs on.
2. Only the providers and agents are taken from it; every other table keeps the value of the start (changing the
   port or the store needs a restart, as before). A reload that would leave a default or the title role naming a
   provider or agent that is gone is refused too.
3. The new config replaces the cached one (`get_config`) and the session manager's: sessions started from now on
   use it. A live session keeps the config and provider it started with (its runtime holds them), so its stream
   and its agent process are untouched.
4. The keys secrets.toml holds are registered for redaction before anything can echo them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from typing import TypedDict

from compozy_base.config import secrets
from compozy_base.config.loader import Config, ConfigError, get_config, load_config, replace_config
from sessions.core.errors import CompozyError, Unavailable
from sessions.core.redact import register_secret
from sessions.runtime.manager import get_manager

logger = logging.getLogger(__name__)


class ConfigRefused(CompozyError):
    """The file a reload read is one a start would refuse: nothing of it is taken."""

    status, code = 422, "config_invalid"


class ReloadSummary(TypedDict):
    source: str
    providers: list[str]
    agents: list[str]
    added: list[str]  # "provider:NAME" / "agent:NAME"
    removed: list[str]
    changed: list[str]


# Two reloads at once (a SIGHUP while a key is set) would each lay their file over the config the other read.
_lock = threading.Lock()


async def reload_config() -> ReloadSummary:
    """Steps 1-4 above; raises ConfigRefused with the loader's line."""
    return await asyncio.to_thread(_reload)


def _reload() -> ReloadSummary:
    with _lock:
        current = get_config()
        try:
            fresh = load_config()
            accepted = _accept(current, fresh)
        except ConfigError as exc:
            logger.warning("config reload refused: %s (the daemon keeps running on what it had)", exc)
            raise ConfigRefused(f"invalid config: {exc}", data={"source": current.source}) from exc
        for value in secrets.secret_values(accepted.providers):
            register_secret(value)
        replace_config(accepted)
        _manager_takes(accepted)
    summary = _summary(current, accepted)
    logger.info("config reloaded from %s: %d provider(s), %d agent(s); added %s, removed %s, changed %s",
                accepted.source, len(accepted.providers), len(accepted.agents), summary["added"] or "none",
                summary["removed"] or "none", summary["changed"] or "none")
    return summary


def _accept(current: Config, fresh: Config) -> Config:
    """The current config with the fresh providers and agents, refused when what stays would name one that went."""
    for what, name, known in (("defaults.agent", current.default_agent, fresh.agents),
                              ("defaults.provider", current.default_provider, fresh.providers),
                              ("roles.auto_title.agent", current.auto_title.agent, fresh.agents),
                              ("roles.auto_title.provider", current.auto_title.provider, fresh.providers)):
        if name and name not in known:
            raise ConfigError(f"{what} names {name!r:.60}, which the reloaded file no longer defines "
                              "(restart the daemon to change the defaults)")
    for route in current.auto_title.fallback_chain:
        if route.provider not in fresh.providers:
            raise ConfigError(f"roles.auto_title.fallback_chain names provider {route.provider!r:.60}, which the "
                              "reloaded file no longer defines")
    return dataclasses.replace(current, providers=fresh.providers, agents=fresh.agents, source=fresh.source)


def _manager_takes(config: Config) -> None:
    try:
        manager = get_manager()
    except Unavailable:  # a management command's process: it has no sessions to start
        return
    manager.config = config  # read at each start (SessionManager.start): live runtimes keep their own


def _summary(before: Config, after: Config) -> ReloadSummary:
    added, removed, changed = [], [], []
    for kind, old, new in (("provider", before.providers, after.providers), ("agent", before.agents, after.agents)):
        added += [f"{kind}:{name}" for name in sorted(set(new) - set(old))]
        removed += [f"{kind}:{name}" for name in sorted(set(old) - set(new))]
        changed += [f"{kind}:{name}" for name in sorted(set(old) & set(new)) if old[name] != new[name]]
    return {"source": after.source, "providers": sorted(after.providers), "agents": sorted(after.agents),
            "added": added, "removed": removed, "changed": changed}
