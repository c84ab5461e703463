"""scripts/ensure-system-deps.sh, which `make test` and `.ci/run` both run: nothing to do, install through apt
as root (or password-less sudo), or stop at once with the one command to run. `apt-get`, `id` and `sudo` are
stand-ins on PATH, so the test installs nothing and behaves the same as root or not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "ensure-system-deps.sh"


def shim(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    # apt-get logs its arguments; `install` provides the Chromium the script checks for afterwards.
    shim(d, "apt-get", f'echo "$@" >> "{tmp_path}/apt.log"\n'
                       f'case "$*" in *install*) printf "#!/bin/sh\\n" > "$COMPOZY_CHROMIUM"; '
                       f'chmod +x "$COMPOZY_CHROMIUM";; esac')
    return d


def run(bin_dir: Path, chromium: Path, uid: int = 0, sudo_ok: bool = False) -> subprocess.CompletedProcess[str]:
    shim(bin_dir, "id", f'[ "$1" = "-u" ] && echo {uid} || exec /usr/bin/id "$@"')
    shim(bin_dir, "sudo", 'if [ "$1" = "-n" ] && [ "$2" = "true" ]; then exit ' + ("0" if sudo_ok else "1")
         + '; fi\n[ "$1" = "-n" ] && shift\nexec "$@"')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "COMPOZY_CHROMIUM": str(chromium),
           "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)


def test_nothing_missing_does_nothing(bin_dir: Path, tmp_path: Path) -> None:
    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    result = run(bin_dir, chromium, uid=1000)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""
    assert not (tmp_path / "apt.log").exists()


@pytest.mark.parametrize(("uid", "sudo_ok"), [(0, False), (1000, True)], ids=["root", "sudo"])
def test_a_missing_chromium_is_installed_through_apt(bin_dir: Path, tmp_path: Path, uid: int, sudo_ok: bool) -> None:
    chromium = tmp_path / "chromium"
    result = run(bin_dir, chromium, uid=uid, sudo_ok=sudo_ok)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls[0] == "update -q"
    assert calls[1].startswith("install -y") and "chromium fonts-dejavu-core fonts-liberation" in calls[1]
    assert os.access(chromium, os.X_OK)


def test_without_root_or_sudo_it_stops_at_once_with_the_command_to_run(bin_dir: Path, tmp_path: Path) -> None:
    result = run(bin_dir, tmp_path / "chromium", uid=1000, sudo_ok=False)
    assert result.returncode == 1
    command = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith("sudo ")]
    assert command == ["sudo apt-get update && sudo apt-get install -y -q --no-install-recommends "
                       "-o Dpkg::Use-Pty=0 chromium fonts-dejavu-core fonts-liberation"]
    assert not (tmp_path / "apt.log").exists()
