"""Bring a Spanish page's code up to its English page (issue 29), and say what else changed.

    python scripts/es_sync.py foundations.md [index.md ...]     # pages relative to docs/
    python scripts/es_sync.py --stamp foundations.md             # after the prose is updated

Without --stamp: where the English page's code blocks changed in place (the same number of
blocks), the Spanish page's blocks are replaced by the English ones, in order, and the prose is
left alone; where blocks were added or removed, nothing is written and the English blocks to
place are printed, since each comes with prose to translate. Either way it prints the English
diff since the recorded `en_blob` (the prose to translate again). With --stamp: records the
English page's current blob as `en_blob`, which says the Spanish prose is up to date with it;
tests/test_spanish_edition.py fails until then.
"""

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_spanish_edition import blob, code_blocks, recorded_blob  # noqa: E402


def english_diff(rel: str, recorded: str | None) -> str:
    """The English page's diff since the recorded blob (empty when git cannot show it)."""
    page = ROOT / "docs" / rel
    new = subprocess.run(["git", "hash-object", "-w", str(page)], capture_output=True, text=True,
                         cwd=ROOT).stdout.strip()
    if not recorded or not new or recorded == new:
        return ""
    out = subprocess.run(["git", "diff", recorded, new], capture_output=True, text=True,
                         cwd=ROOT)
    return out.stdout


def sync(rel: str) -> bool:
    english = (ROOT / "docs" / rel).read_text()
    spanish_path = ROOT / "docs" / "es" / rel
    spanish = spanish_path.read_text()
    en, es = code_blocks(english), code_blocks(spanish)
    ok = True
    if len(en) == len(es):
        for old, new in zip(es, en, strict=True):
            if old != new:
                spanish = spanish.replace(old, new, 1)
        spanish_path.write_text(spanish)
        print(f"docs/es/{rel}: code blocks set to docs/{rel}'s ({len(en)} blocks)")
    else:
        ok = False
        print(f"docs/es/{rel}: {len(es)} code blocks, docs/{rel} has {len(en)}; nothing written. "
              "Place these by hand, each with its paragraph translated:")
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=es, b=en).get_opcodes():
            if tag != "equal":
                print(f"  Spanish blocks {i1 + 1}-{i2} -> English blocks {j1 + 1}-{j2}:")
                for block in en[j1:j2]:
                    print("    " + block.split("\n")[0])
    diff = english_diff(rel, recorded_blob(spanish))
    if diff:
        print(f"docs/{rel} since the translation (translate the prose again, then --stamp):")
        print(diff)
    return ok


def stamp(rel: str) -> None:
    page = ROOT / "docs" / "es" / rel
    text = page.read_text()
    current = blob((ROOT / "docs" / rel).read_bytes())
    text, n = re.subn(r"(?m)^en_blob: *\S*$", f"en_blob: {current}", text, count=1)
    if n != 1:
        sys.exit(f"docs/es/{rel}: no `en_blob:` line in its front matter")
    page.write_text(text)
    print(f"docs/es/{rel}: en_blob {current}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="+", help="pages relative to docs/, e.g. foundations.md")
    parser.add_argument("--stamp", action="store_true",
                        help="record the English page's current blob (the prose is up to date)")
    args = parser.parse_args()
    if args.stamp:
        for rel in args.pages:
            stamp(rel)
        return
    results = [sync(rel) for rel in args.pages]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
