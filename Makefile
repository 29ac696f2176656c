# Two commands from a fresh clone: `make run` and `make test`; `make check` is the inner loop.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
WORKERS ?= 2
# pytest-xdist processes for the suites that run in parallel (`auto`: one per core). `make test`
# keeps each module on one worker (loadscope), so a module-scoped server or demo run starts once.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest
XDIST := -n $(TEST_WORKERS)
# When make started, for the total `make test` prints; each stage's wall time is added to
# STAGE_TIMES as it ends, and the list is printed at the end.
START := $(shell date +%s)
STAGE_TIMES := $(VENV)/.stage-times

# $(call timed,STAGE,COMMAND): run COMMAND (shown), record STAGE's wall time, keep its status.
define timed
@echo "== $(1) =="
@t=$$(date +%s); (set -x; $(2)); status=$$?; \
	echo "$(1): $$(( $$(date +%s) - t )) s" | tee -a $(STAGE_TIMES); exit $$status
endef

.PHONY: run check test lint migrate bench clean

# Two installs into one venv, each redone when pyproject.toml changes: RUNTIME, what `make run`
# needs (the server extra: no test tools), and DEV, everything `make test` runs (the dev extra,
# which includes the server and PostgreSQL extras).
RUNTIME := $(VENV)/.installed-server
DEV := $(VENV)/.installed-dev

$(RUNTIME): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[server]'
	@touch $@

$(DEV): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@ $(RUNTIME)

run: $(RUNTIME)
	$(BIN)/calmon migrate
	@echo "calmon: open http://$(HOST):$(PORT)/ui"
	@if [ -z "$$CALMON_ADMIN_TOKEN" ]; then \
		token=$$($(BIN)/python -c 'from service.auth.tokens import new_token; print(new_token())'); \
		echo "calmon: the admin token of this run (CALMON_ADMIN_TOKEN sets one): $$token"; \
		CALMON_ADMIN_TOKEN=$$token exec $(BIN)/calmon serve --host $(HOST) --port $(PORT) --workers $(WORKERS); \
	else \
		exec $(BIN)/calmon serve --host $(HOST) --port $(PORT) --workers $(WORKERS); \
	fi

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The inner loop: lint and types, then every test not marked slow, on SQLite, in parallel.
check: lint
	CALMON_TEST_BACKEND=sqlite $(PYTEST) $(XDIST) -m "not slow" --ignore=tests/failover -q

# Everything, on both backends (tests of what stands in front of the database, the proxy, the
# client and its install, in the SQLite stage only). The failover tests run alone, one at a time:
# they time failovers of formations of their own, and take root network namespaces. Each pytest
# stage lists its ten slowest tests.
test: $(DEV)
	@rm -f $(STAGE_TIMES)
	$(call timed,lint,$(MAKE) --no-print-directory lint)
	$(call timed,pytest on SQLite,CALMON_TEST_BACKEND=sqlite $(PYTEST) $(XDIST) --dist loadscope --durations=10 --ignore=tests/failover)
ifdef CALMON_TEST_DATABASE_URL
	$(call timed,pytest on PostgreSQL,CALMON_TEST_BACKEND=postgresql $(PYTEST) $(XDIST) --dist loadscope --durations=10 tests/integration)
else
	@echo "== PostgreSQL skipped: CALMON_TEST_DATABASE_URL is not set (.ci/run sets it) =="
endif
	$(call timed,failover on pg_auto_failover formations of its own,$(PYTEST) tests/failover -s)
	@echo "== make test wall times =="
	@cat $(STAGE_TIMES)
	@echo "total: $$(( $$(date +%s) - $(START) )) s"

migrate: $(RUNTIME)
	$(BIN)/calmon migrate

bench: $(DEV)
	$(BIN)/python bench/bench_core.py
	$(BIN)/python bench/bench_metrics.py
	$(BIN)/python bench/bench_stream.py --predictions 1000000

clean:
	rm -rf $(VENV) instance .pytest_cache .ruff_cache .mypy_cache
