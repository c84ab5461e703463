"""`compozy status` must stay fast: the CLI never imports Django or the ACP SDK."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_imports_neither_django_nor_the_acp_sdk() -> None:
    code = ("import sys, compozy.cli.main; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'acp', 'channels', 'daphne')); "
            "print(','.join(bad))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
