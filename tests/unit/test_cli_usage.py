"""A command line the CLI cannot parse is one readable line and exit 65, JSON under `-o json`, like every
other CLI error (not click's boxed usage text and exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compozy(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compozy.cli", *args], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=60, env={"COMPOZY_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("args", "says"), [
    (["session", "status"], "Missing argument 'SESSION_ID'"),
    (["session", "detach", "sess_0123456789abcdef"], "Missing option '--holder'"),
    (["session", "nosuch"], "No such command 'nosuch'"),
    (["session", "resume", "x", "--ttl", "0"], "--ttl"),
])
def test_usage_errors_are_one_line_and_exit_65(tmp_path: Path, args: list[str], says: str) -> None:
    result = compozy(tmp_path, *args)
    assert result.returncode == 65, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and says in line and "--help" in line and line.endswith("(usage_error)")
    assert result.stdout == ""

    scripted = compozy(tmp_path, *args, "-o", "json")
    assert scripted.returncode == 65
    body = json.loads(scripted.stderr)
    assert body["code"] == "usage_error" and says in body["error"]


def test_help_still_exits_0(tmp_path: Path) -> None:
    result = compozy(tmp_path, "session", "detach", "--help")
    assert result.returncode == 0 and "--holder" in result.stdout


def test_stored_text_never_reaches_the_terminal_as_control_sequences_or_markup(
        capsys: pytest.CaptureFixture[str]) -> None:
    from compozy.cli.output import kv

    kv("Session", [("name", "\x1b[31mRED\x1b[0m [bold]b[/bold] \x1b]0;title\x07")])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold]b[/bold]" in out  # a value is shown as written, never interpreted as markup
