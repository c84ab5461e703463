"""The layers import one way (docs/architecture.md §Layers; the contracts are `[tool.importlinter]` in
pyproject.toml, run by `make lint`), and so do the floors inside `sessions/` (§Floors of the sessions app). Here the
contracts run on a copy of the tree: as it is, and with one upward import planted, which they must refuse by name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("compozy", "compozy_base", "compozy_site", "sessions", "health", "tasks", "attention", "frontend", "memory",
            "dreams", "coordination")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def copy_tree(dest: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("static", "templates", "__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(tmp_path_factory.mktemp("layers"))


def test_the_tree_keeps_its_layer_contract(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Layers import one way KEPT" in result.stdout
    assert "The sessions app's floors import one way KEPT" in result.stdout


@pytest.mark.parametrize(("module", "planted", "refusal"), [
    # the domain reaching up into the HTTP layer, as sessions/ once imported compozy_site.api
    ("sessions/planted.py", "from compozy.api.app import api\n", "sessions is not allowed to import compozy.api"),
    # inside a function, the way 192 imports once dodged their cycles: still an import
    ("health/planted.py", "def f():\n    from compozy.daemon import launcher\n",
     "health is not allowed to import compozy.daemon"),
    # the base importing the domain
    ("compozy_base/planted.py", "import sessions.models\n", "compozy_base is not allowed to import sessions"),
    # two sibling apps that must stay independent
    ("tasks/planted.py", "from health import services\n", "tasks is not allowed to import health"),
    # inside sessions/: the store reaching up into the runtime, as the feed once imported runtime.signals
    ("sessions/store/planted.py", "from sessions.runtime import session\n",
     "sessions.store is not allowed to import sessions.runtime"),
    # the agent wire reaching up into the live feed
    ("sessions/acp/planted.py", "def f():\n    from sessions.live import feed\n",
     "sessions.acp is not allowed to import sessions.live"),
    # the vocabulary importing the catalog's models
    ("sessions/core/planted.py", "from sessions.models import Session\n",
     "sessions.core is not allowed to import sessions.models"),
    # two floors side by side that must stay independent
    ("sessions/live/planted.py", "from sessions.catalog import cluster\n",
     "sessions.live is not allowed to import sessions.catalog"),
    ("sessions/runtime/planted.py", "from sessions.repair import stale\n",
     "sessions.runtime is not allowed to import sessions.repair"),
    # a shipped package leaning on the test suite, as frontend/screenshots.py once did
    ("frontend/planted.py", "from tests.conftest import ROOT\n", "frontend is not allowed to import tests"),
    # memory, below the sessions app, reaching up into it; dreams (which make sessions) and tasks, side by side
    ("memory/planted.py", "from sessions.core import enums\n", "memory is not allowed to import sessions"),
    ("dreams/planted.py", "from tasks import services\n", "dreams is not allowed to import tasks"),
    # the runtime reaching into one module of the write path instead of its package
    ("sessions/runtime/planted.py", "from sessions.store.writer.shared import for_loop\n",
     "sessions.runtime is not allowed to import sessions.store.writer.shared"),
])
def test_a_planted_upward_import_breaks_the_contract(tree: Path, module: str, planted: str, refusal: str) -> None:
    path = tree / module
    path.write_text(planted)
    try:
        result = lint(tree)
    finally:
        path.unlink()
    assert result.returncode != 0, result.stdout
    assert refusal in result.stdout, result.stdout
