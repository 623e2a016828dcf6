#!/usr/bin/env bash
# The whole test suite on the GPU machine, written as the log the pages cite
# (data/gpu-tests-h200.log). Run on the device, from the repository root:
#   COMMIT=<short hash of the tree> bash scripts/gpu_suite.sh > "$OUT/gpu-tests-h200.log"
# No -m filter: the CPU tests run too (for real, not in the interpreter), with the gpu-marked ones.
set -uo pipefail
versions=$(python3 -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}")')
gpu=$(python3 -c 'import torch; print(torch.cuda.get_device_name())')
echo "# pytest on the $gpu ($versions), $(date -u +%F), tree of commit ${COMMIT:-unknown}:"
echo "# PYTHONPATH=src python3 -m pytest -n 8 -q -p no:cacheprovider tests"
PYTHONPATH=src python3 -m pytest -n 8 -q -p no:cacheprovider tests 2>&1
