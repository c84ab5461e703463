"""The evidence archive's file (compozy/cli/evidence.py `_create`): the default name carries the time to the
second, so a second archive within it used to fail with file_exists; a name the person chose is never replaced."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from compozy.cli.evidence import _create


def test_a_default_name_taken_gets_the_next_number(tmp_path: Path) -> None:
    target = tmp_path / "compozy-evidence-sess_1-20261201T060000Z.tar.gz"
    made = []
    for _ in range(3):
        path, fd = _create(target, numbered=True)
        os.close(fd)
        made.append(path.name)
    assert made == [target.name, "compozy-evidence-sess_1-20261201T060000Z-2.tar.gz",
                    "compozy-evidence-sess_1-20261201T060000Z-3.tar.gz"]
    assert stat.S_IMODE((tmp_path / made[1]).stat().st_mode) == 0o600


def test_a_chosen_name_is_never_replaced_nor_renamed(tmp_path: Path) -> None:
    chosen = tmp_path / "bug-1234.tar.gz"
    chosen.write_text("earlier")
    with pytest.raises(FileExistsError):
        _create(chosen, numbered=False)
    assert chosen.read_text() == "earlier"
