"""The smaller rows of issue 34 that need no daemon: `[tasks] lease_ttl` is read, health's `last_error` is not
over-redacted, an auto-title is plain text, and doctor judges a provider's executable as a session start does."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.django_env import ensure_django

ensure_django()

from compozy.diagnostics.doctor import check_providers  # noqa: E402
from compozy_base.config import loader as config_module  # noqa: E402
from compozy_base.config.agents import NpmPackage, ProviderConfig  # noqa: E402
from compozy_base.config.loader import Config, load_config  # noqa: E402
from health.derive import last_error  # noqa: E402
from sessions.core.record import Failure  # noqa: E402
from sessions.runtime.title import clean_title  # noqa: E402


def test_tasks_lease_ttl_is_its_own_setting(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[tasks]\nlease_ttl = "90s"\n\n[cluster]\nlease_ttl = "20s"\n')
    config = load_config(tmp_path)
    # It read `[cluster] lease_ttl` (15s by default) instead.
    assert config.task_lease_ttl == 90.0
    assert config.cluster.lease_ttl == 20.0
    (tmp_path / "config.toml").write_text('[tasks]\nlease_ttl = "2m"\n')
    assert load_config(tmp_path).task_lease_ttl == 120.0


def test_last_error_redacts_the_summary_not_the_kind() -> None:
    auth = Failure(kind="provider_auth_failure", summary="session/prompt: Authentication required")
    assert last_error(auth) == "provider_auth_failure: session/prompt: Authentication required"
    secret = Failure(kind="prompt_failure", summary="refused api_key=sk-abcdefghijklmnopqrstuvwxyz012345")
    assert last_error(secret) == "prompt_failure: refused api_key=[REDACTED]"
    assert last_error(None) == ""


@pytest.mark.parametrize(("reply", "title"), [
    ("Review of `calc.py`", "Review of calc.py"),
    ("Review of `calc.py", "Review of calc.py"),
    ("**Fix** the _login_ test", "Fix the login test"),
    ("[Docs](https://example.com/docs) update", "Docs update"),
    ("# Heading title", "Heading title"),
    ("- A bullet title", "A bullet title"),
    ("```\nFence first, title next", "Fence first, title next"),
    ("**Title:** Stop path notes", "Stop path notes"),
    ("fix parse_config in snake_case", "fix parse_config in snake_case"),
])
def test_an_auto_title_is_plain_text(reply: str, title: str) -> None:
    assert clean_title(reply) == title


@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Built-in-like providers whose executables are missing, on a PATH of `tmp_path/bin` only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    package = NpmPackage("@agentclientprotocol/claude-agent-acp", "0.101.0")
    config_module._cached = Config(providers={
        "claude": ProviderConfig("claude", ("claude-agent-acp",), npm=package),
        "custom": ProviderConfig("custom", ("no-such-agent-acp",)),
    })
    yield bin_dir
    config_module._cached = None


def messages() -> dict[str, tuple[str, str]]:
    return {i["id"]: (i["severity"], i["message"]) for i in check_providers()}


def test_doctor_says_a_missing_built_in_provider_starts_through_npx(providers: Path) -> None:
    npx = providers / "npx"
    npx.write_text("#!/bin/sh\nexit 0\n")
    npx.chmod(0o755)
    found = messages()
    severity, message = found["provider.claude"]
    assert "through npx" in message and "@agentclientprotocol/claude-agent-acp@0.101.0" in message, message
    assert "fail to start" not in message and severity == "info"
    assert found["provider.custom"] == ("info", "no-such-agent-acp is not on PATH; sessions using it fail to start")


def test_doctor_says_it_fails_to_start_when_npx_is_missing_too(providers: Path) -> None:
    assert messages()["provider.claude"][0] == "info"
    message = messages()["provider.claude"][1]
    assert "nor is npx" in message and "fail to start" in message, message
    adapter = providers / "claude-agent-acp"
    adapter.write_text("#!/bin/sh\nexit 0\n")
    adapter.chmod(0o755)
    assert messages()["provider.claude"] == ("ok", "claude-agent-acp found")
    assert os.environ["PATH"] == str(providers)
