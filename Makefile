# The two commands a newcomer runs: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SUM := $(shell cksum pyproject.toml | cut -d' ' -f1)
# Two installs into the one venv: the demo's (devicefit with the `convert` extra, all that
# examples/demo.py imports) and the developer's (`convert` and `dev`: the test suite, the
# linters, mypy, mkdocs, Vela, PostgreSQL's driver...). The developer's holds the demo's, so
# it marks both done; `make demo` in a fresh clone skips the dev tools it never runs.
DEMO_STAMP := $(VENV)/.installed-demo-$(SUM)
STAMP := $(VENV)/.installed-dev-$(SUM)
DEV_EXTRAS := convert,dev

.PHONY: demo test lint typecheck docs debian clean

# The installed packages are byte-compiled: this environment sets PYTHONDONTWRITEBYTECODE=1,
# so otherwise every process would compile each module it imports, every time. compileall
# does it on every core (pip's own compiling takes one: 52 s against 27 + 12 s here).
define install
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[$(1)]'
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
endef

$(STAMP): pyproject.toml
	$(call install,$(DEV_EXTRAS))
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	$(call install,convert)
	@rm -f $(VENV)/.installed-demo-*
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

# The user docs as a site in build/site (tests/test_docs.py builds and checks them in `make test`).
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check devicefit sdk simulator tests benchmarks examples
	$(VENV)/bin/lint-imports

# What the suite needs from Debian, installed if missing (one apt-get for both): the
# HTML-report tests look at pages in headless Chromium; the distributed-fit tests start a
# throw-away PostgreSQL server (run as the package's `postgres` user when run as root).
debian:
	@missing=""; command -v chromium >/dev/null 2>&1 || missing=" chromium"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	[ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } || \
	  echo "warning: could not install$$missing (needs root); the tests that use them will fail"

# The package as a type checker sees it (pyproject.toml's [tool.mypy]).
typecheck: $(STAMP)
	$(VENV)/bin/mypy

# This environment may set PYTHONDONTWRITEBYTECODE=1; then each of the suite's ~500 Python
# processes (CLI runs, children, fakes) compiles again every module of the checkout it
# imports, and pytest rewrites every test module in each worker (on 2026-12-02: 11 of the
# suite's 315 CPU-seconds). The suite lets Python cache them, as it does by default.
# Debian's packages install while pip installs (each mostly waits on one core or the disk).
test:
	@$(MAKE) --no-print-directory -j 2 debian lint typecheck
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -n 2 -q --durations=25

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
