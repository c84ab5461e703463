"""Which auth method the client calls `authenticate` with (sessions/acp/auth.py), from `initialize` answers the
adapters give today (codex-acp 2.6.0, gemini-cli 0.61.0, opencode 1.18.33: read by hand through npx)."""

from __future__ import annotations

from sessions.acp import auth

CODEX = {"authMethods": [
    {"id": "api-key", "name": "API Key", "description": "Use an API key to authenticate",
     "_meta": {"api-key": {"provider": "openai"}}},
    {"id": "chat-gpt", "name": "ChatGPT", "description": "Use ChatGPT to authenticate"}]}
ENV_AND_TERMINAL = {"authMethods": [
    {"id": "oauth", "name": "Log in with the browser"},
    {"id": "key", "name": "API key", "type": "env_var",
     "vars": [{"name": "A_KEY"}, {"name": "A_BASE", "optional": True}]},
    {"id": "login", "name": "Login", "type": "terminal", "args": ["auth", "login"]},
    "not a method", {"name": "no id"}]}


def test_malformed_entries_are_skipped_and_types_default_to_the_agents_own() -> None:
    methods = auth.offered(ENV_AND_TERMINAL)
    assert [(m.id, m.type, m.required_vars, m.args) for m in methods] == [
        ("oauth", "agent", (), ()), ("key", "env_var", ("A_KEY",), ()), ("login", "terminal", (), ("auth", "login"))]
    assert auth.offered({"authMethods": "nope"}) == [] and auth.offered({}) == []


def test_a_configured_method_wins_when_offered_and_is_never_guessed_otherwise() -> None:
    codex = auth.offered(CODEX)
    assert auth.choose(codex, "api-key", {}).id == "api-key"  # type: ignore[union-attr]
    assert auth.choose(codex, "", {"OPENAI_API_KEY": "sk"}) is None  # codex's api-key names no variable
    assert auth.choose(codex, "not-offered", {}) is None


def test_the_first_env_var_method_whose_required_variables_are_set_is_chosen() -> None:
    methods = auth.offered(ENV_AND_TERMINAL)
    assert auth.choose(methods, "", {"A_KEY": "k"}).id == "key"  # type: ignore[union-attr]
    assert auth.choose(methods, "", {"A_KEY": ""}) is None
    assert auth.choose(methods, "", {}) is None


def test_a_refusal_names_every_method_and_how_to_use_it() -> None:
    text = auth.refusal(auth.offered(ENV_AND_TERMINAL), "/usr/bin/agent", "chatgpt", "Authentication required")
    assert text.startswith("the agent needs authentication (Authentication required)")
    assert "configured auth_method 'chatgpt' is not offered" in text
    assert "key (API key): set A_KEY in the provider's env" in text
    assert "login (Login): run `/usr/bin/agent auth login` in a terminal" in text
    assert "oauth (Log in with the browser)" in text
    assert auth.refusal([], "x", "", "") == "the agent needs authentication"


def test_a_refusal_for_a_known_provider_names_its_variable_commands_and_session() -> None:
    text = auth.refusal(auth.offered(ENV_AND_TERMINAL), "/usr/bin/agent", "", "Authentication required",
                        provider="codex", session_id="sess_0123456789abcdef", key_env="OPENAI_API_KEY")
    assert "key (API key): `compozy provider set-key codex A_KEY`" in text
    assert "set OPENAI_API_KEY: `compozy provider set-key codex OPENAI_API_KEY` (reads it from stdin)" in text
    assert "`compozy provider login codex --method oauth`" in text  # the first method a client can call
    assert text.endswith("then `compozy session resume sess_0123456789abcdef`")
    assert "NAME" not in text and " ID`" not in text
    assert auth.next_step("claude", "", "ANTHROPIC_API_KEY") == (
        "set ANTHROPIC_API_KEY: `compozy provider set-key claude ANTHROPIC_API_KEY` (reads it from stdin)")
