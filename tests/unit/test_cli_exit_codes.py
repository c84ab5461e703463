"""Every HTTP status the daemon answers maps to one of the CLI's documented exit codes (README): 1 was the
answer for 408, 429 and any 4xx the table did not name."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compozy.cli.output import exit_code_for as code
from compozy.cli.output import one_line

DOCUMENTED = {65, 69, 70, 77, 78}


@pytest.mark.parametrize("status", [0, *range(400, 418), *range(421, 430), 431, 451, *range(500, 512)])
def test_every_error_status_has_a_documented_exit_code(status: int) -> None:
    assert code(status) in DOCUMENTED


def test_the_classes() -> None:
    assert [code(s) for s in (400, 405, 409, 413, 415)] == [65] * 5
    assert [code(s) for s in (0, 404, 408, 410, 429, 500, 503, 507)] == [69] * 8
    assert (code(401), code(403), code(422)) == (77, 77, 78)


def test_an_error_message_is_one_readable_line() -> None:
    pasted = "agent said:\n  Traceback (most recent call last):\n\x1b[31m  boom\x1b[0m\n"
    line = one_line(pasted)
    assert "\n" not in line and "\x1b" not in line and line.startswith("agent said: Traceback")
    assert len(one_line("x" * 5000)) == 400


def test_an_empty_session_id_is_a_usage_error_not_a_bare_not_found(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "compozy.cli", "session", "status", ""], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "COMPOZY_HOME": str(tmp_path)})
    assert result.returncode == 65 and "a session id is required" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_failed_evidence_write_exits_with_what_its_errno_means() -> None:
    from compozy.cli.evidence import _write_failure

    assert _write_failure(OSError(errno.ENOSPC, "full")) == ("storage_full", 69)
    assert _write_failure(OSError(errno.EIO, "I/O error")) == ("storage_unavailable", 69)
    assert _write_failure(OSError(errno.EACCES, "denied")) == ("file_not_writable", 77)
    assert _write_failure(OSError(errno.ENOENT, "no such folder")) == ("file_not_writable", 65)
