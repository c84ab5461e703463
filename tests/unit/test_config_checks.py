"""config.toml read with bounds (size, nesting) and checked (ports, names that must exist, booleans), and the keys it
does not know reported with the nearest known one: each failure a ConfigError naming the key, never a traceback."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from compozy_base.config.checks import MAX_CONFIG_BYTES, deep_value_key, unknown_keys
from compozy_base.config.loader import ConfigError, load_config


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("COMPOZY_HTTP_PORT", "COMPOZY_HTTP_HOST", "COMPOZY_NODE_ID"):
        monkeypatch.delenv(name, raising=False)


def config(home: Path, text: str) -> Path:
    (home / "config.toml").write_text(textwrap.dedent(text), encoding="utf-8")
    return home


def refused(home: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(config(home, text))
    return str(caught.value)


@pytest.mark.parametrize("value", ['"abc"', "2123.5", "70000", "-1", "true", '"2123"'])
def test_a_port_that_is_not_an_integer_in_range_is_refused_naming_the_key(tmp_path: Path, value: str) -> None:
    message = refused(tmp_path, f"[http]\nport = {value}\n")
    assert message.startswith("http.port: must be an integer in 0..65535"), message


def test_the_port_from_the_environment_is_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOZY_HTTP_PORT", "21x3")
    assert refused(tmp_path, "").startswith("COMPOZY_HTTP_PORT: must be an integer")
    monkeypatch.setenv("COMPOZY_HTTP_PORT", "2124")
    assert load_config(tmp_path).http_port == 2124


def test_a_valid_port_and_the_defaults_load(tmp_path: Path) -> None:
    assert load_config(config(tmp_path, "[http]\nport = 0\n")).http_port == 0
    assert load_config(config(tmp_path, "[http]\nport = 2125\n")).http_port == 2125
    assert load_config(config(tmp_path, "")).unknown_keys == ()


def test_an_advertised_url_with_a_bad_port_is_refused(tmp_path: Path) -> None:
    assert refused(tmp_path, '[cluster]\nadvertise_url = "http://node-a:99999"\n').startswith(
        "cluster.advertise_url:")


def test_a_5000_deep_array_is_refused_naming_its_key(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    message = refused(tmp_path, f'[http]\nport = 2123\n\n[providers.x]\ncommand = "x"\nargs = {deep}\n')
    assert message.startswith("providers.x.args: nested deeper than 32 levels"), message


def test_nesting_below_the_recursion_limit_but_past_the_bound_is_refused_too(tmp_path: Path) -> None:
    message = refused(tmp_path, "[http]\nodd = " + "[" * 40 + "]" * 40 + "\n")
    assert message.startswith("http.odd[0]"), message
    assert "nested deeper than 32 levels" in message


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    message = refused(tmp_path, "# padding\n" + "x" * MAX_CONFIG_BYTES)
    assert "larger than 1024 KiB" in message


def test_the_deep_key_scan_skips_strings_and_comments() -> None:
    text = ('[a]\nk = "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["  # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n'
            "m = '''\n[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n'''\n"
            "[b.c]\nd = " + "[" * 40 + "]" * 40 + "\n")
    assert deep_value_key(text) == "b.c.d"
    assert deep_value_key('[a]\nk = "[[["\n') == ""


def test_a_default_agent_or_provider_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    assert refused(tmp_path, '[defaults]\nagent = "genral"\n').startswith("defaults.agent: no agent named 'genral'")
    assert refused(tmp_path, '[defaults]\nprovider = "claud"\n').startswith(
        "defaults.provider: no provider named 'claud'")
    assert refused(tmp_path, '[agents.rev]\nprovider = "nope"\n').startswith("agents.rev.provider: no provider")
    assert refused(tmp_path, '[roles.auto_title]\nprovider = "nope"\n').startswith(
        "roles.auto_title.provider: no provider")
    loaded = load_config(config(tmp_path, '[defaults]\nagent = "rev"\nprovider = "claude"\n[agents.rev]\n'))
    assert (loaded.default_agent, loaded.default_provider) == ("rev", "claude")


@pytest.mark.parametrize(("text", "key"), [
    ('[redact]\nenabled = "no"\n', "redact.enabled"),
    ("[roles.auto_title]\nenabled = 0\n", "roles.auto_title.enabled"),
    ('[workspaces]\nallow_hard_links = "yes"\n', "workspaces.allow_hard_links"),
    ('[session.busy_input]\nqueue_cap = "abc"\n', "session.busy_input.queue_cap"),
    ("[session.busy_input]\nqueue_cap = 2.5\n", "session.busy_input.queue_cap"),
])
def test_values_of_the_wrong_type_are_refused_not_coerced(tmp_path: Path, text: str, key: str) -> None:
    assert refused(tmp_path, text).startswith(f"{key}: must be"), text


def test_a_sub_table_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    assert refused(tmp_path, "[session]\nsupervision = 5\n") == "[session.supervision] must be a table"


def test_unknown_tables_and_keys_are_reported_with_the_nearest_known_key(tmp_path: Path) -> None:
    loaded = load_config(config(tmp_path, """
        port = 2123

        [http]
        prot = 2123

        [session.supervision]
        quiet_afer = "1m"

        [sesion]
        x = 1

        [agents.rev]
        modle = "m"

        [providers.claude]
        env = { ANYTHING_GOES = "1" }
        models = { default = "a", curated = ["a"] }

        [agents.heartbeat]
        enabled = true
    """))
    found = {u.key: u for u in loaded.unknown_keys}
    assert set(found) == {"port", "http.prot", "session.supervision.quiet_afer", "sesion", "agents.rev.modle",
                          "providers.claude.models.curated"}
    assert found["http.prot"].suggestion == "http.port"
    assert found["port"].suggestion == "http.port"  # a key in the wrong table: where it belongs
    assert found["session.supervision.quiet_afer"].message() == (
        "unknown key session.supervision.quiet_afer (ignored; did you mean session.supervision.quiet_after?)")
    assert found["sesion"].table and found["sesion"].suggestion == "session"
    assert found["agents.rev.modle"].suggestion == "agents.rev.model"
    assert found["providers.claude.models.curated"].suggestion == ""
    # What a typo meant still takes its default: the warning is the point.
    assert loaded.supervision.quiet_after == 1800.0


def test_every_key_the_readme_shows_is_known() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("## Configuration", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    import tomllib

    assert unknown_keys(tomllib.loads(block)) == []


def test_every_timeout_a_test_crosses_is_configurable_and_defaults_to_the_production_value(tmp_path: Path) -> None:
    from compozy_base.config.loader import Timeouts

    assert load_config(config(tmp_path, "")).timeouts == Timeouts()
    loaded = load_config(config(tmp_path, """
        [http]
        header_timeout = "2s"
        body_timeout = "3s"
        idle_timeout = "4s"
        stream_stall_timeout = "500ms"
        [session.stop]
        cancel_grace = "250ms"
        kill_grace = "1s"
        closed_stdout_grace = "1.5s"
        [session.store]
        write_deadline = "600ms"
        """)).timeouts
    assert loaded == Timeouts(http_header=2.0, http_body=3.0, http_idle=4.0, stream_stall=0.5,
                              stop_cancel_grace=0.25, stop_kill_grace=1.0, closed_stdout_grace=1.5,
                              store_write_deadline=0.6)
    assert not load_config(config(tmp_path, '[session.stop]\nkill_grace = "1s"\n')).unknown_keys


@pytest.mark.parametrize("text", ['[http]\nheader_timeout = "0s"\n', '[session.stop]\nkill_grace = "2h"\n',
                                  '[session.store]\nwrite_deadline = "soon"\n', '[session]\nstop = 3\n'])
def test_a_timeout_that_is_not_a_positive_duration_of_at_most_an_hour_is_refused(tmp_path: Path, text: str) -> None:
    message = refused(tmp_path, text)
    assert message.startswith(("http.header_timeout", "session.stop.kill_grace", "session.store.write_deadline",
                               "[session.stop]")), message


def test_cluster_tls_files_must_be_readable_and_come_as_a_pair(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("cert")
    (tmp_path / "key.pem").write_text("key")
    (tmp_path / "ca.pem").write_text("ca")
    assert refused(tmp_path, '[cluster]\ntls_cert = "missing.pem"\ntls_key = "key.pem"\n').startswith(
        "cluster.tls_cert:")
    assert refused(tmp_path, '[cluster]\ntls_cert = "cert.pem"\n').startswith(
        "cluster.tls_cert and cluster.tls_key: set both")
    loaded = load_config(config(tmp_path, '[cluster]\ntls_cert = "cert.pem"\ntls_key = "key.pem"\nca = "ca.pem"\n'))
    assert loaded.cluster.tls and loaded.cluster.tls_cert == str(tmp_path / "cert.pem")
    assert loaded.cluster.ca == str(tmp_path / "ca.pem") and loaded.unknown_keys == ()
    assert not load_config(config(tmp_path, "")).cluster.tls


def test_allowed_hosts_are_host_names_without_a_port(tmp_path: Path) -> None:
    assert refused(tmp_path, '[http]\nallowed_hosts = ["compozy:2123"]\n').startswith("http.allowed_hosts:")
    assert refused(tmp_path, '[http]\nallowed_hosts = "compozy"\n').startswith("http.allowed_hosts:")
    loaded = load_config(config(tmp_path, '[http]\nallowed_hosts = ["Compozy.example.com", "[fd00::1]"]\n'))
    assert loaded.http_allowed_hosts == ("compozy.example.com", "[fd00::1]")
