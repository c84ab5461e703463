#!/usr/bin/env bash
# The system packages the test suite needs, installed the same way for `make test` and `.ci/run`:
#   - Debian's Chromium (and fonts) for the e2e tests (Playwright drives /usr/bin/chromium, never its own);
#   - python3-venv, without which Debian's python3 cannot create the .venv;
#   - bubblewrap, the agents' sandbox (docs/security.md): its tests (tests/integration/test_sandbox.py) need it.
# Nothing missing: exits 0 at once. Missing and we are root or have password-less sudo: apt-get installs them.
# Otherwise: stops at once (exit 1) with the one command to run, instead of failing tests minutes later.
set -euo pipefail

CHROMIUM="${COMPOZY_CHROMIUM:-/usr/bin/chromium}"
PYTHON="${PYTHON:-python3}"

packages=()
if [ ! -x "$CHROMIUM" ]; then
    packages+=(chromium fonts-dejavu-core fonts-liberation)
fi
if ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
    packages+=(python3-venv)
fi
if ! command -v bwrap >/dev/null 2>&1; then
    packages+=(bubblewrap)
fi

if [ "${#packages[@]}" -eq 0 ]; then
    exit 0
fi

install_cmd=(apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "${packages[@]}")
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-system-deps: missing ${packages[*]} and this is not a Debian-like system (no apt-get)." >&2
    echo "Install Chromium, bubblewrap and python3's venv module, or set COMPOZY_CHROMIUM to a Chromium binary." >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    as_root=(sudo -n)
else
    echo "ensure-system-deps: the tests need ${packages[*]}; installing them needs root. Run:" >&2
    echo "" >&2
    echo "    sudo apt-get update && sudo ${install_cmd[*]}" >&2
    echo "" >&2
    exit 1
fi

echo "--- installing system packages: ${packages[*]}"
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive "${install_cmd[@]}"

if [ ! -x "$CHROMIUM" ]; then
    echo "ensure-system-deps: $CHROMIUM is still missing after apt; the e2e tests cannot run" >&2
    exit 1
fi
