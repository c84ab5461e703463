"""REST routes for the providers, the agents and the config reload (`/api/providers…`, `/api/agents`,
`/api/daemon/reload`). Thin: sessions/services/providers.py and config_reload.py do the work. No answer carries a
key's value."""

from __future__ import annotations

from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Router, Schema

from compozy.api.schemas import Ref, StrictIn, responses
from sessions.services import providers
from sessions.services.config_reload import reload_config

router = Router(tags=["providers"])


class ProviderOut(Schema):
    name: str
    display_name: str
    command: list[str]
    executable: str
    found: Literal["path", "npx", "missing"] = Field(..., description="Where a session start finds the agent.")
    path: str
    package: str = Field(..., description="The pinned npm package run through npx when the executable is missing.")
    version: str
    key_env: str = Field(..., description="The environment variable that holds its API key.")
    auth: Literal["not_needed", "key_set", "no_key", "unknown"]
    key_source: str = Field(..., description="Where the key is set: secrets.toml, config.toml, daemon environment.")
    secret_env: list[str] = Field(..., description="Variables set in secrets.toml (names only).")
    missing: list[str] = Field(..., description="What stops a session from starting, one clause each.")
    hint: str = Field(..., description="The next step, with the exact variable and command.")


class ProvidersOut(Schema):
    providers: list[ProviderOut]


class ProviderEnvelope(Schema):
    provider: ProviderOut


class AuthMethodOut(Schema):
    id: str
    name: str
    type: str
    how: str


class ProviderTestOut(Schema):
    ok: bool
    provider: ProviderOut
    version: str
    agent_name: str
    auth_methods: list[AuthMethodOut]
    error: str = Field(..., description="What is missing or failed ('' when ok).")


class ReloadOut(Schema):
    source: str
    providers: list[str]
    agents: list[str]
    added: list[str]
    removed: list[str]
    changed: list[str]


class ReloadEnvelope(Schema):
    reload: ReloadOut


class KeyIn(StrictIn):
    variable: str = Field("", max_length=128, description="Default: the provider's key_env.")
    value: str = Field(..., max_length=4096, description="The key; '' removes it.")


class KeySetOut(Schema):
    provider: ProviderOut
    reload: ReloadOut


class LoginIn(StrictIn):
    method: str = Field("", max_length=128, description="An auth method id the agent offers (default: chosen).")


class LoginOut(Schema):
    ok: bool
    provider: str
    method: str
    auth_methods: list[AuthMethodOut]
    error: str


class AgentOut(Schema):
    name: str
    provider: str
    model: str
    permissions: str
    default: bool
    provider_found: str
    provider_auth: str


class AgentsOut(Schema):
    agents: list[AgentOut]


@router.get("/providers", response=responses({200: ProvidersOut}))
async def list_providers(request: HttpRequest) -> dict[str, Any]:
    """Every provider: where its agent is found (PATH, npx, missing), its key variable and whether it is set."""
    return {"providers": await sync_to_async(providers.list_providers)()}


@router.get("/providers/{name}", response=responses({200: ProviderEnvelope}))
async def show_provider(request: HttpRequest, name: Ref) -> dict[str, Any]:
    """One provider (404 `provider_not_found`)."""
    return {"provider": await sync_to_async(providers.show_provider)(name)}


@router.post("/providers/{name}/test", response=responses({200: ProviderTestOut}))
async def test_provider(request: HttpRequest, name: Ref) -> Any:
    """Start the agent for its ACP handshake: its version and login methods, or what is missing."""
    return await providers.test_provider(name)


@router.put("/providers/{name}/key", response=responses({200: KeySetOut}))
async def set_provider_key(request: HttpRequest, name: Ref, body: KeyIn) -> dict[str, Any]:
    """Write the provider's key to `$COMPOZY_HOME/secrets.toml` (0600; never config.toml), then reload the
    providers: sessions started from now on have it in their env. The answer names the variable, never the value."""
    state, summary = await providers.set_key(name, body.variable, body.value)
    return {"provider": state, "reload": summary}


@router.post("/providers/{name}/login", response=responses({200: LoginOut}))
async def login_provider(request: HttpRequest, name: Ref, body: LoginIn | None = None) -> Any:
    """ACP `authenticate` with one of the methods the agent offers at `initialize`."""
    return await providers.login(name, body.method if body else "")


@router.get("/agents", response=responses({200: AgentsOut}))
async def list_agents(request: HttpRequest) -> dict[str, Any]:
    """Every agent, its provider and whether that provider can start."""
    return {"agents": await sync_to_async(providers.list_agents)()}


@router.post("/daemon/reload", response=responses({200: ReloadEnvelope}))
async def reload(request: HttpRequest) -> dict[str, Any]:
    """Reload `[providers.*]` and `[agents.*]` from config.toml and secrets.toml; live sessions are untouched. A file
    a start would refuse is refused whole (422 `config_invalid`, the loader's one line)."""
    return {"reload": await reload_config()}
