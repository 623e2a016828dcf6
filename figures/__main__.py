"""Every table and figure of the site, from the package and the committed data under data/.

python -m figures                      # write them all under docs/
python -m figures bench tiling         # only those of figures/bench.py and figures/tiling.py
python -m figures --check [NAME ...]   # fail if a committed one differs (CI)
"""

import argparse
import importlib
import pkgutil
import sys

import figures
from figures.core import ROOT

MODULES = [
    m.name for m in pkgutil.iter_modules(figures.__path__) if m.name not in ("core", "__main__")
]

parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
)
parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(MODULES))
parser.add_argument("--check", action="store_true", help="fail if a committed file is stale")
args = parser.parse_args()
if unknown := sorted(set(args.names) - set(MODULES)):
    parser.error(f"no module figures/{unknown[0]}.py; choose from {', '.join(MODULES)}")
stale = []
for name in args.names or MODULES:
    for rel, content in importlib.import_module(f"figures.{name}").outputs().items():
        data = content.encode() if isinstance(content, str) else content
        path = ROOT / "docs" / rel
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path.relative_to(ROOT)}")
        elif not path.exists() or path.read_bytes() != data:
            stale.append(rel)
if stale:
    sys.exit(f"stale generated files (run 'make figures'): {', '.join(stale)}")
