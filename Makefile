# The two commands of the README. Each creates .venv and installs what it needs on a fresh
# machine; when nothing changed in pyproject.toml the install step is skipped.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

## make demo: run `kernos demo` offline (replayed model turns, no key needed)
demo: $(STAMP)
	$(BIN)/kernos demo

## make test: every check: ruff lint + format check, mypy strict on src/, pytest
test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest

## make bench: the benchmarks (on demand; figures go in issue notes, never in tests)
bench: $(STAMP)
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done
