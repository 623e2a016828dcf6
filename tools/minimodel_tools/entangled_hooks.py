"""Two corrections to the pinned entangled-cli 2.1.13, applied when entangled starts.

entangled imports every `entangled.hooks` entry point when it starts; this module is one (see
pyproject.toml). 2.1.13 cannot run a hook of ours by name (it looks external hooks up in the
built-in table: a KeyError), so the work is done at import. Both corrections hold for
`entangled tangle`, `sync`, `stitch`, `watch`, the make targets and the tangle check, in any
environment where the project is installed.

1. Every tangled file ends with exactly one newline. 2.1.13 writes a file it *creates* verbatim
   (the tangle ends in the `~/~ end` marker, with no newline) but adds a newline when it
   *rewrites* a file, so the same page gave different bytes on a fresh clone and after an edit.
   entangled hashes contents with trailing whitespace stripped, so the newline never counts as
   an edit and a file committed without it is left alone.

2. Stitch never reads the labs' skeletons (`exercises/`). A skeleton shares its interface blocks
   (signatures and docstrings) with the package, so the same block stands in two tangled files.
   Stitch reads every tangled file in the order of a Python set, which depends on the hash seed,
   and the last copy of a block wins: an edit of `src/minimodel/online_softmax.py` was undone by
   the untouched skeleton under some seeds. Skeletons are therefore one-way (page -> skeleton):
   stitch takes a block from the package or the tests only, and the next tangle rewrites the
   skeleton from the page. The tangle check makes sure no other block stands in two files.
"""

from pathlib import PurePath

from entangled.code_reader import CodeReader
from entangled.transaction import Create

SKELETONS = "exercises"

_create_run = Create.run


def _create_run_with_final_newline(self: Create, db) -> None:
    if not self.content.endswith("\n"):
        self.content += "\n"
    _create_run(self, db)


Create.run = _create_run_with_final_newline

_code_reader_run = CodeReader.run


def _run_unless_skeleton(self: CodeReader, text: str):
    if PurePath(self.location.filename).parts[:1] == (SKELETONS,):
        return None  # a skeleton is made from its page, never read back into it
    return _code_reader_run(self, text)


CodeReader.run = _run_unless_skeleton


class Hook:
    """The entry-point loader wants a `Hook` attribute; this one is never named in
    entangled.toml, so it does nothing (the work is done at import, above)."""
