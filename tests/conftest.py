"""Test-session setup (hand-written, not tangled).

On a machine without CUDA the Triton kernels run in Triton's interpreter, which must be chosen
before `triton` is first imported; tests marked `gpu` are skipped there, with the reason.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
