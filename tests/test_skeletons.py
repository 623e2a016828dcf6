"""Each lab's skeleton shares its interface text with the solution (hand-written).

The skeleton and the package are tangled from the same interface blocks on the lab's page, and
stitch reads only the package's copy back (tools/minimodel_tools/entangled_hooks.py). This test
holds the result: every function, class and method a skeleton declares has, in the package, the
same signature, decorators and docstring."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKELETONS = sorted(ROOT.glob("exercises/lab*/*.py"))
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def definitions(tree: ast.Module) -> dict[str, Definition]:
    """Top-level functions and classes and the methods of those classes, by qualified name."""
    found = {}
    for node in tree.body:
        if isinstance(node, Definition):
            found[node.name] = node
            if isinstance(node, ast.ClassDef):
                for inner in node.body:
                    if isinstance(inner, Definition):
                        found[f"{node.name}.{inner.name}"] = inner
    return found


def interface(node: Definition) -> dict[str, object]:
    """What a reader of the task sees of a definition: everything but its body."""
    seen: dict[str, object] = {
        "decorators": [ast.unparse(d) for d in node.decorator_list],
        "docstring": ast.get_docstring(node, clean=False),
    }
    if isinstance(node, ast.ClassDef):
        seen["bases"] = [ast.unparse(b) for b in node.bases + node.keywords]
        seen["fields"] = [ast.unparse(s) for s in node.body if isinstance(s, ast.AnnAssign)]
    else:
        seen["arguments"] = ast.unparse(node.args)
        seen["returns"] = ast.unparse(node.returns) if node.returns else None
    return seen


def test_every_lab_has_a_skeleton():
    assert SKELETONS, "no skeletons under exercises/"


@pytest.mark.parametrize("skeleton", SKELETONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_skeleton_declares_what_the_solution_defines(skeleton):
    solution = ROOT / "src" / "minimodel" / skeleton.name
    assert solution.exists(), f"{skeleton} has no module minimodel.{skeleton.stem}"
    mine = definitions(ast.parse(skeleton.read_text()))
    theirs = definitions(ast.parse(solution.read_text()))
    assert mine, f"{skeleton} declares nothing"
    for name, node in mine.items():
        assert name in theirs, f"{skeleton} declares {name}, which minimodel.{skeleton.stem} lacks"
        assert interface(node) == interface(theirs[name]), (
            f"{name}: the skeleton's signature or docstring differs from the solution's")
