"""Every table and figure of the site: `python -m figures` writes them, `python -m figures --check`
fails if any committed one is stale. One module makes each group: `python -m figures.NAME`."""

import importlib

from figures.core import emit

MODULES = [
    "bench",
    "block_table",
    "bytes",
    "decode",
    "flash",
    "flash_hopper",
    "host_path",
    "lab04",
    "memory",
    "online_softmax",
    "overlay",
    "paged",
    "paged_checks",
    "paged_decode",
    "paged_memory",
    "pingpong",
    "prefix_hash",
    "roofline",
    "split_kv",
    "tiling",
]

if __name__ == "__main__":
    outputs: dict[str, str | bytes] = {}
    for name in MODULES:
        outputs.update(importlib.import_module(f"figures.{name}").outputs())
    emit(outputs)
