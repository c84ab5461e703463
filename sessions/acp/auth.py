"""ACP authentication: which of the methods an agent offers at `initialize` the client calls `authenticate` with.

codex-acp, for one, offers `api-key` and `chat-gpt` and answers `session/new` with -32000 "Authentication required"
until the client picks one; an agent that offers nothing (claude-agent-acp reads its key itself) is never asked.

The rule (issue 29): the provider's configured `auth_method` when the agent offers it; else the first `env_var`
method whose required variables are all set in the agent's environment; else none (the agent may already be logged
in, and if it is not, `session/new` says so and the start fails as `provider_auth_failure` naming the methods).
Pure functions over the `initialize` answer: unit tested without an agent.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AuthMethod:
    id: str
    name: str
    type: str = "agent"  # "agent" | "env_var" | "terminal" (an unknown type is treated as the agent's own)
    required_vars: tuple[str, ...] = ()  # env_var: what must be set for the method to work
    args: tuple[str, ...] = field(default=())  # terminal: arguments to run the agent's binary with to log in

    def describe(self, argv0: str = "", provider: str = "") -> str:
        """One clause an operator can act on: the method, what it needs, or the command to run."""
        label = f"{self.id} ({self.name})" if self.name and self.name != self.id else self.id
        if self.type == "env_var" and self.required_vars and provider:
            return f"{label}: " + " and ".join(f"`compozy provider set-key {provider} {name}`"
                                                for name in self.required_vars)
        if self.type == "env_var" and self.required_vars:
            return f"{label}: set {', '.join(self.required_vars)} in the provider's env"
        if self.type == "terminal" and argv0:
            return f"{label}: run `{shlex.join([argv0, *self.args])}` in a terminal"
        return label


def offered(init: Mapping[str, Any]) -> list[AuthMethod]:
    """The auth methods in an `initialize` answer; malformed entries are skipped (agent output is untrusted)."""
    methods: list[AuthMethod] = []
    for item in _items(init.get("authMethods")):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
            continue
        kind = item["type"] if isinstance(item.get("type"), str) else "agent"
        required = tuple(v["name"] for v in _items(item.get("vars"))
                         if isinstance(v, dict) and isinstance(v.get("name"), str) and not v.get("optional"))
        methods.append(AuthMethod(item["id"], str(item.get("name") or item["id"]), kind, required,
                                  tuple(str(a) for a in _items(item.get("args")))))
    return methods


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def choose(methods: Sequence[AuthMethod], configured: str, env: Mapping[str, str]) -> AuthMethod | None:
    """The method to `authenticate` with, or None. A configured method the agent does not offer is None too: the
    start then fails on the agent's own refusal, with the offered methods named."""
    if configured:
        return next((m for m in methods if m.id == configured), None)
    return next((m for m in methods if m.type == "env_var" and m.required_vars
                 and all(env.get(name) for name in m.required_vars)), None)


def refusal(methods: Sequence[AuthMethod], argv0: str, configured: str, detail: str, *, provider: str = "",
            session_id: str = "", key_env: str = "") -> str:
    """The failure summary of a start the agent refused for authentication: what it offers and how to proceed,
    with the provider's name, its key variable and the session's id when they are known (never a placeholder)."""
    parts = [f"the agent needs authentication ({detail})" if detail else "the agent needs authentication"]
    if configured and all(m.id != configured for m in methods):
        parts.append(f"configured auth_method {configured!r} is not offered")
    if methods:
        parts.append("it offers: " + "; ".join(m.describe(argv0, provider) for m in methods))
    if provider:
        parts.append(next_step(provider, session_id, key_env, [m for m in methods if m.type != "terminal"]))
    elif methods:
        parts.append("set the provider's auth_method to one of them, then resume the session")
    return "; ".join(parts)


def next_step(provider: str, session_id: str, key_env: str, methods: Sequence[AuthMethod] = ()) -> str:
    """What to run, exactly: the key to set or the login to do, then the resume."""
    steps = []
    if key_env:
        steps.append(f"set {key_env}: `compozy provider set-key {provider} {key_env}` (reads it from stdin)")
    if methods:
        steps.append(f"log in: `compozy provider login {provider} --method {methods[0].id}`")
    if not steps:
        steps.append(f"log the agent in (`compozy provider test {provider}` lists its login methods)")
    resume = f", then `compozy session resume {session_id}`" if session_id else ""
    return " or ".join(steps) + resume
