# The two set-up commands from the README are `make run` and `make test`.
# Both create the virtual environment on first use, so a fresh machine needs nothing else.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Two stamps: `make run` installs the package alone (its runtime dependencies); the tests, the linters and the
# benchmarks add the dev extra (pytest, Playwright, mypy, schemathesis…: ~90 packages, ~500 MB a user who only
# runs the daemon never needs).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-dev

.PHONY: run test fuzz coverage system-deps lint bench bench-catalog venv clean

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## Run the daemon in the foreground on its embedded defaults (SQLite, in-process queue and channel layer, demo agent).
# Its log also goes to $COMPOZY_HOME/logs/daemon.log (rotated), where evidence bundles read it.
run: $(RUN_STAMP)
	$(BIN)/compozy daemon start --foreground

## Run the whole test suite (unit, integration against the real daemon, browser tests in Chromium).
# System packages first (Chromium, python3-venv; installed when root or sudo allows, else the one command to
# run), then the venv: creating it may need python3-venv.
# The unit and integration tests run on TEST_WORKERS pytest-xdist workers (they mostly wait on daemons and agents,
# so more workers than cores pays); `--dist loadscope` keeps a module's tests, and its module-scoped daemon, on one
# worker. The browser tests follow in a pytest process of their own: Playwright's event loop breaks asyncio.run()
# in any test that runs after it in the same process. Both parts always run; the exit says whether either failed.
TEST_WORKERS ?= 4
PYTEST_ARGS ?=

test: system-deps
	@$(MAKE) --no-print-directory lint
	@status=0; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope tests/unit tests/integration $(PYTEST_ARGS) || status=$$?; \
	$(BIN)/python -m pytest tests/e2e $(PYTEST_ARGS) || status=$$((status ? status : $$?)); \
	exit $$status

## The deep API contract fuzz: the test `make test` runs bounded (a fixed seed, ~1,500 cases), without the bound.
# About 6,000 schemathesis cases against a live daemon, 4-8 min on 2 cores, a new seed each run (printed on a
# failure); COMPOZY_FUZZ_SEED=<n> replays one.
fuzz: $(STAMP)
	COMPOZY_FUZZ_DEEP=1 $(BIN)/python -m pytest tests/integration/test_api_contract.py

## Line coverage of the project's packages over the whole suite (the daemons the tests start included).
coverage: system-deps
	@$(MAKE) --no-print-directory venv
	rm -f .coverage .coverage.*
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --cov --cov-report= tests/unit tests/integration $(PYTEST_ARGS) || true
	$(BIN)/python -m pytest --cov --cov-append --cov-report= tests/e2e $(PYTEST_ARGS) || true
	$(BIN)/coverage combine --append -q || true
	$(BIN)/coverage report

system-deps:
	PYTHON=$(PYTHON) scripts/ensure-system-deps.sh

## The checks that keep the house in order; `make test` runs them first.
# ruff (pyproject.toml: line length 120, blind excepts, complexity; the code is hand-formatted, not by `ruff
# format`), the layer contracts (`lint-imports`, [tool.importlinter]) and the type checker (mypy, [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

## Benchmarks: one command, prints a table with ratios against the raw limits.
bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

## Catalog list latency at 10k sessions on SQLite and on PostgreSQL (skipped, with the reason, without one).
bench-catalog: $(STAMP)
	$(BIN)/python -m bench.catalog_list $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
