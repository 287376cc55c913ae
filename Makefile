# Muster — every target installs what it needs first; a fresh machine needs only python3 (3.11+) and pip.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON     ?= python3
UV_VERSION := 0.13.9
TOOLS      := .tools
UV         := $(TOOLS)/bin/uv
VENV       := .venv
STAMP      := $(VENV)/.synced

# uv must use the machine's Python, never download one.
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON_PREFERENCE := only-system
export UV_PYTHON := $(shell command -v $(PYTHON))
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/$(VENV)

PYTEST_ARGS ?=

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

$(STAMP): $(UV) uv.lock pyproject.toml packages/*/pyproject.toml services/*/pyproject.toml
	$(UV) sync --locked --all-packages
	@touch $@

.PHONY: install
install: $(STAMP) ## Install the pinned uv and sync the whole workspace (dev tools included)

.PHONY: lock
lock: $(UV) ## Re-resolve uv.lock after changing dependencies
	$(UV) lock

.PHONY: run
run: $(STAMP) ## Serve Muster on 127.0.0.1:8000 (SQLite under ./var/ unless MUSTER_DATABASE_URL says otherwise)
	$(VENV)/bin/muster serve

.PHONY: migrate
migrate: $(STAMP) ## Apply database migrations up to head
	$(VENV)/bin/muster migrate

.PHONY: test
test: $(STAMP) ## Run the test suite (the PostgreSQL leg too when a server answers on 127.0.0.1:5432)
	@set -e; \
	if [ -z "$${MUSTER_TEST_POSTGRES_URL:-}" ] && pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then \
	  export MUSTER_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/postgres; fi; \
	if [ -n "$${MUSTER_TEST_POSTGRES_URL:-}" ]; then echo "PostgreSQL leg: on"; \
	else echo "PostgreSQL leg: off (no server answers on 127.0.0.1:5432)"; fi; \
	$(VENV)/bin/pytest $(PYTEST_ARGS)

.PHONY: lint
lint: $(STAMP) ## ruff format check, ruff, import-linter contracts
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

.PHONY: format
format: $(STAMP) ## Apply ruff format and the safe ruff fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

.PHONY: typecheck
typecheck: $(STAMP) ## mypy --strict over the four members
	$(VENV)/bin/mypy

.PHONY: bench
bench: $(STAMP) ## Run every benchmark under bench/ (PostgreSQL legs when a local server answers); figures + ratios
	@set -e; \
	if [ -z "$${MUSTER_TEST_POSTGRES_URL:-}" ] && pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then \
	  export MUSTER_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/postgres; fi; \
	for b in bench/*/run.py; do echo "== $$b"; $(VENV)/bin/python $$b; done

.PHONY: clean
clean: ## Remove the virtualenv, tool caches and the local database
	rm -rf $(VENV) $(TOOLS) var .mypy_cache .ruff_cache .pytest_cache .cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z][a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-10s\033[0m %s\n", $$1, $$2}'
