"""`[worktrees] max_disk`, `[tasks] isolation` and `[agents.NAME] isolation` as config.toml gives them."""

from __future__ import annotations

from pathlib import Path

import pytest

from compozy_base.config.errors import ConfigError
from compozy_base.config.loader import load_config
from compozy_base.config.values import parse_size


@pytest.mark.parametrize(("given", "bytes_"), [(0, 0), (1024, 1024), ("20GB", 20 * 1024 ** 3),
                                               ("512 MiB", 512 * 1024 ** 2), ("1.5G", int(1.5 * 1024 ** 3)),
                                               ("100", 100)])
def test_sizes_read_in_units_of_1024(given: object, bytes_: int) -> None:
    assert parse_size(given, "worktrees.max_disk") == bytes_


@pytest.mark.parametrize("given", ["lots", "-1GB", "5 parsecs", True, -3, [1]])
def test_a_size_that_is_not_one_is_refused_with_its_key(given: object) -> None:
    with pytest.raises(ConfigError, match=r"worktrees\.max_disk"):
        parse_size(given, "worktrees.max_disk")


def test_isolation_keys_load_and_refuse_other_values(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[worktrees]\nmax_disk = "2GB"\n[tasks]\nisolation = "none"\n'
                                          '[agents.iso]\nprovider = "demo"\nisolation = "worktree"\n')
    config = load_config(tmp_path)
    assert config.worktrees_max_disk == 2 * 1024 ** 3 and config.task_isolation == "none"
    assert config.agents["iso"].isolation == "worktree" and config.agents["general"].isolation == ""
    assert not [k for k in config.unknown_keys if "isolation" in k.path or "worktrees" in k.path]
    (tmp_path / "config.toml").write_text('[tasks]\nisolation = "container"\n')
    with pytest.raises(ConfigError, match=r"tasks\.isolation: must be none or worktree"):
        load_config(tmp_path)
