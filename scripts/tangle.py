"""Run entangled (the pinned 2.1.13) with one fix, so that a page always tangles to the same file.

entangled 2.1.13 writes a file it creates without a final newline but adds one when it rewrites
the file, so the same page gave two different files depending on the tree's history (and a fresh
clone then refused to take over files with the newline). Here rewriting behaves like creating.

    python scripts/tangle.py tangle     # what `make tangle` runs
    python scripts/tangle.py stitch     # carry edits of a tangled file back into its page
"""

import sys

import entangled.transaction
from entangled.main import cli

entangled.transaction.assure_final_newline = lambda text: text

if __name__ == "__main__":
    sys.argv[0] = "entangled"
    sys.exit(cli())
