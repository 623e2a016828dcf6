# ~/~ begin <<docs/lab/01b-triton-warmup.md#tests/test_triton_warmup_coverage.py>>[init]
"""Every tl.* call in the solutions of Lab 02 and Lab 03 part 2 is called in a worked code block
of the warm-up or the primer (tangled from docs/lab/01b-triton-warmup.md)."""

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ["src/minimodel/attention_flash.py", "src/minimodel/paged_attention.py"]
WORKED = ["docs/lab/01b-triton-warmup.md", "docs/gpu-primer.md"]

# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-coverage>>[init]
FENCE = re.compile(r"^( *)`{3} *\{\.python([^}]*)\}\n(.*?)^\1`{3}", re.S | re.M)
REFERENCE = re.compile(r"^( *)<<([^>]+)>>$", re.M)


def tl_calls(tree: ast.AST) -> set[str]:
    """The names f of every call tl.f(...) or tl.math.f(...) in tree, as "f" or "math.f"."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, func = [], node.func
            while isinstance(func, ast.Attribute):
                parts.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name) and func.id == "tl" and parts:
                names.add(".".join(reversed(parts)))
    return names


def code_blocks(page: Path) -> list[str]:
    """The Python code blocks of a page, dedented, each <<reference>> expanded as entangled
    tangles it (a block of another page, or none, becomes a pass), so that each parses."""
    found = []
    for indent, header, body in FENCE.findall(page.read_text()):
        body = textwrap.dedent("\n".join(line.removeprefix(indent) for line in body.split("\n")))
        found.append((re.search(r"#([\w-]+)", header), body))
    named: dict[str, str] = {}
    for name, body in found:
        if name:
            named[name[1]] = named.get(name[1], "") + body

    def expand(text: str, depth: int = 0) -> str:
        def one(m: re.Match) -> str:
            inner = named.get(m[2])
            if inner is None or depth > 20:
                return f"{m[1]}pass"
            return textwrap.indent(expand(inner, depth + 1), m[1]).rstrip("\n")
        return REFERENCE.sub(one, text)

    return [expand(body) for _, body in found]


def test_the_pages_have_python_blocks():
    for page in WORKED:
        assert code_blocks(ROOT / page), page


def test_every_tl_call_of_labs_02_and_03_is_worked_here_or_in_the_primer():
    needed = set().union(*(tl_calls(ast.parse((ROOT / f).read_text())) for f in SOLUTIONS))
    assert {"dot", "load", "store", "math.exp2"} <= needed  # the parse finds the kernels' calls
    worked = set()
    for page in WORKED:
        for block in code_blocks(ROOT / page):
            worked |= tl_calls(ast.parse(block))
    missing = sorted(needed - worked)
    assert not missing, f"tl.{', tl.'.join(missing)}: called in {SOLUTIONS}, in no worked " \
                        f"code block of {WORKED}"
# ~/~ end
# ~/~ end
