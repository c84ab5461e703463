"""The environment a child of the daemon (an agent, a hook) starts from: the daemon's own, minus what the daemon
holds. An agent inherited `COMPOZY_CLUSTER_TOKEN`, the secret every node of a cluster accepts, and would have
inherited the API token from any variable a start script exported it in."""

from __future__ import annotations

import os
from collections.abc import Mapping

from sessions.core.redact import holds_known_secret

# By name: the cluster token opens every node's API, the catalog's and the queue's URLs carry their passwords (and
# point an agent's own tests at the daemon's catalog), the secret key signs the daemon's state.
DAEMON_SECRET_ENV = frozenset({"COMPOZY_CLUSTER_TOKEN", "COMPOZY_SECRET_KEY", "DATABASE_URL", "REDIS_URL"})


def is_daemon_secret(name: str, value: str) -> bool:
    """A variable named above, or one whose value carries a secret the daemon registered (its API token, the
    cluster token) under whatever name."""
    return name in DAEMON_SECRET_ENV or holds_known_secret(value)


def inherited_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items() if not is_daemon_secret(name, value)}
