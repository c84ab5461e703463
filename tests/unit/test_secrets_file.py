"""`$COMPOZY_HOME/secrets.toml` (compozy_base/config/secrets.py): owner-only, laid over the providers' env, refused
whole when it names what does not exist; and the built-in claude provider's sandbox variable."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from compozy_base import files
from compozy_base.config import secrets
from compozy_base.config.agents import builtin_providers
from compozy_base.config.errors import ConfigError
from compozy_base.config.loader import load_config

KEY = 'sk-ant-"quoted\\key-0123456789'


def test_a_key_written_is_read_back_owner_only_and_laid_over_the_providers_env(tmp_path: Path) -> None:
    secrets.write_secret(tmp_path, "claude", "ANTHROPIC_API_KEY", KEY)
    path = tmp_path / "secrets.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secrets.read_secrets(tmp_path) == {"claude": {"ANTHROPIC_API_KEY": KEY}}
    claude = load_config(tmp_path).providers["claude"]
    assert claude.env["ANTHROPIC_API_KEY"] == KEY and claude.secret_env == ("ANTHROPIC_API_KEY",)
    assert claude.env["IS_SANDBOX"] == "1"  # the built-in env stays under the key
    assert secrets.secret_values(load_config(tmp_path).providers) == [KEY]
    secrets.write_secret(tmp_path, "claude", "ANTHROPIC_API_KEY", "")
    assert secrets.read_secrets(tmp_path) == {} and "ANTHROPIC_API_KEY" not in load_config(tmp_path).providers[
        "claude"].env


def test_a_secrets_file_others_can_read_is_refused(tmp_path: Path) -> None:
    secrets.write_secret(tmp_path, "codex", "OPENAI_API_KEY", KEY)
    (tmp_path / "secrets.toml").chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_config(tmp_path)


@pytest.mark.parametrize(("text", "error"), [
    ('[providers.ghost.env]\nK = "v"\n', "no provider named 'ghost'"),
    ('[other]\nx = 1\n', "unknown table 'other'"),
    ('[providers.claude]\ncommand = "x"\n', "must hold an env table only"),
    ('[providers.claude.env]\n"A B" = "v"\n', "not an environment variable's name"),
    ('[providers.claude.env]\nK = 3\n', "one line of printable text"),
])
def test_a_secrets_file_that_names_what_does_not_exist_is_refused_with_one_line(
        tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "secrets.toml"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=error):
        load_config(tmp_path)


def test_the_builtin_claude_provider_runs_as_root_and_names_its_key_variable() -> None:
    claude = builtin_providers()["claude"]
    assert claude.env == {"IS_SANDBOX": "1"} and claude.key_env == "ANTHROPIC_API_KEY"
    assert builtin_providers()["codex"].key_env == "OPENAI_API_KEY"


def test_config_toml_sets_key_env_for_a_provider_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[providers.mine]\ncommand = "mine-acp"\nkey_env = "MINE_KEY"\n')
    config = load_config(tmp_path)
    assert config.providers["mine"].key_env == "MINE_KEY" and not config.unknown_keys


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    secrets.write_secret(tmp_path, "claude", "ANTHROPIC_API_KEY", KEY)
    before = (tmp_path / "secrets.toml").read_text()

    def broken(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        secrets.write_secret(tmp_path, "claude", "ANTHROPIC_API_KEY", "another-key")
    assert (tmp_path / "secrets.toml").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secrets.toml"]


def test_the_shared_atomic_write_sets_the_mode_asked(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.txt"
    files.atomic_write(target, "one\r\ntwo\n", mode=0o640)
    assert target.read_bytes() == b"one\r\ntwo\n" and target.stat().st_mode & 0o777 == 0o640
    assert target.parent.stat().st_mode & 0o777 == 0o700
    files.atomic_write(target, "three")
    assert target.read_text() == "three" and target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.txt"]
