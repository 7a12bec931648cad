# The two commands a newcomer runs: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint typecheck docs browser postgres clean

# pip byte-compiles at install: this environment sets PYTHONDONTWRITEBYTECODE=1, so without
# that (--no-compile) every process would compile each module it imports, every time.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[convert,dev]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# The user docs as a site in build/site (tests/test_docs.py builds and checks them in `make test`).
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check devicefit sdk simulator tests benchmarks examples
	$(VENV)/bin/lint-imports

# The HTML-report tests look at pages in Debian's headless Chromium; install it if missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "warning: could not install chromium (needs root); the HTML tests will fail"

# The distributed-fit tests start a throw-away PostgreSQL server (Debian's package; the
# tests run it as the package's `postgres` user when they run as root).
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } || \
	  echo "warning: could not install postgresql (needs root); the distributed fit tests will fail"

# The package as a type checker sees it (pyproject.toml's [tool.mypy]).
typecheck: $(STAMP)
	$(VENV)/bin/mypy

# This environment may set PYTHONDONTWRITEBYTECODE=1; then each of the suite's ~500 Python
# processes (CLI runs, children, fakes) compiles again every module of the checkout it
# imports, and pytest rewrites every test module in each worker (on 2026-12-02: 11 of the
# suite's 315 CPU-seconds). The suite lets Python cache them, as it does by default.
test: lint typecheck browser postgres
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -n 2 -q --durations=25

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
