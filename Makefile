# Two commands on a fresh machine: `make html` (set up, execute every guide, build the site) and
# `make test` (set up, pass the tests). Each target installs what it needs.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD := _build
HTML := $(BUILD)/html
# `cache` re-executes only guides whose code changed; CI and Read the Docs use `force`.
NB_EXECUTION_MODE ?= cache
SPHINX := $(BIN)/python -m sphinx -b html -c . -d $(BUILD)/doctrees -W --keep-going
# Guides are the docs/*.md files with a jupytext header; each has a notebooks/NAME.ipynb pair.
GUIDES := $(basename $(notdir $(shell grep -l '^jupytext:' docs/*.md)))
PORT ?= 8000

.PHONY: help setup html test sync execute serve clean

help:
	@echo "make html     set up, execute every guide, build the site into $(HTML)"
	@echo "make test     set up and run the tests (pairing, build, nbval, site checks)"
	@echo "make sync     write each docs/NAME.md into notebooks/NAME.ipynb, keeping outputs"
	@echo "make execute  re-execute the stored notebooks in place"
	@echo "make serve    serve $(HTML) on http://127.0.0.1:$(PORT)"
	@echo "make clean    remove $(BUILD)"

setup: $(STAMP)

$(STAMP): requirements.txt
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
	@touch $@

html: $(STAMP)
	$(SPHINX) -D nb_execution_mode=$(NB_EXECUTION_MODE) docs $(HTML)
	@echo
	@echo "The site is built: open $(HTML)/index.html, or run 'make serve'."

# tests/ first (pairing, sources, the real build), then nbval over the stored notebooks.
PYTEST_ARGS := -p no:cacheprovider -W error --nbval --nbval-current-env \
  --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=600 tests notebooks

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

sync: $(STAMP)
	@for g in $(GUIDES); do \
	  $(BIN)/jupytext --to ipynb --update --output notebooks/$$g.ipynb docs/$$g.md || exit 1; \
	done

execute: $(STAMP)
	@for g in $(GUIDES); do \
	  echo "Executing notebooks/$$g.ipynb"; \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=600 \
	    notebooks/$$g.ipynb || exit 1; \
	done

serve:
	@test -f $(HTML)/index.html || { echo "error: no site in $(HTML); run 'make html' first."; exit 1; }
	@echo "Serving $(HTML) on http://127.0.0.1:$(PORT) (Ctrl-C to stop)"
	@$(PYTHON) -m http.server $(PORT) --bind 127.0.0.1 --directory $(HTML)

clean:
	rm -rf $(BUILD)
