"""`[agents.NAME] mcp_servers` (compozy_base/config/mcp_servers.py): parsed with errors naming the key, handed in ACP's
shape, and a transport the agent does not support left out by name."""

from __future__ import annotations

import pytest

from compozy_base.config import mcp_servers
from compozy_base.config.errors import ConfigError

KEY = "agents.a.mcp_servers"


def test_stdio_and_remote_servers_take_acps_shape_and_keep_their_secrets_out_of_repr() -> None:
    servers = mcp_servers.parse([
        {"name": "files", "command": "/bin/mcp", "args": ["-v"], "env": {"T": "secret-1"}},
        {"name": "web", "type": "sse", "url": "https://x/sse", "headers": {"Authorization": "Bearer s"}}], KEY)
    assert servers[0].to_acp() == {"name": "files", "command": "/bin/mcp", "args": ["-v"],
                                   "env": [{"name": "T", "value": "secret-1"}]}
    assert servers[1].to_acp() == {"type": "sse", "name": "web", "url": "https://x/sse",
                                   "headers": [{"name": "Authorization", "value": "Bearer s"}]}
    assert "secret-1" not in repr(servers) and servers[0].secrets() == ["secret-1"]
    handed, skipped = mcp_servers.for_agent(servers, {"http": True, "sse": False})
    assert [s["name"] for s in handed] == ["files"] and skipped == ["web (sse)"]
    assert mcp_servers.parse(None, KEY) == ()


@pytest.mark.parametrize(("raw", "message"), [
    ({"name": "x"}, "expected an array of tables"),
    ([{"command": "/bin/x"}], r"mcp_servers\[0\]\.name: required"),
    ([{"name": "x"}], r"mcp_servers\[0\]\.command: required"),
    ([{"name": "x", "command": "/bin/x", "args": "-v"}], r"\.args: expected a list of strings"),
    ([{"name": "x", "type": "ws", "url": "https://x"}], r"\.type: must be one of stdio, http, sse"),
    ([{"name": "x", "type": "http", "url": "ftp://x"}], r"\.url: required for an http server"),
    ([{"name": "x", "command": "/a"}, {"name": "x", "command": "/b"}], "named twice"),
    ([{"name": "x", "command": "/a", "env": {"T": 1}}], r"\[0\]\.env: expected a table of strings"),
])
def test_a_server_it_cannot_use_is_a_config_error_naming_the_key(raw: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        mcp_servers.parse(raw, KEY)


def test_a_central_server_is_for_the_agents_and_workspaces_it_names_its_secrets_from_the_environment() -> None:
    [tracker, files] = mcp_servers.parse_central([
        {"name": "tracker", "type": "http", "url": "https://t/mcp", "headers_from": {"Authorization": "TRACKER"},
         "agents": ["reviewer"], "workspaces": ["/srv/app/"]},
        {"name": "files", "command": "/bin/mcp", "env_from": {"TOKEN": "FILES"}}],
        {"TRACKER": "Bearer t-secret", "FILES": "f-secret"})
    assert tracker.applies("reviewer", "/srv/app") and not tracker.applies("coder", "/srv/app")
    assert not tracker.applies("reviewer", "/srv/other")
    assert files.applies("anyone", "/anywhere")
    assert tracker.server.headers == {"Authorization": "Bearer t-secret"} and files.server.secrets() == ["f-secret"]
    described = mcp_servers.describe(tracker.server)
    assert described["headers"] == ["Authorization"] and "t-secret" not in repr(described)


@pytest.mark.parametrize(("raw", "message"), [
    ([{"name": "x", "command": "/a", "env_from": {"T": "MISSING"}}], r"env_from: the daemon's environment has no"),
    ([{"name": "x", "command": "/a", "agents": "reviewer"}], r"\.agents: expected a list of names"),
    ([{"name": "x", "command": "/a", "workspaces": ["relative"]}], r"\.workspaces: workspaces are named by"),
    ([{"name": "x", "command": "/a", "headers_from": {"A": "SET"}}], r"only an http or sse server takes headers"),
    ([{"name": "x", "command": "/a", "agent": ["typo"]}], r"mcp.servers\[0\]: unknown key\(s\) agent"),
])
def test_a_central_server_it_cannot_use_is_a_config_error_naming_the_key(raw: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        mcp_servers.parse_central(raw, {"SET": "v"})
