# The two quick-start commands are `make serve` and `make test`; everything else is a step of them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MATHJAX_VERSION := 3.2.2
MATHJAX := docs/assets/vendor/mathjax/tex-svg-full.js
# The site's two faces (@fontsource, from npm at setup time like MathJax): the same text metrics on
# every machine and in every reader's browser, whatever fonts are installed there.
ROBOTO_VERSION := 5.3.0
ROBOTO_MONO_VERSION := 5.3.0
# Roboto has no arrows (the pages' tables write "472 → 465"): Noto Sans Math, declared for the
# Arrows and Mathematical Operators blocks only, is the faces' fallback, so no glyph is left to
# whatever a machine has installed.
NOTO_MATH_VERSION := 5.3.0
FONTS := docs/assets/vendor/fonts/fonts.css
# the weights Material asks Google Fonts for (text 300, 400, 700 and their italics; code 400, 700)
FONT_CSS := roboto/300.css roboto/300-italic.css roboto/400.css roboto/400-italic.css \
  roboto/700.css roboto/700-italic.css roboto-mono/400.css roboto-mono/400-italic.css \
  roboto-mono/700.css
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

# One stylesheet with every @font-face of FONT_CSS (all unicode subsets: a browser fetches only
# those a page's text needs), woff2 only (every browser the site supports reads it), and the woff2
# files it names, next to it: its URLs stay relative, so `mkdocs serve` and the built site agree.
$(FONTS):
	mkdir -p .cache/npm $(dir $@)files
	npm install --silent --no-audit --no-fund --prefix .cache/npm \
	  @fontsource/roboto@$(ROBOTO_VERSION) @fontsource/roboto-mono@$(ROBOTO_MONO_VERSION) \
	  @fontsource/noto-sans-math@$(NOTO_MATH_VERSION)
	{ echo "/* written by make assets (OFL-1.1 fonts): @fontsource/roboto@$(ROBOTO_VERSION)," \
	    "@fontsource/roboto-mono@$(ROBOTO_MONO_VERSION), @fontsource/noto-sans-math@$(NOTO_MATH_VERSION) */"; \
	  for f in $(FONT_CSS); do cat .cache/npm/node_modules/@fontsource/$$f; echo; done; \
	  sed -e 's|unicode-range:.*;|unicode-range: U+2190-22FF;|' \
	    .cache/npm/node_modules/@fontsource/noto-sans-math/400.css; } \
	  | sed -e "s|, url([^)]*\.woff) format('woff')||" > $@.tmp
	for w in $$(grep -o 'files/[a-z0-9-]*\.woff2' $@.tmp | sort -u); do \
	  cp .cache/npm/node_modules/@fontsource/*/$$w $(dir $@)files/ || exit 1; done
	for p in roboto roboto-mono noto-sans-math; do \
	  cp .cache/npm/node_modules/@fontsource/$$p/LICENSE $(dir $@)LICENSE-$$p || exit 1; done
	mv $@.tmp $@

assets: $(MATHJAX) $(FONTS)

serve: setup assets
	$(BIN)/mkdocs serve --dev-addr $(HOST)

test: setup
	$(BIN)/python -m pytest

# The labs as exercises: copy a lab's skeletons to $(MYWORK)/ (a file already there is yours and
# is never overwritten), then run that lab's own tests with your modules in place of the package's.
MYWORK ?= mywork
LABS := $(patsubst exercises/lab%,%,$(wildcard exercises/lab*))

exercise:
	@case " $(LABS) " in *" $(LAB) "*) ;; *) echo "usage: make exercise LAB=NN, NN one of: $(LABS)"; exit 2;; esac
	@mkdir -p $(MYWORK)
	@for f in exercises/lab$(LAB)/*.py; do \
	  dest=$(MYWORK)/$$(basename $$f); \
	  if [ -e $$dest ]; then echo "kept $$dest (yours: never overwritten)"; \
	  else cp $$f $$dest && echo "copied $$f -> $$dest: fill in what raises NotImplementedError"; fi; \
	done
	@echo "then: make check-mine LAB=$(LAB)"

check-mine: setup
	@case " $(LABS) " in *" $(LAB) "*) ;; *) echo "usage: make check-mine LAB=NN, NN one of: $(LABS)"; exit 2;; esac
	$(BIN)/python -m pytest --lab=$(LAB) --mywork=$(MYWORK)

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
