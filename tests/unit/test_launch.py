"""Launching a provider's agent: its executable when present, else its pinned npm package through npx."""

from __future__ import annotations

from pathlib import Path

import pytest

from compozy_base.config.agents import NPM_PACKAGES, NpmPackage, builtin_providers, parse_providers
from sessions.acp.driver import AgentNotFound
from sessions.acp.launch import resolve

PACKAGE = NpmPackage("@example/agent-acp", "1.2.3", ("--acp",))


def executable(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_an_executable_on_path_runs_as_configured(tmp_path: Path) -> None:
    executable(tmp_path / "bin", "agent-acp")
    launch = resolve(["agent-acp", "--stdio"], provider="p", package=PACKAGE, env={"PATH": str(tmp_path / "bin")})
    assert launch.argv == ["agent-acp", "--stdio"]
    assert launch.package is None


def test_a_missing_executable_falls_back_to_the_pinned_package_through_npx(tmp_path: Path) -> None:
    npx = executable(tmp_path / "bin", "npx")
    launch = resolve(["agent-acp"], provider="p", package=PACKAGE, env={"PATH": str(tmp_path / "bin")})
    assert launch.argv == [str(npx), "-y", "@example/agent-acp@1.2.3", "--acp"]
    assert launch.missing == "agent-acp"
    assert launch.initialize_timeout(30.0) > 30.0


def test_without_the_executable_and_without_npx_the_error_names_both(tmp_path: Path) -> None:
    with pytest.raises(AgentNotFound) as caught:
        resolve(["agent-acp"], provider="p", package=PACKAGE, env={"PATH": str(tmp_path)})
    assert "'agent-acp'" in str(caught.value) and "npx" in str(caught.value)
    assert "@example/agent-acp@1.2.3" in str(caught.value)


def test_custom_commands_and_paths_never_fall_back(tmp_path: Path) -> None:
    assert resolve(["agent-acp"], provider="p", package=None, env={"PATH": str(tmp_path)}).argv == ["agent-acp"]
    assert resolve(["/opt/agent-acp"], provider="p", package=PACKAGE, env={"PATH": ""}).argv == ["/opt/agent-acp"]


def test_builtin_providers_pin_their_packages_and_name_no_model_the_adapter_may_not_offer() -> None:
    providers = builtin_providers()
    for name in ("claude", "codex", "gemini", "opencode"):
        assert providers[name].npm is NPM_PACKAGES[name]
        assert providers[name].npm.version[0].isdigit()  # pinned, never "latest"
        assert providers[name].default_model == ""
    assert NPM_PACKAGES["gemini"].args == ("--acp",) and NPM_PACKAGES["opencode"].args == ("acp",)


def test_a_command_of_ones_own_drops_the_npm_fallback_but_env_alone_keeps_it() -> None:
    providers = parse_providers({"claude": {"env": {"K": "v"}}, "codex": {"command": "my-codex --acp"}})
    assert providers["claude"].npm is NPM_PACKAGES["claude"]
    assert providers["codex"].npm is None

