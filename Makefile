# The two quick-start commands are `make serve` and `make test`; everything else is a step of them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MATHJAX_VERSION := 3.2.2
MATHJAX := docs/assets/vendor/mathjax/tex-svg-full.js
HOST ?= 127.0.0.1:8000
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup db assets serve dev test exercise check-mine tangle stitch sync check-tangle site browser-check lint figures figures-check

# A virtual environment with the package (editable) and every pinned tool.
$(BIN)/.installed: pyproject.toml constraints-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints-cpu.txt -e ".[dev]"
	touch $@

# entangled's database (.entangled/, not committed) records what it wrote, so that `entangled
# sync`, `watch`, `tangle` and `stitch` can tell a page edit from a code edit. A fresh clone has
# none: build it from the tree as it is (this writes no file). `make db` rebuilds it, e.g. after
# a `git pull` brought new pages and their tangled files together.
DB := .entangled/filedb.json
$(DB): | $(BIN)/.installed
	$(BIN)/entangled tangle --reset-db

db: $(BIN)/.installed
	$(BIN)/entangled tangle --reset-db

setup: $(BIN)/.installed $(DB)

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

# The labs as exercises: copy a lab's skeletons to $(MYWORK)/ (a file already there is yours and
# is never overwritten), then run that lab's own tests with your modules in place of the package's.
# A lab in parts (Lab 03) is checked one part at a time with PART=N: that part's tests, and only
# that part's files of $(MYWORK)/. Any other file there (another lab's, a scratch file) is ignored.
MYWORK ?= mywork
PART ?=
LABS := $(patsubst exercises/lab%,%,$(wildcard exercises/lab*))

exercise:
	@case " $(LABS) " in *" $(LAB) "*) ;; *) echo "usage: make exercise LAB=NN, NN one of: $(LABS)"; exit 2;; esac
	@mkdir -p $(MYWORK)
	@for f in exercises/lab$(LAB)/*.py; do \
	  dest=$(MYWORK)/$$(basename $$f); \
	  if [ -e $$dest ]; then echo "kept $$dest (yours: never overwritten)"; \
	  else cp $$f $$dest && echo "copied $$f -> $$dest: fill in what raises NotImplementedError"; fi; \
	done
	@python3 scripts/lab_parts.py $(LAB)
	@echo "then: make check-mine LAB=$(LAB)"

check-mine: setup
	@case " $(LABS) " in *" $(LAB) "*) ;; *) echo "usage: make check-mine LAB=NN [PART=N], NN one of: $(LABS)"; exit 2;; esac
	$(BIN)/python -m pytest --lab=$(LAB) --mywork=$(MYWORK) $(if $(PART),--part=$(PART))

# Shortcuts for entangled's own commands (call them directly just as well):
# pages -> src/, tests/, exercises/; edits of a tangled file -> its page; whichever is needed.
tangle: setup
	$(BIN)/entangled tangle

stitch: setup
	$(BIN)/entangled stitch

sync: setup
	$(BIN)/entangled sync

# Live editing: entangled watches the pages and the tangled files (a page edit re-tangles the
# package, a code edit is stitched back into its page) while mkdocs serves the site and reloads it.
dev: setup assets
	$(BIN)/entangled watch & watcher=$$!; \
	trap 'kill $$watcher 2>/dev/null' EXIT INT TERM; \
	$(BIN)/mkdocs serve --dev-addr $(HOST)

check-tangle: setup
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/check_tangle.sh

site: setup assets
	$(BIN)/mkdocs build --strict

browser-check: site
	$(BIN)/python scripts/check_site.py

lint: setup
	$(BIN)/ruff check src tests scripts tools exercises

# Tables and figures for the pages, from the package and the committed data under data/.
FIGURE_SCRIPTS := $(wildcard scripts/fig_*.py)

figures: setup
	for f in $(FIGURE_SCRIPTS); do $(BIN)/python $$f || exit 1; done
	$(BIN)/python scripts/roofline_overlay.py --draw

figures-check: setup
	for f in $(FIGURE_SCRIPTS); do $(BIN)/python $$f --check || exit 1; done
	$(BIN)/python scripts/roofline_overlay.py --check
