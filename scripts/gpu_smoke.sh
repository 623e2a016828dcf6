#!/usr/bin/env bash
# Every GPU benchmark of bench/ on its smallest subset, on the H200 (a few minutes): that each
# still runs and writes its data in its schema, not a measurement. From the repository root:
#   MINIMODEL_COMMIT=<short hash> PYTHONPATH=src:. bash scripts/gpu_smoke.sh
# Each output goes under "$OUT/smoke/" (never data/); one PASS/FAIL line per benchmark, a failure
# does not stop the others, and the exit status is the number of failures.
# The CPU benchmarks (block_manager, kv_cache, paged_memory, train_variants) are left out: the
# tests and their own smoke commands run them on any machine.
set -uo pipefail
: "${OUT:?set OUT to a scratch folder}"
dir="$OUT/smoke"
mkdir -p "$dir/overlay" "$dir/ceilings"
export PYTHONPATH="${PYTHONPATH:-src:.}"
failed=0
smoke() {  # smoke NAME LIMIT_S COMMAND...
  local name=$1 limit=$2 start status
  shift 2
  start=$(date +%s)
  timeout "$limit" "$@" > "$dir/$name.log" 2>&1
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "PASS $name ($(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1))
    echo "FAIL $name (exit $status, $(( $(date +%s) - start )) s): $(tail -n 1 "$dir/$name.log")"
  fi
}
smoke ablate_hopper 60 python -m bench.ablate_hopper --smoke --out "$dir/ablate_hopper.json"
smoke attention 120 python -m bench.attention --quick --groups fa2 --out "$dir/attention.json"
smoke autows 60 python -m bench.autows --out "$dir/autows.json"
smoke ceilings 60 python -m bench.ceilings --name smoke --out "$dir/ceilings"
smoke exam 90 python -m bench.exam --measure --smoke --out "$dir/exam.json"
smoke fp8_decode 60 python -m bench.fp8_decode --rounds 1 --out "$dir/fp8_decode.json"
smoke gqa_decode 60 python -m bench.gqa_decode --smoke --out "$dir/gqa_decode.json"
smoke host_path 60 python -m bench.host_path --out "$dir/host_path.json"
smoke launch_costs 60 python -m bench.launch_costs --out "$dir/launch_costs.json"
smoke mufu 60 python -m bench.mufu --out "$dir/mufu.json"
# ncu (Nsight Compute) with counter access is needed for the bytes half; without it this fails
# after writing the timing half, roofline-overlay-h200.json
smoke overlay 120 python -m bench.overlay --smoke --out "$dir/overlay"
smoke bytes_interpreted 120 env TRITON_INTERPRET=1 python -m bench.bytes --smoke
smoke paged_checks 60 python -m bench.paged_checks --smoke --out "$dir/paged_checks.json"
smoke paged_decode 120 python -m bench.paged_decode --quick --rounds 1 --out "$dir/paged_decode.json"
smoke paged_decode_sweep 120 python -m bench.paged_decode --sweep --quick --out "$dir/paged_sweep.json"
smoke tune_flash 90 python -m bench.tune_flash --smoke --out "$dir/tune_flash.json"
echo "exit status $failed ($failed failed)"
exit "$failed"
