# The two quick-start commands are `make serve` and `make test`; everything else is a step of them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MATHJAX_VERSION := 3.2.2
MATHJAX := docs/assets/vendor/mathjax/tex-svg-full.js
HOST ?= 127.0.0.1:8000
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup assets serve test tangle stitch check-tangle site browser-check lint figures figures-check

# A virtual environment with the package (editable) and every pinned tool.
$(BIN)/.installed: pyproject.toml constraints-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints-cpu.txt -e ".[dev]"
	touch $@

setup: $(BIN)/.installed

# MathJax comes from the npm registry at setup time (not committed): the site renders math offline.
$(MATHJAX):
	mkdir -p .cache/npm $(dir $@)
	npm install --silent --no-audit --no-fund --prefix .cache/npm mathjax@$(MATHJAX_VERSION)
	cp .cache/npm/node_modules/mathjax/es5/tex-svg-full.js $@

assets: $(MATHJAX)

serve: setup assets
	$(BIN)/mkdocs serve --dev-addr $(HOST)

test: setup
	$(BIN)/python -m pytest

# Pages -> src/ and tests/ (never edit those by hand; or edit one and `make stitch` at once).
tangle: setup
	$(BIN)/python scripts/tangle.py tangle

stitch: setup
	$(BIN)/python scripts/tangle.py stitch

check-tangle: setup
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/check_tangle.sh

site: setup assets
	$(BIN)/mkdocs build --strict

browser-check: site
	$(BIN)/python scripts/check_site.py

lint: setup
	$(BIN)/ruff check src tests scripts

# Tables and figures for the pages, from the package and the committed data under data/.
FIGURE_SCRIPTS := $(wildcard scripts/fig_*.py)

figures: setup
	for f in $(FIGURE_SCRIPTS); do $(BIN)/python $$f || exit 1; done

figures-check: setup
	for f in $(FIGURE_SCRIPTS); do $(BIN)/python $$f --check || exit 1; done
