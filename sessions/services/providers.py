"""The providers and agents as an operator sees them: where each provider's executable is found (on PATH, through
npx, or not at all), what its key variable is and whether it is set, what is missing; a test that starts the agent
for its ACP handshake (its version and the login methods it offers); a key set into secrets.toml, then reloaded; a
login through ACP `authenticate`. The API (compozy/api/providers.py), the CLI (`compozy provider`, `compozy agent`)
and the Providers page all read this module.

No answer carries a key's value: only the variable's name and where it was set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal, TypedDict

from compozy_base.config import secrets
from compozy_base.config.agents import ProviderConfig
from compozy_base.config.errors import ConfigError
from compozy_base.config.loader import get_config
from compozy_base.home import compozy_home
from sessions.acp import auth, launch
from sessions.acp.child_env import inherited_environment
from sessions.acp.driver import AgentNotFound, AgentProcess, AgentRequestError, TransportClosed, agent_environment
from sessions.core.errors import InvalidRequest, NotFound
from sessions.core.jsonobj import JsonObject
from sessions.core.redact import redact_text
from sessions.services.config_reload import ReloadSummary, reload_config

Found = Literal["path", "npx", "missing"]
AuthState = Literal["not_needed", "key_set", "no_key", "unknown"]

# A test waits this long for the handshake of an agent on PATH; one run through npx may first download its package.
TEST_INITIALIZE_TIMEOUT = 30.0


class AuthMethodOut(TypedDict):
    id: str
    name: str
    type: str
    how: str  # what to do, in one clause (sessions/acp/auth.py `describe`)


class ProviderState(TypedDict):
    name: str
    display_name: str
    command: list[str]
    executable: str
    found: Found
    path: str  # where the executable is, or npx's path when it runs through npx
    package: str  # the pinned npm package (`name@version`) a missing executable runs as, or ""
    version: str  # the pinned package's version when it runs through npx, else "" until a test asks the agent
    key_env: str
    auth: AuthState
    key_source: str  # "secrets.toml" | "config.toml" | "daemon environment" | ""
    secret_env: list[str]
    missing: list[str]  # what stops a session from starting, one clause each; [] when nothing
    hint: str  # the next step, with the exact variable and command ("" when there is none)


class ProviderTest(TypedDict):
    ok: bool
    provider: ProviderState
    version: str
    agent_name: str
    auth_methods: list[AuthMethodOut]
    error: str


class AgentState(TypedDict):
    name: str
    provider: str
    model: str
    permissions: str
    default: bool
    provider_found: Found
    provider_auth: AuthState


def _provider(name: str) -> ProviderConfig:
    config = get_config()
    provider = config.providers.get(name)
    if provider is None:
        raise NotFound(f"no provider named {name!r:.60} (known: {', '.join(sorted(config.providers))})",
                       code="provider_not_found", data={"provider": name, "known": sorted(config.providers)})
    return provider


def set_key_hint(provider: str, variable: str) -> str:
    """The one way to give a provider its key, said with the exact variable and command."""
    return (f"set {variable}: `compozy provider set-key {provider} {variable}` (reads the key from stdin), or the "
            f"dashboard's Providers page")


def _where(provider: ProviderConfig) -> tuple[Found, str, str, list[str]]:
    """Where its executable is found (as a session start judges it, sessions/acp/launch.py), without logging."""
    env = agent_environment(provider.env)
    executable = provider.command[0]
    if "/" in executable:
        if os.path.isfile(executable) and os.access(executable, os.X_OK):
            return "path", executable, "", []
        return "missing", "", "", [f"executable {executable} does not exist or is not executable"]
    if path := shutil.which(executable, path=env.get("PATH", "")):
        return "path", path, "", []
    if provider.npm is None:
        return "missing", "", "", [f"executable {executable!r} is not on PATH (PATH={env.get('PATH', '')[:300]})"]
    if npx := shutil.which("npx", path=env.get("PATH", "")):
        return "npx", npx, provider.npm.spec, []
    return "missing", "", provider.npm.spec, [
        f"executable {executable!r} is not on PATH, nor is npx (Node.js) to run {provider.npm.spec}: install "
        f"{executable!r} or Node.js (apt-get install nodejs npm)"]


def _auth(provider: ProviderConfig) -> tuple[AuthState, str]:
    if provider.name == "demo" and provider.command[1:] == ("-m", "sessions.acp.demo_agent"):
        return "not_needed", ""
    if not provider.key_env:
        return "unknown", ""
    if provider.key_env in provider.secret_env:
        return "key_set", "secrets.toml"
    if provider.env.get(provider.key_env):
        return "key_set", "config.toml"
    if inherited_environment().get(provider.key_env) and provider.key_env not in provider.env:
        return "key_set", "daemon environment"
    return "no_key", ""


def describe(provider: ProviderConfig) -> ProviderState:
    found, path, package, missing = _where(provider)
    auth_state, key_source = _auth(provider)
    hint = ""
    if found == "missing":
        hint = missing[0]
    elif auth_state == "no_key":
        hint = (set_key_hint(provider.name, provider.key_env)
                + " (the agent may be logged in on its own: `compozy provider test " + provider.name + "` asks it)")
    return {"name": provider.name, "display_name": provider.display_name or provider.name,
            "command": list(provider.command), "executable": provider.command[0], "found": found, "path": path,
            "package": package, "version": provider.npm.version if found == "npx" and provider.npm else "",
            "key_env": provider.key_env, "auth": auth_state, "key_source": key_source,
            "secret_env": list(provider.secret_env), "missing": missing, "hint": hint}


def list_providers() -> list[ProviderState]:
    return [describe(p) for p in sorted(get_config().providers.values(), key=lambda p: p.name)]


def show_provider(name: str) -> ProviderState:
    return describe(_provider(name))


def list_agents() -> list[AgentState]:
    config = get_config()
    states = {p.name: describe(p) for p in config.providers.values()}
    agents: list[AgentState] = []
    for agent in sorted(config.agents.values(), key=lambda a: a.name):
        provider = agent.provider or config.default_provider
        state = states.get(provider)
        agents.append({"name": agent.name, "provider": provider,
                       "model": agent.model or (config.providers[provider].default_model if state else ""),
                       "permissions": agent.permissions or config.permissions_mode.value,
                       "default": agent.name == config.default_agent,
                       "provider_found": state["found"] if state else "missing",
                       "provider_auth": state["auth"] if state else "unknown"})
    return agents


def _methods(init: JsonObject, argv0: str) -> list[AuthMethodOut]:
    return [{"id": m.id, "name": m.name, "type": m.type, "how": m.describe(argv0)} for m in auth.offered(init)]


async def test_provider(name: str) -> ProviderTest:
    """Start the provider's agent in an empty directory, do the ACP handshake, stop it: its version and the login
    methods it offers. Nothing is missing only when the handshake answered."""
    provider = _provider(name)
    state = await asyncio.to_thread(describe, provider)
    result: ProviderTest = {"ok": False, "provider": state, "version": "", "agent_name": "", "auth_methods": [],
                            "error": ""}
    if state["found"] == "missing":
        result["error"] = "; ".join(state["missing"])
        return result
    try:
        launched = await _launch(provider)
    except AgentNotFound as exc:
        result["error"] = str(exc)
        return result
    init = await _handshake(launched.argv, provider, launched.initialize_timeout(TEST_INITIALIZE_TIMEOUT), result)
    if init is not None:
        info = init.get("agentInfo")
        info = info if isinstance(info, dict) else {}
        result["ok"], result["version"] = True, str(info.get("version") or state["version"])
        result["agent_name"], result["auth_methods"] = str(info.get("name") or ""), _methods(init, provider.command[0])
    return result


async def _launch(provider: ProviderConfig) -> launch.Launch:
    """As a session start runs it: through npx when its executable is missing (sessions/acp/launch.py). AgentNotFound
    when neither is there any more (npx went away since `describe` looked)."""
    return await asyncio.to_thread(launch.resolve, provider.command, provider=provider.name, package=provider.npm,
                                   env=provider.env)


async def _refuse(method: str, params: JsonObject) -> JsonObject:
    """A probe's agent asks nothing of a person: any request it makes is refused."""
    raise AgentRequestError(method, -32601, "a provider probe answers no requests")


async def _handshake(argv: list[str], provider: ProviderConfig, timeout: float,
                     result: ProviderTest) -> JsonObject | None:
    with tempfile.TemporaryDirectory(prefix="compozy-provider-test-") as cwd:
        agent = AgentProcess(argv, cwd=Path(cwd), env=provider.env, on_update=lambda update: None,
                             on_request=_refuse, owner=f"provider-test-{provider.name}")
        try:
            await agent.start()
            return await agent.initialize(timeout)
        except AgentNotFound as exc:
            result["error"] = str(exc)
        except (TransportClosed, AgentRequestError, TimeoutError) as exc:
            stderr = agent.stderr.text().strip().splitlines()[-3:]
            result["error"] = redact_text(f"the agent did not answer ACP initialize: {exc or type(exc).__name__}"
                                          + (f"; its stderr ends: {' / '.join(stderr)}" if stderr else ""))
        finally:
            with contextlib.suppress(ProcessLookupError):
                await agent.shutdown(grace=0.5, stop_timeout=2.0)
    return None


async def set_key(name: str, variable: str, value: str) -> tuple[ProviderState, ReloadSummary]:
    """Write one of a provider's variables to secrets.toml (value "": remove it), then reload. The variable defaults
    to the provider's key_env."""
    provider = _provider(name)
    variable = variable or provider.key_env
    if not variable:
        raise InvalidRequest(f"provider {name!r:.60} names no key variable: give one (`variable`), or set "
                             f"[providers.{name}] key_env", code="key_variable_required")
    try:
        await asyncio.to_thread(secrets.write_secret, compozy_home(), name, variable, value)
    except ConfigError as exc:
        raise InvalidRequest(str(exc), code="invalid_secret", data={"provider": name, "variable": variable}) from exc
    summary = await reload_config()
    return await asyncio.to_thread(describe, _provider(name)), summary


class LoginResult(TypedDict):
    ok: bool
    provider: str
    method: str
    auth_methods: list[AuthMethodOut]
    error: str


async def login(name: str, method: str) -> LoginResult:
    """ACP `authenticate` with `method` (default: the one sessions would choose, else the first offered) in a
    short-lived agent: an agent whose login stores its credentials (an OAuth or device flow) keeps them for the
    sessions that follow. A terminal method is not run here: its command is named, to run in a terminal."""
    provider = _provider(name)
    state = await asyncio.to_thread(describe, provider)
    result: LoginResult = {"ok": False, "provider": name, "method": method, "auth_methods": [], "error": ""}
    if state["found"] == "missing":
        result["error"] = "; ".join(state["missing"])
        return result
    try:
        launched = await _launch(provider)
    except AgentNotFound as exc:
        result["error"] = str(exc)
        return result
    with tempfile.TemporaryDirectory(prefix="compozy-provider-login-") as cwd:
        agent = AgentProcess(launched.argv, cwd=Path(cwd), env=provider.env, on_update=lambda update: None,
                             on_request=_refuse, owner=f"provider-login-{name}")
        try:
            await agent.start()
            init = await agent.initialize(launched.initialize_timeout(TEST_INITIALIZE_TIMEOUT))
            methods = auth.offered(init)
            result["auth_methods"] = _methods(init, provider.command[0])
            chosen = _choose(methods, method or provider.auth_method, provider)
            if isinstance(chosen, str):
                result["error"] = chosen
                return result
            result["method"] = chosen.id
            if chosen.type == "terminal":
                result["error"] = f"{chosen.describe(provider.command[0])}: a terminal method runs in a terminal"
                return result
            await agent.request("authenticate", {"methodId": chosen.id}, timeout=launch.NPX_INITIALIZE_TIMEOUT)
            result["ok"] = True
        except AgentNotFound as exc:
            result["error"] = str(exc)
        except (TransportClosed, AgentRequestError, TimeoutError) as exc:
            result["error"] = redact_text(f"{exc or type(exc).__name__}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                await agent.shutdown(grace=0.5, stop_timeout=2.0)
    return result


def _choose(methods: list[auth.AuthMethod], wanted: str, provider: ProviderConfig) -> auth.AuthMethod | str:
    if not methods:
        return (f"the agent offers no login methods at initialize; {set_key_hint(provider.name, provider.key_env)}"
                if provider.key_env else "the agent offers no login methods at initialize")
    if wanted:
        return next((m for m in methods if m.id == wanted), f"the agent offers no method {wanted!r:.60} (it offers: "
                    f"{', '.join(m.id for m in methods)})")
    return auth.choose(methods, "", agent_environment(provider.env)) or methods[0]
