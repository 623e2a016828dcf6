"""Run entangled (the pinned 2.1.13) so that a page always tangles to the same file, on a fresh
clone too. `make tangle` and `make stitch` call this; do not call `entangled` directly.

Two fixes around entangled 2.1.13:
- it writes a file it creates without a final newline but adds one when it rewrites the file, so
  the same page gave two different files depending on the tree's history; here rewriting
  behaves like creating;
- on a fresh clone it has no database (.entangled/ is not committed) and refuses to touch the
  committed tangled files ("not managed by Entangled"). Here, without a database:
  `tangle` overwrites them when they are exactly as committed (CI proves the committed ones are
  the pages' own tangle, so nothing is lost); otherwise, and for `stitch`, the database is first
  rebuilt from the tree (`tangle --reset-db`, which changes no file), so that a hand edit is
  reported as a conflict by `tangle` and carried back to its page by `stitch`.

    python scripts/tangle.py tangle     # pages -> src/ and tests/
    python scripts/tangle.py stitch     # edits of a tangled file -> its page
"""

import subprocess
import sys
from pathlib import Path

import entangled.transaction
from entangled.main import cli

entangled.transaction.assure_final_newline = lambda text: text


def tangled_files_as_committed() -> bool:
    diff = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src", "tests"],
                          capture_output=True)
    return diff.returncode == 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--reset-db"]:
        args = ["tangle", "--reset-db"]
    elif not Path(".entangled/filedb.json").exists() and Path("src").exists():
        if args[:1] == ["tangle"] and tangled_files_as_committed():
            args = [*args, "--force"]
        else:
            subprocess.run([sys.executable, __file__, "--reset-db"], check=True,
                           capture_output=True)
    sys.argv[1:] = args
    sys.argv[0] = "entangled"
    sys.exit(cli())
