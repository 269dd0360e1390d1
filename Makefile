# Two commands on a fresh machine: `make html` (set up, execute every guide, build the site) and
# `make test` (set up, pass the tests). Each target installs what it needs.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The TPU compiler, off the import path (see guide_helpers/requirements-tpu.txt and guide_helpers/tpu.py).
LIBTPU_DIR := $(VENV)/libtpu
BUILD := _build
HTML := $(BUILD)/html
# Colab's Python (3.13 since August 2026, googlecolab/colabtools#6081), in a venv of its own: the
# second profile of `make portability` executes every guide with it. The first Python 3.13 found:
# PYTHON_COLAB if given, python3.13 on PATH, then pyenv's.
COLAB_PYTHON := 3.13
PYTHON_COLAB ?=
VENV_COLAB := .venv-colab
STAMP_COLAB := $(VENV_COLAB)/.installed
# `cache` re-executes only guides whose code changed; CI and Read the Docs use `force`.
NB_EXECUTION_MODE ?= cache
SPHINX := $(BIN)/python -m sphinx -b html -c . -d $(BUILD)/doctrees -W --keep-going
# Guides are the docs/*.md files with a jupytext header (tools/guides.py decides); each has a
# notebooks/NAME.ipynb pair.
GUIDES := $(shell $(PYTHON) tools/guides.py)
PORT ?= 8000

comma := ,

.PHONY: help setup setup-colab check-env html test unit portability lint bench sync execute serve clean

help:
	@echo "make html     set up, execute every guide, build the site into $(HTML)"
	@echo "make test     set up and run the tests (lint, pairing, build, nbval, browser, site checks)"
	@echo "make unit     the unit tests of guide_helpers/ alone (tests/unit), no site build: under a minute"
	@echo "make portability  execute every guide under a second profile (Python $(COLAB_PYTHON), another CPU), compare"
	@echo "make lint     ruff over the notebooks' code, guide_helpers/, the tests, tools/ and conf.py"
	@echo "make bench    time a clean build, rebuilds, each guide bare, make unit, test and portability"
	@echo "make sync     write each docs/NAME.md into notebooks/NAME.ipynb, keeping outputs"
	@echo "make execute  build the site, then store each guide's outputs from that execution in notebooks/"
	@echo "make serve    serve $(HTML) on http://127.0.0.1:$(PORT)"
	@echo "make clean    remove $(BUILD)"

setup: $(STAMP)

$(STAMP): requirements.txt guide_helpers/requirements-tpu.txt
	@command -v $(PYTHON) >/dev/null || { \
	  echo "error: '$(PYTHON)' not found. Install Python 3.11 or newer, or run make PYTHON=/path/to/python3."; exit 1; }
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "error: $(PYTHON) cannot create virtual environments (the venv/ensurepip modules are missing)."; \
	  echo "       On Debian or Ubuntu: apt-get install python3-venv"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { \
	  echo "error: '$(PYTHON) -m venv $(VENV)' failed; see above."; exit 1; }
	@echo "Installing requirements.txt into $(VENV) ..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt || { \
	  echo "error: installing requirements.txt into $(VENV) failed; see pip's message above."; \
	  echo "       Remove $(VENV) and run make again to start from a clean environment."; exit 1; }
	@echo "Installing guide_helpers/requirements-tpu.txt (the TPU compiler) into $(LIBTPU_DIR) ..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade \
	  --target $(LIBTPU_DIR) -r guide_helpers/requirements-tpu.txt || { \
	  echo "error: installing guide_helpers/requirements-tpu.txt into $(LIBTPU_DIR) failed; see pip's message above."; exit 1; }
	@# Build matplotlib's font cache now: built during a guide, it can warn on stderr.
	@$(BIN)/python -c 'import matplotlib.pyplot' || { \
	  echo "error: matplotlib, just installed into $(VENV), does not import; see above."; exit 1; }
	@touch $@

setup-colab: $(STAMP_COLAB)

$(STAMP_COLAB): requirements.txt $(STAMP)
	@py=$$(for p in $(PYTHON_COLAB) python$(COLAB_PYTHON) $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(COLAB_PYTHON)*/bin/python$(COLAB_PYTHON) 2>/dev/null); do \
	  "$$p" -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == ($(subst .,$(comma) ,$(COLAB_PYTHON)))' 2>/dev/null && { echo "$$p"; break; }; \
	done); test -n "$$py" || { \
	  echo "error: no Python $(COLAB_PYTHON) with venv found (Colab's Python, for make portability's second profile)."; \
	  echo "       Install it (pyenv install $(COLAB_PYTHON), or your system's python$(COLAB_PYTHON)-venv), or run make PYTHON_COLAB=/path/to/python$(COLAB_PYTHON)."; exit 1; }; \
	echo "Installing requirements.txt into $(VENV_COLAB) with $$py ..."; \
	{ test -x $(VENV_COLAB)/bin/python || "$$py" -m venv $(VENV_COLAB); } && \
	$(VENV_COLAB)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt || { \
	  echo "error: installing requirements.txt into $(VENV_COLAB) failed; see pip's message above."; \
	  echo "       Remove $(VENV_COLAB) and run make again."; exit 1; }
	@# The TPU compiler is one build for every Python: share .venv's (guide_helpers/tpu.py finds it there).
	@ln -sfn ../$(LIBTPU_DIR) $(VENV_COLAB)/libtpu
	@$(VENV_COLAB)/bin/python -c 'import matplotlib.pyplot' || { \
	  echo "error: matplotlib, just installed into $(VENV_COLAB), does not import; see above."; exit 1; }
	@touch $@

# An installed environment that no longer works (a removed package, a Python that was upgraded
# under the venv) is named as such, instead of failing deep inside Sphinx. Finding the packages,
# rather than importing them, keeps this check to a few milliseconds.
NEEDED := sphinx myst_nb sphinx_book_theme jupytext nbclient jax flax optax
check-env: $(STAMP)
	@$(BIN)/python -c 'import importlib.util as u, sys; \
	  missing = [m for m in sys.argv[1:] if u.find_spec(m) is None]; \
	  missing and print("No module named", ", ".join(missing)); sys.exit(bool(missing))' \
	  $(NEEDED) 2>&1 || { \
	  echo "error: the environment in $(VENV) is broken: it lacks packages of requirements.txt."; \
	  echo "       Remove it (rm -rf $(VENV)) and run make again to reinstall."; exit 1; }
	@test -f $(LIBTPU_DIR)/libtpu/libtpu.so || { \
	  echo "error: the TPU compiler is missing from $(LIBTPU_DIR) (guide_helpers/requirements-tpu.txt)."; \
	  echo "       Remove $(STAMP) and run make again to install it."; exit 1; }

# conf.py's nb_execution_cache_path, read by tools/guides.py: one execution cache for the site,
# the stored notebooks (`make execute`) and the tests' build, so that a guide is executed once
# per change of its code.
EXECUTED := $(shell $(PYTHON) tools/guides.py --cache)
# The cache knows a guide's code, not the helpers it imports or the pins: when these change, it
# is emptied, so that every guide executes again once.
EXECUTED_WITH := $(wildcard guide_helpers/*.py guide_helpers/measured/*.jsonl) requirements.txt

$(BUILD)/.executed-with: $(EXECUTED_WITH)
	@rm -rf $(EXECUTED) && mkdir -p $(BUILD) && touch $@

html: check-env $(BUILD)/.executed-with
	$(SPHINX) -D nb_execution_mode=$(NB_EXECUTION_MODE) docs $(HTML)
	@echo
	@echo "The site is built: open $(HTML)/index.html, or run 'make serve'."

# The real build executes each guide once; tests/site/test_outputs.py then checks every stored output
# against that execution with nbval's own comparison (strict, tests/support/nbval_sanitize.cfg).
PYTEST_ARGS := -p no:cacheprovider -W error tests

test: lint $(STAMP_COLAB)
	PORTABILITY_PYTHON=$(abspath $(VENV_COLAB))/bin/python $(BIN)/python -m pytest $(PYTEST_ARGS) -m "not portability"

# The edit loop's check: tests/unit, one file per guide_helpers module, no site built or executed,
# in two processes (pytest-xdist; each test is independent), under a minute on two cores.
unit: check-env $(STAMP_COLAB)
	PORTABILITY_PYTHON=$(abspath $(VENV_COLAB))/bin/python $(BIN)/python -m pytest $(PYTEST_ARGS)/unit -n 2 --dist worksteal

# The stored outputs against one more execution of every guide under a second profile (Colab's
# Python, XLA's ISA capped, another OpenBLAS kernel, one core): tests/site/test_portability.py. CI runs
# it too; `make test` uses that profile once, to prove that the check catches a float's digits.
portability: check-env $(STAMP_COLAB)
	PORTABILITY_PYTHON=$(abspath $(VENV_COLAB))/bin/python $(BIN)/python -m pytest $(PYTEST_ARGS) -m portability

LINTED := notebooks tests tools guide_helpers conf.py
lint: check-env
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

# A benchmark, not a test: wall times of a clean build, rebuilds, bare executions, make test and
# make portability, in a temporary copy of the repository (your _build and docs are not touched).
# REPEAT=3 for medians; finished rounds are kept in .bench/, so a later run goes on from them;
# COMMIT=REF measures a commit's files instead of the working tree. A round of the working tree
# refreshes tools/guide_times.json, the per-guide times that tests/site/test_budget.py projects
# CI's time from.
REPEAT ?= 1
COMMIT ?=
bench: check-env
	$(BIN)/python tools/bench.py --repeat $(REPEAT) $(if $(COMMIT),--commit $(COMMIT))

sync: $(STAMP)
	@$(BIN)/python tools/shared_cells.py
	@for g in $(GUIDES); do \
	  $(BIN)/jupytext --to ipynb --update --output notebooks/$$g.ipynb docs/$$g.md || exit 1; \
	done

# The stored notebooks' outputs from the site build's own execution (tools/store_outputs.py):
# the build executes only the guides whose code changed, then each notebook takes its outputs.
execute: sync
	@$(MAKE) --no-print-directory html NB_EXECUTION_MODE=cache
	$(BIN)/python tools/store_outputs.py --cache $(EXECUTED)

serve:
	@test -f $(HTML)/index.html || { echo "error: no site in $(HTML); run 'make html' first."; exit 1; }
	@echo "Serving $(HTML) on http://127.0.0.1:$(PORT) (Ctrl-C to stop)"
	@$(PYTHON) -m http.server $(PORT) --bind 127.0.0.1 --directory $(HTML)

clean:
	rm -rf $(BUILD)
