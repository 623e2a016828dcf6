# ~/~ begin <<docs/foundations.md#src/minimodel/__init__.py>>[init]
"""minimodel, Phase 27: modern attention seen through the roofline.

Modules: reference (the specification, and the naive implementation), roofline (FLOP and byte
counts), ceilings (the roofs), roofline_plot (the figure), minigpt (the model and its KV cache),
verbs (the corpus and the 64-token sequence), and one module per kernel.
Tangled from docs/foundations.md; edit the page, not this file.
"""

__version__ = "0.27.0"
# ~/~ end
