"""`make run` installs the package alone, and building it prints no warnings (issue 48): the licence is an SPDX
string, not the TOML table setuptools warns about, and the run target's stamp installs no extra. (Static checks: a
wheel build costs ~10-40 s; `pip wheel --no-deps .` was run by hand and printed nothing.)"""

from __future__ import annotations

import re
import tomllib

from tests.conftest import ROOT


def test_the_licence_is_an_spdx_string_and_setuptools_is_new_enough_for_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert project["build-system"]["requires"] == ["setuptools>=77"]
    assert project["tool"]["setuptools"]["package-dir"] == {"": "."}  # an editable install without a warning


def test_make_run_installs_the_package_without_the_dev_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    run_deps = re.search(r"^run: (.+)$", makefile, re.M)
    assert run_deps is not None and run_deps.group(1).split() == ["$(RUN_STAMP)"]
    recipe = makefile.split("$(RUN_STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "pip install --quiet -e .\n" in recipe + "\n" and "[dev]" not in recipe
    dev = makefile.split("$(STAMP): $(RUN_STAMP)", 1)[1].split("\n\n", 1)[0]
    assert "-e '.[dev]'" in dev  # make test, lint and the benchmarks still get the dev tools
