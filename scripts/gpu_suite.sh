#!/usr/bin/env bash
# The test suite on the GPU machine, written as the log the pages cite
# (data/gpu-tests-h200.log). Run on the device, from the repository root:
#   COMMIT=<short hash of the tree> bash scripts/gpu_suite.sh > "$OUT/gpu-tests-h200.log"
# With no paths it runs tests/ but tests/test_exercises.py, which re-runs every lab's tests in
# subprocesses (about 7 minutes alone, more with cold compile caches) and so runs apart. Or one
# part of the suite, named by its paths (the exercise machinery: data/gpu-tests-exercises-h200.log):
#   COMMIT=<short hash> bash scripts/gpu_suite.sh tests/test_exercises.py > "$OUT/gpu-tests-exercises-h200.log"
# No -m filter: the CPU tests run too (for real, not in the interpreter), with the gpu-marked ones.
set -uo pipefail
if (( $# )); then paths=("$@"); else paths=(tests --ignore=tests/test_exercises.py); fi
versions=$(python3 -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}")')
gpu=$(python3 -c 'import torch; print(torch.cuda.get_device_name())')
echo "# pytest on the $gpu ($versions), $(date -u +%F), tree of commit ${COMMIT:-unknown}:"
echo "# PYTHONPATH=src python3 -m pytest -n 8 -q -p no:cacheprovider --durations=10 ${paths[*]}"
start=$(date +%s)
PYTHONPATH=src python3 -m pytest -n 8 -q -p no:cacheprovider --durations=10 "${paths[@]}" 2>&1
status=$?
echo "# wall time: $(( $(date +%s) - start )) s, exit status $status"
exit $status
