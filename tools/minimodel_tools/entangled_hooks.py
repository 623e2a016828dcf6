"""Every tangled file ends with exactly one newline, however entangled is called.

The pinned entangled-cli 2.1.13 writes a file it *creates* verbatim (the tangle ends in the
`~/~ end` marker, with no newline) but adds a newline when it *rewrites* a file, so the same page
gave different bytes on a fresh clone and after an edit, and the tangle check failed after
`entangled sync`. It also cannot run a hook of ours by name (2.1.13 looks external hooks up in
the built-in table: a KeyError). What it does do is import every `entangled.hooks` entry point
when it starts: this module is one (see pyproject.toml), and importing it makes creating behave
like rewriting. So `entangled tangle`, `sync`, `stitch`, `watch`, the make targets and the tangle
check give byte-identical files in any environment where the project is installed.

entangled hashes contents with trailing whitespace stripped, so the newline never counts as an
edit and a file committed without it is left alone.
"""

from entangled.transaction import Create

_create_run = Create.run


def _create_run_with_final_newline(self: Create, db) -> None:
    if not self.content.endswith("\n"):
        self.content += "\n"
    _create_run(self, db)


Create.run = _create_run_with_final_newline


class Hook:
    """The entry-point loader wants a `Hook` attribute; this one is never named in
    entangled.toml, so it does nothing (the work is done at import, above)."""
