# Two commands from a fresh clone: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
WORKERS ?= 2

.PHONY: run test lint migrate bench clean

$(BIN)/activate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/activate

run: $(BIN)/activate
	$(BIN)/calmon migrate
	@if [ -z "$$CALMON_ADMIN_TOKEN" ]; then \
		token=$$($(BIN)/python -c 'from service.auth.tokens import new_token; print(new_token())'); \
		echo "CALMON_ADMIN_TOKEN not set; generated an admin token for this run:"; \
		echo "  $$token"; \
		CALMON_ADMIN_TOKEN=$$token exec $(BIN)/calmon serve --host $(HOST) --port $(PORT) --workers $(WORKERS); \
	else \
		exec $(BIN)/calmon serve --host $(HOST) --port $(PORT) --workers $(WORKERS); \
	fi

lint: $(BIN)/activate
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	@echo "== pytest on SQLite =="
	CALMON_TEST_BACKEND=sqlite $(BIN)/python -m pytest --ignore=tests/failover
	@if [ -n "$$CALMON_TEST_DATABASE_URL" ]; then \
		echo "== pytest on PostgreSQL ($$CALMON_TEST_DATABASE_URL) =="; \
		CALMON_TEST_BACKEND=postgresql $(BIN)/python -m pytest tests/integration; \
	else \
		echo "== PostgreSQL skipped: CALMON_TEST_DATABASE_URL is not set (.ci/run sets it) =="; \
	fi
	@echo "== failover: calmon on pg_auto_failover formations of its own (root, pg_autoctl) =="
	$(BIN)/python -m pytest tests/failover -s

migrate: $(BIN)/activate
	$(BIN)/calmon migrate

bench: $(BIN)/activate
	$(BIN)/python bench/bench_core.py
	$(BIN)/python bench/bench_metrics.py
	$(BIN)/python bench/bench_stream.py --predictions 1000000

clean:
	rm -rf $(VENV) instance .pytest_cache .ruff_cache .mypy_cache
