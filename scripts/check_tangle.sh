#!/usr/bin/env bash
# Proves that the pages under docs/ and the committed code agree (the Spanish edition, docs/es/,
# is no source: entangled.toml's ignore_list leaves it out, and tests/test_spanish_edition.py
# holds its code blocks equal to the English ones). Read-only: it tangles the docs in
# a temporary copy and compares. Exits non-zero when
#   - entangled logs any error or warning (it exits 0 even then, so its log is read),
#   - a tangled file differs from the committed one, or is produced but not committed,
#   - a committed file under src/, tests/ or exercises/ is produced by no page (and is not
#     hand-written below),
#   - a page tangles into a file outside src/, tests/ and exercises/ (the labs' skeletons),
#   - a block stands in two tangled files outside exercises/ (stitch would pick one by chance).
# The temporary tangle is a fresh one (entangled creates every file), so it also proves that
# creating and rewriting give the same bytes: the committed files were rewritten by `entangled
# sync`/`watch`/`tangle` as often as created.
set -euo pipefail

# Hand-written files allowed in the generated folders (the README's layout section names them).
HAND_WRITTEN=(
  tests/conftest.py
  tests/test_check_tangle.py
  tests/test_data_claims.py
  tests/test_entangled_workflow.py
  tests/test_exercises.py
  tests/test_lab_pages.py
  tests/prose_numbers.txt
  tests/test_prose_numbers.py
  tests/prose_numbers.es.txt
  tests/test_skeletons.py
  tests/test_spanish_edition.py
  tests/test_vllm_links.py
  tests/vllm-v0.10.2-files.txt
)
TANGLED_DIRS=(src tests exercises)

top=$(git rev-parse --show-toplevel)
cd "$top"
# The project's environment if it exists, else whatever python is on PATH.
PY=python
[ -x "$top/.venv/bin/python" ] && PY="$top/.venv/bin/python"
"$PY" -c 'import entangled' 2>/dev/null || { echo "check_tangle: no python with entangled (run 'make setup')"; exit 2; }
"$PY" -c 'from importlib.metadata import entry_points as e; assert "final_newline" in e(group="entangled.hooks").names' 2>/dev/null \
  || { echo "check_tangle: the project's entangled hook (final newlines) is not installed (run 'make setup')"; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r docs entangled.toml "$tmp"/
# entangled's own command, as `entangled tangle` runs it (the project's hook gives final newlines).
(cd "$tmp" && "$PY" -c 'import sys; from entangled.main import cli; sys.argv[0] = "entangled"; sys.exit(cli())' tangle) \
  >"$tmp/tangle.log" 2>&1 || { cat "$tmp/tangle.log"; echo "check_tangle: entangled failed"; exit 1; }

fail=0
if grep -Eq '\b(ERROR|WARNING|CRITICAL)\b' "$tmp/tangle.log"; then
  echo "check_tangle: entangled reported problems:"
  grep -E '\b(ERROR|WARNING|CRITICAL)\b' "$tmp/tangle.log"
  fail=1
fi

# What the docs produce, relative to the root (entangled's own database excluded).
produced=$(cd "$tmp" && find . -type f ! -path './docs/*' ! -path './.entangled/*' \
             ! -name entangled.toml ! -name tangle.log | sed 's|^\./||' | sort)

for f in $produced; do
  case "$f" in
    src/*|tests/*|exercises/*) ;;
    *) echo "check_tangle: a page tangles into $f, outside src/, tests/ and exercises/"; fail=1; continue ;;
  esac
  if ! git ls-files --error-unmatch "$f" >/dev/null 2>&1; then
    echo "check_tangle: $f is produced by the docs but not committed"; fail=1
  elif ! cmp -s "$tmp/$f" "$f"; then
    echo "check_tangle: $f differs from what the docs produce:"
    diff -u "$tmp/$f" "$f" | head -n 20 || true
    fail=1
  fi
done

# A block that ends in a blank line does not survive a round trip through stitch (stitch drops
# it, the next tangle differs): refuse it here rather than after someone's `entangled watch`.
trailing=$("$PY" - <<'PYEOF'
import pathlib
for page in sorted(pathlib.Path("docs").rglob("*.md")):
    lines, start = page.read_text().split("\n"), None
    for i, line in enumerate(lines):
        if start is None and line.startswith("``` {."):
            start = i
        elif start is not None and line.startswith("```"):
            if i > start + 1 and not lines[i - 1].strip():
                print(f"{page}:{start + 1}")
            start = None
PYEOF
)
if [ -n "$trailing" ]; then
  echo "check_tangle: these code blocks end in a blank line (stitch would drop it):"
  echo "$trailing"; fail=1
fi

# Stitch reads a block back from every tangled file it stands in, in an order that depends on
# Python's hash seed, so a block in two files could undo an edit. Skeletons are never read back
# (tools/minimodel_tools/entangled_hooks.py); every other block must stand in one file only.
twice=$(cd "$tmp" && for d in src tests; do [ -d "$d" ] && grep -rHo '~/~ begin <<[^>]*>>' "$d"; done \
          | sed 's/:.*~\/~ begin / /' | sort -u | awk '{print $2}' | sort | uniq -d || true)
if [ -n "$twice" ]; then
  echo "check_tangle: these blocks stand in two tangled files outside exercises/ (stitch would"
  echo "read them back in an order that depends on the hash seed):"; echo "$twice"; fail=1
fi

for f in $(git ls-files "${TANGLED_DIRS[@]}"); do
  case "$f" in *__pycache__*) continue ;; esac
  # here-strings, not pipes: under pipefail, `printf | grep -q` fails at random when grep exits
  # on an early match and printf dies of SIGPIPE
  if grep -Fqx -- "$f" <<<"$(printf '%s\n' "${HAND_WRITTEN[@]}")"; then continue; fi
  if ! grep -Fqx -- "$f" <<<"$produced"; then
    echo "check_tangle: $f is committed but produced by no page"; fail=1
  fi
done

if [ $fail -ne 0 ]; then
  echo "check_tangle: FAILED"
  exit 1
fi
echo "check_tangle: OK ($(printf '%s\n' $produced | wc -l) files agree with docs/)"
