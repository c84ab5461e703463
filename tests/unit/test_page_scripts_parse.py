"""Every page script parses as an ES module: a syntax error in one module (a bad merge, a stray edit) leaves every
page that imports it blank, and the browser tests would only say that a locator never appeared."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "frontend/static/frontend/js").glob("*.js"))
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed: the browser tests still load every page")
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_the_page_script_parses_as_a_module(script: Path) -> None:
    assert NODE is not None
    checked = subprocess.run([NODE, "--input-type=module", "--check"], input=script.read_bytes(),
                             capture_output=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stderr.decode(errors="replace")


def test_the_scripts_are_found() -> None:
    assert len(SCRIPTS) >= 20
