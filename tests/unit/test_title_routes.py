"""`[roles.auto_title]` (issue 50, row 3; config reference §6): every key of the table is read (agent, provider,
model, reasoning_effort, fallback_chain), none reported unknown, each checked; and the routes the title pass
tries, in order, as they resolve from the role, its agent and the invoking session. The title pass itself, with its
fallback, runs against the real daemon in tests/integration/test_title.py."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from compozy_base.config.loader import AutoTitleConfig, Config, ConfigError, TitleRoute, load_config
from sessions.runtime.title import title_routes

PROVIDERS = """
    [providers.alpha]
    command = ["alpha-acp"]
    models = { default = "alpha-default" }

    [providers.beta]
    command = ["beta-acp"]
    models = { default = "beta-default" }

    [agents.titler]
    provider = "alpha"
    model = "alpha-mini"
    reasoning_effort = "low"
"""


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("COMPOZY_HTTP_PORT", "COMPOZY_HTTP_HOST", "COMPOZY_NODE_ID"):
        monkeypatch.delenv(name, raising=False)


def load(home: Path, role: str) -> Config:
    (home / "config.toml").write_text(textwrap.dedent(PROVIDERS) + textwrap.dedent(role), encoding="utf-8")
    return load_config(home)


def refused(home: Path, role: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(home, role)
    return str(caught.value)


FULL = """
    [roles.auto_title]
    enabled = true
    agent = "titler"
    provider = "beta"
    model = "beta-small"
    reasoning_effort = "minimal"

    [[roles.auto_title.fallback_chain]]
    provider = "alpha"
    model = "alpha-large"
    reasoning_effort = "high"

    [[roles.auto_title.fallback_chain]]
    provider = "demo"
"""


def test_every_key_of_the_role_is_read_and_none_is_reported_unknown(tmp_path: Path) -> None:
    config = load(tmp_path, FULL)
    assert config.unknown_keys == ()
    assert config.auto_title == AutoTitleConfig(
        enabled=True, agent="titler", provider="beta", model="beta-small", reasoning_effort="minimal",
        fallback_chain=(TitleRoute("alpha", "alpha-large", "high"), TitleRoute("demo")))


def test_an_unset_role_keeps_its_defaults(tmp_path: Path) -> None:
    assert load(tmp_path, "").auto_title == AutoTitleConfig()


@pytest.mark.parametrize(("role", "message"), [
    ('[roles.auto_title]\nagent = "nobody"\n', "roles.auto_title.agent: no agent named 'nobody'"),
    ('[roles.auto_title]\nreasoning_effort = "extreme"\n', "roles.auto_title.reasoning_effort: must be one of"),
    ("[roles.auto_title]\nmodel = 5\n", "roles.auto_title.model: must be a string"),
    ('[roles.auto_title]\nfallback_chain = "alpha"\n', "roles.auto_title.fallback_chain: must be an array"),
    ('[[roles.auto_title.fallback_chain]]\nmodel = "x"\n', "roles.auto_title.fallback_chain[0].provider is required"),
    ('[[roles.auto_title.fallback_chain]]\nprovider = "gamma"\n',
     "roles.auto_title.fallback_chain[0].provider: no provider named 'gamma'"),
    ('[[roles.auto_title.fallback_chain]]\nprovider = "alpha"\nmodle = "x"\n',
     "roles.auto_title.fallback_chain[0]: unknown key 'modle'"),
    ('[[roles.auto_title.fallback_chain]]\nprovider = "alpha"\nreasoning_effort = "lots"\n',
     "roles.auto_title.fallback_chain[0].reasoning_effort: must be one of"),
])
def test_a_role_key_that_names_nothing_or_has_the_wrong_value_is_refused(tmp_path: Path, role: str,
                                                                         message: str) -> None:
    assert refused(tmp_path, role).startswith(message)


def routes(config: Config, **session: Any) -> list[tuple[str, str, str, bool]]:
    invoking = {"agent": "general", "provider": "beta", "model": "beta-session", "reasoning_effort": "high",
                "model_explicit": True, **session}
    return [(r.provider.name, r.model, r.reasoning_effort, r.model_explicit)
            for r in title_routes(config, **invoking)]


def test_without_a_role_the_title_runs_as_the_invoking_session_runs(tmp_path: Path) -> None:
    assert routes(load(tmp_path, "")) == [("beta", "beta-session", "high", True)]


def test_a_role_agent_runs_as_its_definition_resolves(tmp_path: Path) -> None:
    config = load(tmp_path, '[roles.auto_title]\nagent = "titler"\n')
    assert routes(config) == [("alpha", "alpha-mini", "low", True)]


def test_the_role_overrides_apply_after_the_agent_and_a_model_does_not_follow_to_another_provider(
        tmp_path: Path) -> None:
    config = load(tmp_path, '[roles.auto_title]\nagent = "titler"\nprovider = "beta"\n')
    assert routes(config) == [("beta", "beta-default", "low", False)]
    config = load(tmp_path, '[roles.auto_title]\nagent = "titler"\nmodel = "alpha-huge"\nreasoning_effort = "max"\n')
    assert routes(config) == [("alpha", "alpha-huge", "max", True)]
    config = load(tmp_path, '[roles.auto_title]\nprovider = "alpha"\n')
    assert routes(config) == [("alpha", "alpha-default", "high", False)]


def test_the_fallback_chain_follows_the_primary_route_in_order(tmp_path: Path) -> None:
    assert routes(load(tmp_path, FULL)) == [
        ("beta", "beta-small", "minimal", True), ("alpha", "alpha-large", "high", True),
        ("demo", "demo-small", "", False)]
